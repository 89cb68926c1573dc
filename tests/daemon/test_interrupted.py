"""Interrupted is not lost (issue 29): a run ended by what is not the agent (the daemon's
shutdown, an operator's abort) is never verified, never scored, never in a report's
denominator; a shutdown's runs are requeued and the next daemon runs them again.

Real daemons as subprocesses, real git, real agent processes (bash, sandboxed): the agent
reports each start over a Beacon and, on its first attempt only, waits (so the daemon is
stopped while it runs); on a later attempt it finishes at once.
"""

from __future__ import annotations

import json
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from events import cell as ev
from events.base import Event
from tests.conftest import make_repo
from tests.daemon.support import (
    Beacon,
    cli,
    command_campaign,
    read_all,
    start_daemon,
    submitted,
    wait_for,
)

INSTANCES = ("i1", "i2", "i3", "i4")


@pytest.fixture
def beacon(tmp_path: Path) -> Iterator[Beacon]:
    b = Beacon(tmp_path / "starts.txt")
    yield b
    b.close()


def _setup(tmp_path: Path, beacon: Beacon) -> Path:
    repo = tmp_path / "repo"
    base = make_repo(repo, {"a.txt": "a\n"})
    # Doubled braces: the command arm's argv is a str.format template ({run_dir} holds the
    # attempt: .../attempt-N/...).
    script = (
        f"{beacon.shell('{run_dir}')}; "
        'case "{run_dir}" in */attempt-1/*) sleep 300;; esac; echo done > out.txt; exit 0'
    )
    camp = command_campaign(
        tmp_path / "c.toml",
        name="ir",
        repo=repo,
        base=base,
        argv=["bash", "-c", script],
        instances=INSTANCES,
        timeout_s=600,
        # The agents report through a Beacon on the host's loopback: their network is the host's.
        arm_extra='\n[sandbox]\nnetwork = "host"',
    )
    return submitted(tmp_path / "home", camp)


def _starts(beacon: Beacon) -> list[str]:
    return beacon.path.read_text().split() if beacon.path.exists() else []


def _cell(home: Path, cell: str) -> list[Event]:
    return [r.event for r in read_all(home) if r.stream == f"cell/{cell}"]


def _of(events: list[Event], kind: type) -> list[Event]:
    return [e for e in events if isinstance(e, kind)]


def _running(home: Path, n: int) -> bool:
    started = [r for r in read_all(home) if isinstance(r.event, ev.RunStarted)]
    return len(started) >= n


def _outcomes(home: Path) -> dict[str, object]:
    out = cli(home, "report", "--json")
    assert out.returncode == 0, out.stderr
    arms = json.loads(out.stdout)["arms"]
    assert len(arms) == 1
    arm: dict[str, object] = arms[0]
    return arm


def _stop(daemon: object, tmp_path: Path, name: str) -> None:
    import subprocess

    assert isinstance(daemon, subprocess.Popen)
    try:
        assert daemon.wait(timeout=120) == 0, (tmp_path / name).read_text()[-3000:]
    finally:
        if daemon.poll() is None:
            daemon.kill()
            daemon.wait()


def test_sigint_interrupts_running_cells_and_the_next_daemon_reruns_them(
    tmp_path: Path, beacon: Beacon
) -> None:
    home = _setup(tmp_path, beacon)
    daemon = start_daemon(home, stderr=tmp_path / "d1.err")
    try:
        wait_for(lambda: len(_starts(beacon)) >= len(INSTANCES), "every agent to start")
        wait_for(lambda: _running(home, len(INSTANCES)), "every run to be recorded")
        daemon.send_signal(signal.SIGINT)
    finally:
        _stop(daemon, tmp_path, "d1.err")
    for iid in INSTANCES:
        events = _cell(home, f"ir:{iid}:CMD:0")
        (aborted,) = _of(events, ev.RunAborted)
        assert aborted.cause == "shutdown"  # type: ignore[attr-defined]
        (failed,) = _of(events, ev.CellFailed)
        assert failed.stage == "interrupted"  # type: ignore[attr-defined]
        assert failed.classification == "operator"  # type: ignore[attr-defined]
        (retried,) = _of(events, ev.CellRetried)
        assert retried.attempt == 2 and retried.requested_by == "resume"  # type: ignore[attr-defined]
        # Never verified: no patch nor verify on the interrupted attempt; its spend is
        # captured all the same (the money was spent), before the failure.
        assert not _of(events, ev.CellVerified)
        (recovered,) = _of(events, ev.CellRecovered)
        assert events.index(recovered) < events.index(failed)
    # Between the daemons, nothing of the interrupted runs counts.
    arm = _outcomes(home)
    assert arm["decided"] == 0 and arm["resolved"] == 0
    history = cli(home, "history", "ir:i1:CMD:0")
    assert history.returncode == 0, history.stderr
    assert "interrupted" in history.stdout and "resume" in history.stdout

    second = start_daemon(home, "--until-idle", stderr=tmp_path / "d2.err")
    _stop(second, tmp_path, "d2.err")
    starts = _starts(beacon)
    assert sorted(s.split("/attempt-")[1][0] for s in starts) == ["1"] * 4 + ["2"] * 4
    # The report equals a run without the interruption: 4 of 4, nothing else counted.
    arm = _outcomes(home)
    assert (arm["resolved"], arm["decided"], arm["cells"]) == (4, 4, 4)
    assert (arm["interrupted"], arm["infra_failed"], arm["operator_failed"]) == (0, 0, 0)
    assert arm["resolve_rate"] == 1.0


def test_an_operator_abort_is_interrupted_and_stays_until_retry(
    tmp_path: Path, beacon: Beacon
) -> None:
    home = _setup(tmp_path, beacon)
    daemon = start_daemon(home, stderr=tmp_path / "d1.err")
    try:
        wait_for(lambda: _running(home, len(INSTANCES)), "every run to be recorded")
        assert cli(home, "abort", "ir:i1:CMD:0").returncode == 0
        wait_for(lambda: _of(_cell(home, "ir:i1:CMD:0"), ev.CellFailed), "the abort to be recorded")
        daemon.send_signal(signal.SIGTERM)
    finally:
        _stop(daemon, tmp_path, "d1.err")
    events = _cell(home, "ir:i1:CMD:0")
    (aborted,) = _of(events, ev.RunAborted)
    assert aborted.cause == "operator"  # type: ignore[attr-defined]
    (failed,) = _of(events, ev.CellFailed)
    assert failed.stage == "interrupted" and not failed.retryable  # type: ignore[attr-defined]
    assert not _of(events, ev.CellRetried) and not _of(events, ev.CellVerified)

    second = start_daemon(home, "--until-idle", stderr=tmp_path / "d2.err")
    _stop(second, tmp_path, "d2.err")
    # The aborted cell stays aborted; the three others were requeued and ran again.
    arm = _outcomes(home)
    assert (arm["resolved"], arm["decided"], arm["interrupted"]) == (3, 3, 1)
    out = cli(home, "retry", "--campaign", "ir", "--where", "interrupted")
    assert out.returncode == 0, out.stderr
    third = start_daemon(home, "--until-idle", stderr=tmp_path / "d3.err")
    _stop(third, tmp_path, "d3.err")
    arm = _outcomes(home)
    assert (arm["resolved"], arm["decided"], arm["interrupted"]) == (4, 4, 0)
