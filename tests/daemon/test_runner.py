"""The cell runner (issue 28): one stop reason (pause, hold and shutdown are one field, and a
shutdown is never overwritten by a later pause or hold); an attempt's places computed once."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import msgspec
import pytest

from arenad.cell.machine import apply
from arenad.clock import system_clock
from arenad.daemon.runner import CellRunner, RunnerConfig
from arenad.executors.local import LocalExecutor
from arenad.home import Home, open_store
from events import cell as ev
from tests.events.samples import make_spec


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


def test_an_attempts_places_are_computed_once_per_attempt(runner: CellRunner) -> None:
    first = apply(None, ev.CellSubmitted(spec=make_spec(), attempt=1), 0)
    paths = runner._paths(first)
    assert runner._paths(first) is paths
    assert paths.attempt == 1 and paths.workspace == paths.run_dir / "ws"
    assert paths == runner.config.home.attempt_paths(first.spec, 1)
    second = msgspec.structs.replace(first, attempt=2)
    again = runner._paths(second)
    assert again.attempt == 2 and again.run_dir != paths.run_dir
    assert runner._paths(second) is again


def test_a_run_with_limits_is_unlimited_only_without_a_cgroup_or_a_container() -> None:
    from arenad.daemon.runner import _unlimited_reason
    from arenad.runs.cgroups import Limits
    from arenad.runs.executor import RunRecord, RunRequest
    from arenad.runs.files import RunFiles

    files = RunFiles(run_dir="/r", stdout="/r/out", stderr="/r/err")
    request = RunRequest(
        argv=["true"],
        cwd="/",
        env={},
        files=files,
        timeout_s=1.0,
        kill_grace_s=1.0,
        stream="cell/c",
        attempt=1,
    )
    record = RunRecord(pid=1, pgid=1, start_ticks=None, started_at_ms=0, deadline_ms=1)
    limited = msgspec.structs.replace(request, limits=Limits(memory_bytes=1 << 30))
    assert _unlimited_reason(request, record) is None  # none asked for
    assert _unlimited_reason(limited, record) == "the local executor applies no limits"
    # A container's limits are docker's flags: not unlimited, wherever it runs.
    contained = msgspec.structs.replace(limited, container="arenad-c-1")
    assert _unlimited_reason(contained, record) is None
