"""`arenad abort` and SIGTERM against a real `arenad daemon` subprocess (command arm, git)."""

from __future__ import annotations

import signal
from pathlib import Path

from events import cell as ev
from events.base import Event
from events.streams import cell_of
from tests.conftest import make_repo
from tests.daemon.support import (
    cell_row,
    cli,
    command_campaign,
    read_all,
    start_daemon,
    wait_for,
)

CELL = "ctl:i1:CMD:0"


def _events(home: Path, cell: str) -> list[Event]:
    return [r.event for r in read_all(home) if r.stream == f"cell/{cell}"]


def _has(home: Path, cell: str, kind: type) -> bool:
    return any(isinstance(e, kind) for e in _events(home, cell))


def _setup(tmp_path: Path) -> Path:
    home = tmp_path / "home"
    repo = tmp_path / "repo"
    base = make_repo(repo, {"a.txt": "a\n"})
    camp = command_campaign(
        tmp_path / "c.toml", name="ctl", repo=repo, base=base, argv=["bash", "-c", "sleep 60"]
    )
    assert cli(home, "init").returncode == 0
    out = cli(home, "submit", str(camp))
    assert out.returncode == 0, out.stderr
    return home


def test_abort_running_cell(tmp_path: Path) -> None:
    home = _setup(tmp_path)
    daemon = start_daemon(home, "--until-idle", stderr=tmp_path / "daemon.err")
    try:
        wait_for(lambda: _has(home, CELL, ev.RunStarted), "RunStarted")
        out = cli(home, "abort", CELL, "--reason", "test abort")
        assert out.returncode == 0, out.stderr
        assert daemon.wait(timeout=60) == 0
    finally:
        if daemon.poll() is None:
            daemon.kill()
            daemon.wait()
    aborted = [e for e in _events(home, CELL) if isinstance(e, ev.RunAborted)]
    assert len(aborted) == 1
    assert aborted[0].rc == 130
    assert "test abort" in aborted[0].reason


def test_sigterm_aborts_then_next_daemon_finishes(tmp_path: Path) -> None:
    home = _setup(tmp_path)
    daemon = start_daemon(home, stderr=tmp_path / "daemon.err")
    try:
        wait_for(lambda: _has(home, CELL, ev.RunStarted), "RunStarted")
        daemon.send_signal(signal.SIGTERM)
        assert daemon.wait(timeout=60) == 0
    finally:
        if daemon.poll() is None:
            daemon.kill()
            daemon.wait()
    aborted = [e for e in _events(home, CELL) if isinstance(e, ev.RunAborted)]
    assert len(aborted) == 1 and "shutting down" in aborted[0].reason
    assert not _has(home, CELL, ev.CellVerified)

    second = start_daemon(home, "--until-idle", stderr=tmp_path / "daemon2.err")
    assert second.wait(timeout=60) == 0
    events = _events(home, CELL)
    verified = [e for e in events if isinstance(e, ev.CellVerified)]
    assert len(verified) == 1 and verified[0].scored is False
    assert isinstance(events[-1], ev.CellRecovered)


def test_pause_resume_retry_and_max_parallel_reach_a_running_daemon(tmp_path: Path) -> None:
    home = tmp_path / "home"
    repo = tmp_path / "repo"
    base = make_repo(repo, {"a.txt": "a\n"})
    camp = command_campaign(
        tmp_path / "c.toml",
        name="live",
        repo=repo,
        base=base,
        # Long enough that the resume and retry commands land while the other runs.
        argv=["bash", "-c", "sleep 3"],
        instances=("i1", "i2", "i3"),
    )
    assert cli(home, "init").returncode == 0
    assert cli(home, "submit", str(camp)).returncode == 0
    first, paused, third = "live:i1:CMD:0", "live:i2:CMD:0", "live:i3:CMD:0"
    # Paused before any daemon runs: the daemon must leave it alone.
    assert cli(home, "pause", paused).returncode == 0
    daemon = start_daemon(home, "--max-parallel", "1", stderr=tmp_path / "daemon.err")
    try:

        def state(cell: str) -> tuple[str, int]:
            row = cell_row(home, cell)
            assert row is not None
            return str(row["state"]), int(row["attempt"])

        wait_for(lambda: state(third)[0] == "recovered", "the unpaused cells to finish")
        assert state(first)[0] == "recovered"
        assert state(paused)[0] == "submitted"
        # All three commands travel as events; the running daemon follows them.
        assert cli(home, "set-max-parallel", "3").returncode == 0
        assert cli(home, "resume", paused).returncode == 0
        assert cli(home, "retry", first).returncode == 0
        wait_for(lambda: state(paused)[0] == "recovered", "the resumed cell")
        wait_for(lambda: state(first) == ("recovered", 2), "the retried cell's new attempt")
    finally:
        daemon.send_signal(signal.SIGTERM)
        daemon.wait(timeout=60)
    # Run intervals as log positions (no clocks): RunStarted seq .. end-of-run seq.
    spans: dict[tuple[str, int], list[int]] = {}
    for r in read_all(home):
        if isinstance(r.event, ev.RunStarted | ev.RunCompleted):
            spans.setdefault((cell_of(r.stream), r.event.attempt), []).append(r.seq)

    def overlap(x: tuple[str, int], y: tuple[str, int]) -> bool:
        (a0, a1), (b0, b1) = spans[x], spans[y]
        return a0 < b1 and b0 < a1

    # While max-parallel was 1 the first runs did not overlap; at 3, the resumed cell and
    # the retried attempt ran side by side.
    assert not overlap((first, 1), (third, 1))
    assert overlap((paused, 1), (first, 2))
