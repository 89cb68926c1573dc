"""Control reaches a running daemon: abort, pause, resume, retry and max-parallel (the
daemon in-process, on a real home), and SIGTERM (a real `arenad daemon` subprocess)."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest

from arenad import app
from arenad.daemon.daemon import DaemonOptions
from arenad.home import Home
from events import cell as ev
from events.base import Event
from events.streams import cell_of
from tests.conftest import make_repo
from tests.daemon.inprocess import init_and_submit, running_daemon
from tests.daemon.support import (
    command_campaign,
    read_all,
    start_daemon,
    submitted,
    wait_for,
)

CELL = "ctl:i1:CMD:0"


def _events(home: Path, cell: str) -> list[Event]:
    return [r.event for r in read_all(home) if r.stream == f"cell/{cell}"]


def _has(home: Path, cell: str, kind: type) -> bool:
    return any(isinstance(e, kind) for e in _events(home, cell))


def _campaign(tmp_path: Path, **kwargs: object) -> Path:
    repo = tmp_path / "repo"
    base = make_repo(repo, {"a.txt": "a\n"})
    args: dict[str, object] = {"name": "ctl", "argv": ["bash", "-c", "sleep 60"], **kwargs}
    return command_campaign(tmp_path / "c.toml", repo=repo, base=base, **args)  # type: ignore[arg-type]


def _setup(tmp_path: Path) -> Path:
    home = tmp_path / "home"
    camp = _campaign(tmp_path)
    return submitted(home, camp)


async def test_abort_running_cell(tmp_path: Path) -> None:
    home = tmp_path / "home"
    await init_and_submit(home, _campaign(tmp_path))
    async with running_daemon(home, DaemonOptions(until_idle=True)) as daemon:

        async def started() -> bool:
            return any(isinstance(e, ev.RunStarted) for e in await daemon.events(CELL))

        await daemon.wait_for(started, "RunStarted")
        await app.abort_cell(Home(home), CELL, "test abort")
        assert await daemon.stopped() == 0
        aborted = [e for e in await daemon.events(CELL) if isinstance(e, ev.RunAborted)]
    assert len(aborted) == 1
    assert aborted[0].rc == 130
    assert "test abort" in aborted[0].reason


@pytest.mark.parametrize("step", ["verify", "judge"])
async def test_an_operator_abort_stops_verify_and_the_judge(tmp_path: Path, step: str) -> None:
    home = tmp_path / "home"
    # Verify and the judge run on the cell's grading checkout: the marker is there.
    marker = home / "campaigns/ctl/rep-0/attempt-1/runs/i1/CMD/grade/ws/started"
    hold = "touch started; exec sleep 600"
    verdict = json.dumps(json.dumps({"resolved": True}))
    camp = _campaign(
        tmp_path,
        argv=["bash", "-c", "echo b >> a.txt"],
        verify_cmd=hold if step == "verify" else "true",
        extra=f"[judge]\ncommand = {json.dumps(hold if step == 'judge' else f'echo {verdict}')}",
    )
    await init_and_submit(home, camp)
    async with running_daemon(home, DaemonOptions(until_idle=True)) as daemon:
        await daemon.wait_for(marker.exists, f"{step} to start")
        await app.abort_cell(Home(home), CELL, "enough")
        assert await daemon.stopped(timeout_s=30) == 0
        events = await daemon.events(CELL)
    verified = next(e for e in events if isinstance(e, ev.CellVerified))
    judged = [e for e in events if isinstance(e, ev.JudgeVerdictRecorded)]
    if step == "verify":
        assert verified.verify_rc == 130 and verified.verify_pass is False
        assert verified.scored is False and "verify aborted: enough" in (
            verified.not_scored_reason or ""
        )
        assert judged == []  # an attempt that does not count is not judged
    else:
        assert verified.verify_pass is True and verified.scored is True
        (verdict_event,) = judged
        assert verdict_event.resolved is None and "judge aborted" in verdict_event.verdict_json
    assert isinstance(events[-1], ev.CellRecovered)


def test_sigterm_interrupts_the_run_and_requeues_the_cell(tmp_path: Path) -> None:
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
    assert aborted[0].cause == "shutdown"
    assert not _has(home, CELL, ev.CellVerified)
    # Interrupted, not the agent's result: requeued for the next daemon (issue 29; the
    # rerun itself: tests/daemon/test_interrupted.py).
    events = _events(home, CELL)
    assert isinstance(events[-1], ev.CellRetried) and events[-1].requested_by == "resume"


async def test_pause_resume_retry_and_max_parallel_reach_a_running_daemon(
    tmp_path: Path,
) -> None:
    home = tmp_path / "home"
    camp = _campaign(
        tmp_path,
        name="live",
        # Each run lasts until the test lets it end (a file in its own workspace): which runs
        # overlap is then the daemon's doing alone, not a sleep's.
        argv=["bash", "-c", "while [ ! -e go ]; do sleep 0.02; done"],
        instances=("i1", "i2", "i3"),
    )
    await init_and_submit(home, camp)
    first, paused, third = "live:i1:CMD:0", "live:i2:CMD:0", "live:i3:CMD:0"
    h = Home(home)
    # Paused before any daemon runs: the daemon must leave it alone.
    await app.pause_cell(h, paused)
    async with running_daemon(home, DaemonOptions(max_parallel=1)) as daemon:

        async def is_(cell: str, want: tuple[str, int]) -> bool:
            return await daemon.state(cell) == want

        async def running(cell: str, attempt: int) -> Path | None:
            """The attempt's workspace once its run has started."""
            events = await daemon.events(cell)
            if not any(isinstance(e, ev.RunStarted) and e.attempt == attempt for e in events):
                return None
            made = [e for e in events if isinstance(e, ev.CellMaterialized)]
            return Path([m for m in made if m.attempt == attempt][-1].workspace)

        released: set[tuple[str, int]] = set()

        async def release_each(*runs: tuple[str, int]) -> bool:
            """Let each run end once it has started; true when all are recovered."""
            for run in runs:
                if run not in released and (ws := await running(*run)) is not None:
                    (ws / "go").touch()
                    released.add(run)
            return all([await is_(cell, ("recovered", attempt)) for cell, attempt in runs])

        await daemon.wait_for(lambda: release_each((first, 1), (third, 1)), "the unpaused cells")
        assert await daemon.state(paused) == ("submitted", 1)
        # All three commands travel as events; the running daemon follows them.
        await app.set_max_parallel(h, 3)
        await app.resume_cell(h, paused)
        await app.retry_cell(h, first, "again")
        both = ((paused, 1), (first, 2))

        async def both_running() -> bool:
            return all([await running(*run) is not None for run in both])

        await daemon.wait_for(both_running, "the resumed cell and the retried attempt to run")
        await daemon.wait_for(lambda: release_each(*both), "the resumed and retried runs")
        records = await daemon.records()
    # Run intervals as log positions (no clocks): RunStarted seq .. end-of-run seq.
    spans: dict[tuple[str, int], list[int]] = {}
    for r in records:
        if isinstance(r.event, ev.RunStarted | ev.RunCompleted):
            spans.setdefault((cell_of(r.stream), r.event.attempt), []).append(r.seq)

    def overlap(x: tuple[str, int], y: tuple[str, int]) -> bool:
        (a0, a1), (b0, b1) = spans[x], spans[y]
        return a0 < b1 and b0 < a1

    # While max-parallel was 1 the first runs did not overlap; at 3, the resumed cell and
    # the retried attempt ran side by side.
    assert not overlap((first, 1), (third, 1))
    assert overlap((paused, 1), (first, 2))


def test_a_daemon_limited_to_some_campaigns_runs_only_theirs(tmp_path: Path) -> None:
    import asyncio
    import os

    from arenad.daemon.daemon import run_daemon
    from arenad.errors import UserError

    repo = tmp_path / "repo"
    base = make_repo(repo, {"a.txt": "a\n"})
    camps = [
        command_campaign(tmp_path / f"{n}.toml", name=n, repo=repo, base=base, argv=["true"])
        for n in ("ca", "cb")
    ]
    home = submitted(tmp_path / "home", *camps)
    options = DaemonOptions(until_idle=True, campaigns=("ca",))
    assert asyncio.run(run_daemon(Home(home), options, dict(os.environ))) == 0
    assert isinstance(_events(home, "ca:i1:CMD:0")[-1], ev.CellRecovered)
    assert isinstance(_events(home, "cb:i1:CMD:0")[-1], ev.CellSubmitted)
    before = len(read_all(home))
    with pytest.raises(UserError, match="--campaign: no campaign 'nope'"):
        asyncio.run(run_daemon(Home(home), DaemonOptions(until_idle=True, campaigns=("nope",)), {}))
    assert len(read_all(home)) == before
