"""No silent stall, through a real daemon: a step past its limit is logged, a step that
can never finish (its ingestion gone) fails the cell, and status names overdue cells."""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Sequence
from pathlib import Path

import pytest

from arenad.app import init_home
from arenad.app.submit import submit_campaign
from arenad.cell.retry import RetryPolicy
from arenad.cell.writer import CellWriter
from arenad.daemon import stalls
from arenad.daemon.daemon import Daemon, DaemonOptions
from arenad.executors.local import LocalExecutor, LocalSite
from arenad.home import Home, open_store
from arenad.ingest.offsets import Positions
from arenad.ingest.watcher import Sink, WatchSource
from arenad.runs.executor import Observation, Run, RunRequest, Site, Tools
from events import cell as ev
from events.base import Event
from events.ingest import InotifyEventsLost
from events.specs import CellSpec
from tests.conftest import make_repo
from tests.daemon.support import cli, command_campaign, read_all

CELL = "st:i1:CMD:0"


async def test_a_step_past_its_limit_is_logged_with_the_cell_and_the_step(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="arenad.stalls")
    async with stalls.reported("c:i:A:0", "verify", 0.05):
        # Until the first warning and its doubling have been logged.
        while len(caplog.records) < 2:
            await asyncio.sleep(0.01)
    first = caplog.records[0].getMessage()
    assert first.startswith("c:i:A:0: verify has taken") and "limit is 0 s" in first
    count = len(caplog.records)
    await asyncio.sleep(0.3)
    assert len(caplog.records) == count  # nothing once the step is over


class _BrokenSinkSite(LocalSite):
    """A local site whose runs' ingestion fails on its first batch (a sink that raises)."""

    async def start(self, request: RunRequest) -> Run:
        run = await super().start(request)
        observe = run.observe

        async def broken(events: Sequence[Event]) -> None:
            raise RuntimeError("the sink broke")

        async def observing(
            sources: Sequence[WatchSource], positions: Positions, sink: Sink
        ) -> Observation:
            return await observe(sources, positions, broken)

        run.observe = observing  # type: ignore[method-assign]
        return run


class _BrokenSinkExecutor(LocalExecutor):
    async def site(self, cell_id: str, attempt: int, spec: CellSpec | None = None) -> Site:
        return _BrokenSinkSite(self)


def _setup(tmp_path: Path, argv: list[str]) -> Home:
    repo = tmp_path / "repo"
    base = make_repo(repo, {"a.txt": "a\n"})
    camp = command_campaign(tmp_path / "c.toml", name="st", repo=repo, base=base, argv=argv)
    home = Home(tmp_path / "home")

    async def go() -> None:
        await init_home(home)
        await submit_campaign(home, camp)

    asyncio.run(go())
    return home


def test_ingestion_that_stops_aborts_the_run_and_fails_the_cell(tmp_path: Path) -> None:
    # The agent would run for a minute; with its ingestion gone the daemon must not wait.
    home = _setup(tmp_path, ["bash", "-c", "echo '{{}}'; sleep 60"])
    options = DaemonOptions(max_parallel=1, until_idle=True, retry=RetryPolicy(max_infra_retries=0))

    def executor(h: Home, tools: Tools) -> LocalExecutor:
        return _BrokenSinkExecutor(store_path=h.db_path, tools=tools)

    async def go() -> None:
        async with open_store(home) as store:
            daemon = Daemon(store, home, options, dict(os.environ), executor=executor)
            async with asyncio.timeout(45):
                assert await daemon.run() == 0

    asyncio.run(go())
    events = [r.event for r in read_all(home.root) if r.stream == f"cell/{CELL}"]
    aborted = [e for e in events if isinstance(e, ev.RunAborted)]
    assert len(aborted) == 1 and "ingestion stopped" in (aborted[0].reason or "")
    failed = events[-1]
    assert isinstance(failed, ev.CellFailed)
    assert (failed.stage, failed.classification) == ("ingest", "infrastructure")
    assert "the sink broke" in failed.error


def test_status_names_cells_overdue_in_a_transient_state(tmp_path: Path) -> None:
    home = _setup(tmp_path, ["true"])

    async def materialized_long_ago() -> int:
        async with open_store(home) as store:
            writer = CellWriter(store, CELL)
            state = await writer.load()
            after = await writer.append(
                [
                    ev.CellMaterialized(
                        attempt=state.attempt,
                        run_dir=str(tmp_path / "run"),
                        workspace=str(tmp_path / "run" / "ws"),
                        head="0" * 40,
                        clean=True,
                        materializer="git",
                    )
                ]
            )
            return after.updated_at_ms

    at = asyncio.run(materialized_long_ago())
    on_time = cli(home.root, "status", "--as-of", str(at + 1000))
    assert on_time.returncode == 0, on_time.stderr
    assert "overdue" not in on_time.stdout
    late = cli(home.root, "status", "--as-of", str(at + 3_600_000))
    assert late.returncode == 0, late.stderr
    lines = late.stdout.splitlines()
    assert "overdue: 1 cell(s) in a transient state longer than their steps allow" in lines
    row = next(line for line in lines if line.startswith(f"  {CELL}"))
    assert "materialized" in row and "3600" in row and "spawn" in row
    as_json = cli(home.root, "status", "--json", "--as-of", str(at + 3_600_000))
    assert '"overdue":[{"cell_id":"st:i1:CMD:0","state":"materialized"' in as_json.stdout


class _LosingExecutor(LocalExecutor):
    """A local executor whose shared inotify instance reports a loss at start, as the real
    one does when the kernel's queue overflows (tests/ingest has the real overflow)."""

    async def start(self) -> None:
        await super().start()
        assert self.tools.report is not None
        self.tools.report(InotifyEventsLost(watchers=3))


def test_what_the_executor_reports_is_recorded_on_the_daemon_stream(tmp_path: Path) -> None:
    home = _setup(tmp_path, ["true"])
    options = DaemonOptions(max_parallel=1, until_idle=True)

    def executor(h: Home, tools: Tools) -> LocalExecutor:
        return _LosingExecutor(store_path=h.db_path, tools=tools)

    async def go() -> None:
        async with open_store(home) as store:
            daemon = Daemon(store, home, options, dict(os.environ), executor=executor)
            async with asyncio.timeout(45):
                assert await daemon.run() == 0

    asyncio.run(go())
    daemon_events = [r.event for r in read_all(home.root) if r.stream == "daemon"]
    lost = [e for e in daemon_events if isinstance(e, InotifyEventsLost)]
    assert lost == [InotifyEventsLost(watchers=3)]
