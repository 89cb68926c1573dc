"""Helpers for supervisor-arm tests: the stand-in driver's campaign, a daemon run, and
checks that ingested line events reproduce the files they came from."""

from __future__ import annotations

import json
import sys
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from arenad.ingest.lines import line_bytes
from events.base import Event, Recorded
from events.ingest import FileTruncated, IngestionClosed, LineIngested, LineMalformed
from tests.daemon.support import read_all, start_daemon

DRIVER = Path(__file__).resolve().parents[1] / "fakes" / "supervisor-driver"
SUP_RUN = Path(".loops") / "supervisor" / "sup-1"
"""The stand-in driver's run dir, relative to the workspace."""


def sandbox_shares() -> list[str]:
    """What the stand-in driver needs shown in the cell's sandbox: this checkout's venv (its
    interpreter) and the fakes dir it lives in (the campaign's documented way to share an
    agent installed somewhere unusual)."""
    return [sys.prefix, str(DRIVER.parent)]


def supervisor_campaign(
    path: Path,
    *,
    name: str,
    repo: Path,
    base: str,
    loops: Path,
    instance_id: str = "i1",
    problem_statement: str = "do the thing",
    verify_cmd: str = "true",
    timeout_s: float = 60,
    worker_model: str = "scripted/w",
    driver_model: str = "scripted/d",
    opencode_bin: Path | None = None,
    shares: Sequence[str] = (),
    network: str = "none",
) -> Path:
    """A one-cell campaign whose supervisor arm ``SUP`` runs the stand-in driver; the arm
    creates the cell's opencode store first with ``opencode_bin`` (None: no store init; its
    install is then not shown to the cell unless in ``shares``)."""
    driver = json.dumps([sys.executable, str(DRIVER), "{ws}", "{params}"])
    if opencode_bin is None:
        store_init = "init_opencode_store = false"
    else:
        store_init = f"opencode_bin = {json.dumps(str(opencode_bin))}"
    # The stand-in driver alone talks to no model (and the daemon's env names none): the
    # default for a supervisor arm, "model", would refuse to launch without an endpoint.
    # Real opencode workers against a scripted model pass "model".
    network_line = f'network = "{network}"'
    path.write_text(
        f"""name = "{name}"
split = "dev"
[materializer]
kind = "git"
source = {json.dumps(str(repo))}
[[instances]]
instance_id = "{instance_id}"
base_commit = "{base}"
problem_statement = {json.dumps(problem_statement)}
verify_cmd = {json.dumps(verify_cmd)}
[[arms]]
name = "SUP"
kind = "supervisor"
worker_model = "{worker_model}"
driver_model = "{driver_model}"
timeout_s = {timeout_s}
loops_repo = {json.dumps(str(loops))}
driver_cmd = {driver}
env_knobs = {{ DRIVER_CANCEL_TIMEOUT_MS = "1000" }}
{store_init}
[sandbox]
read_only = {json.dumps([*sandbox_shares(), *shares])}
{network_line}
"""
    )
    return path


def daemon_until_idle(
    home: Path, env: Mapping[str, str], stderr: Path, timeout_s: float = 120
) -> list[Recorded]:
    """``arenad daemon --until-idle`` as a subprocess; every recorded event once it exits."""
    daemon = start_daemon(home, "--until-idle", env=env, stderr=stderr)
    try:
        assert daemon.wait(timeout=timeout_s) == 0, stderr.read_text()
    finally:
        if daemon.poll() is None:
            daemon.kill()
            daemon.wait()
    return read_all(home)


def stream_events(records: Iterable[Recorded], stream: str) -> list[Event]:
    return [r.event for r in records if r.stream == stream]


LineEvent = LineIngested | LineMalformed


def line_events(events: Iterable[Event]) -> dict[tuple[str, str], list[LineEvent]]:
    """Line events per ``(source, path)``, in log order."""
    files: dict[tuple[str, str], list[LineEvent]] = defaultdict(list)
    for e in events:
        if isinstance(e, LineIngested | LineMalformed):
            files[(e.source, e.path)].append(e)
    return dict(files)


def ingested_bytes(events: Iterable[Event], source: str, path: str) -> bytes:
    """The file's bytes as its line events since its last truncation spell them."""
    out = b""
    for e in events:
        if isinstance(e, FileTruncated) and (e.source, e.path) == (source, path):
            out = b""
        elif isinstance(e, LineIngested | LineMalformed) and (e.source, e.path) == (source, path):
            out += line_bytes(e)
    return out


def assert_contiguous(events: Iterable[Event], source: str, path: str) -> None:
    """Each line event starts where the previous one ended, from 0 after a truncation:
    no line recorded twice, none skipped."""
    expected = 0
    for e in events:
        if isinstance(e, FileTruncated) and (e.source, e.path) == (source, path):
            expected = 0
        elif isinstance(e, LineIngested | LineMalformed) and (e.source, e.path) == (source, path):
            assert e.offset == expected, (path, e.offset, expected)
            expected = e.offset + e.length + (0 if e.partial else 1)


def supervisor_files(sup_dir: Path) -> list[str]:
    """The line files of a supervisor run dir (rollout-v1 §6), relative to it: the journal,
    progress, and the worker files but not their inboxes. Listed here independently of
    arenad's own selection, so a selection bug cannot hide itself."""
    found = [name for name in ("journal.jsonl", "progress.ndjson") if (sup_dir / name).is_file()]
    found += [
        f"workers/{p.name}"
        for p in (sup_dir / "workers").glob("*.ndjson")
        if not p.name.endswith(".inbox.ndjson")
    ]
    return sorted(found)


def assert_files_ingested_exactly(
    events: list[Event], sup_dir: Path, brain: Path, gateway: Path | None = None
) -> None:
    """Every selected file on disk, and no other, reproduced byte for byte by its events
    (``gateway``: the model gateway's journal of the attempt's calls, when it has one)."""
    on_disk = {("supervisor", rel): sup_dir / rel for rel in supervisor_files(sup_dir)}
    on_disk[("brain", brain.name)] = brain
    if gateway is not None:
        on_disk[("gateway", gateway.name)] = gateway
    assert set(line_events(events)) == set(on_disk)
    for (source, rel), file in on_disk.items():
        assert ingested_bytes(events, source, rel) == file.read_bytes(), rel
        assert_contiguous(events, source, rel)


def live_group_members(pgid: int) -> list[int]:
    """Pids in process group ``pgid`` that are not zombies, from /proc.

    A killed driver's children are reparented to init and reaped whenever init gets to them;
    until then they are zombies (dead, but still answering ``killpg(pgid, 0)``).
    """
    live: list[int] = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue  # exited while we looked
        # pid (comm) state ppid pgrp ...: comm may hold spaces and parentheses.
        fields = text[text.rindex(")") + 2 :].split()
        if int(fields[2]) == pgid and fields[0] not in ("Z", "X", "x"):
            live.append(int(stat.parent.name))
    return live


def assert_closed_once(
    events: list[Event], sup_dir: Path, brain: Path, gateway: Path | None = None
) -> None:
    """One IngestionClosed, after everything else, naming each watched file's final size."""
    closed = [e for e in events if isinstance(e, IngestionClosed)]
    assert len(closed) == 1 and events[-1] is closed[0], closed
    sizes = {
        f"supervisor:{rel}": (sup_dir / rel).stat().st_size for rel in supervisor_files(sup_dir)
    }
    if (sup_dir / "state.json").is_file():
        sizes["supervisor:state.json"] = (sup_dir / "state.json").stat().st_size
    sizes[f"brain:{brain.name}"] = brain.stat().st_size
    if gateway is not None:
        sizes[f"gateway:{gateway.name}"] = gateway.stat().st_size
    assert closed[0].files == sizes
