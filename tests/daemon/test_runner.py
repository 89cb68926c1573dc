"""The cell runner's one stop reason (issue 28): pause, hold and shutdown are one field, and a
shutdown is never overwritten by a later pause or hold."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from arenad.clock import system_clock
from arenad.daemon.runner import CellRunner, RunnerConfig
from arenad.executors.local import LocalExecutor
from arenad.home import Home, open_store


@pytest.fixture
async def runner(tmp_path: Path) -> AsyncIterator[CellRunner]:
    home = Home(tmp_path / "home")
    async with open_store(home, create=True) as store:
        yield CellRunner(
            store,
            RunnerConfig(home=home, base_env={}),
            "c:i1:CMD:0",
            system_clock,
            LocalExecutor(store_path=home.db_path),
            may_start=lambda: False,
        )


async def test_a_runner_walks_until_a_reason_to_stop_comes(runner: CellRunner) -> None:
    assert runner.stopping is None
    runner.request_pause()
    assert runner.stopping == "pause"


async def test_a_shutdown_is_never_overwritten_by_a_pause(runner: CellRunner) -> None:
    runner.request_shutdown(abort_runs=False)
    runner.request_pause()
    assert runner.stopping == "shutdown"


async def test_a_shutdown_overwrites_a_pause(runner: CellRunner) -> None:
    runner.request_pause()
    runner.request_shutdown()
    assert runner.stopping == "shutdown"


async def test_a_cell_whose_campaign_may_not_start_is_held_unless_shutting_down(
    runner: CellRunner,
) -> None:
    assert runner._may_start() is False
    assert runner.stopping == "held"
    runner.request_shutdown()
    assert runner._may_start() is False
    assert runner.stopping == "shutdown"
