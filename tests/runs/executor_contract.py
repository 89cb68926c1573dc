"""The contract every executor must pass (arenad.runs.executor), with real processes.

A backend's test module subclasses :class:`ExecutorContract` and provides the
``make_executor`` fixture: a factory of started executors over one test's directory (a
second call is "the next daemon": it must attach to what the first one started).
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest

from arenad.ingest.offsets import Positions, fold_positions
from arenad.ingest.watcher import file_source
from arenad.runs import groups
from arenad.runs.executor import Executor, Run, RunRequest, Tools
from arenad.runs.files import RunFiles
from events.base import Event
from events.cell import RunStarted
from events.ingest import IngestionClosed, LineIngested, LineMalformed
from events.specs import CellSpec, CommandArm, ExecutorSpec, InstanceSpec, MaterializerSpec

MakeExecutor = Callable[[], Awaitable[Executor]]
STREAM = "cell/c:i:A:0"


def cell_spec(executor: ExecutorSpec | None = None) -> CellSpec:
    """A cell's spec, for what an executor reads of it (where it may run)."""
    return CellSpec(
        campaign="c",
        instance=InstanceSpec(
            instance_id="i", base_commit="0" * 40, problem_statement="p", verify_cmd="true"
        ),
        arm=CommandArm(name="A", argv=["true"]),
        rep=0,
        materializer=MaterializerSpec(kind="git", source="/nonexistent"),
        executor=executor,
    )


def _request(run_dir: Path, script: str, *, timeout_s: float = 60.0) -> RunRequest:
    run_dir.mkdir(parents=True, exist_ok=True)
    return RunRequest(
        argv=["bash", "-c", script],
        cwd=str(run_dir),
        env=dict(os.environ),
        files=RunFiles(
            run_dir=str(run_dir), stdout=str(run_dir / "out"), stderr=str(run_dir / "err")
        ),
        timeout_s=timeout_s,
        kill_grace_s=0.5,
        stream=STREAM,
        attempt=1,
    )


def _started(run: Run, request: RunRequest) -> RunStarted:
    """The RunStarted the runner would record for ``run``."""
    r = run.record
    return RunStarted(
        attempt=request.attempt,
        argv=request.argv,
        cwd=request.cwd,
        pid=r.pid,
        pgid=r.pgid,
        process_start_ticks=r.start_ticks,
        started_at_ms=r.started_at_ms,
        deadline_ms=r.deadline_ms,
        timeout_s=request.timeout_s,
        kill_grace_s=request.kill_grace_s,
        exit_file=str(request.files.exit_file),
        stdout_path=request.files.stdout,
        stderr_path=request.files.stderr,
        executor=r.executor,
        node=r.node,
    )


class Collected:
    """A sink that keeps every batch (what the log would hold)."""

    def __init__(self) -> None:
        self.events: list[Event] = []

    async def __call__(self, batch: list[Event]) -> None:
        self.events.extend(batch)

    def lines(self) -> list[str]:
        # Lines that are not JSON are recorded too (as malformed): every line counts.
        return [e.raw for e in self.events if isinstance(e, LineIngested | LineMalformed)]


async def _until(cond: Callable[[], bool], what: str, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.02)


def _double(tools: Tools, x: int) -> int:
    return 2 * x


async def _triple(tools: Tools, x: int) -> int:
    return 3 * x


class ExecutorContract:
    @pytest.fixture
    async def executor(self, make_executor: MakeExecutor) -> AsyncIterator[Executor]:
        executor = await make_executor()
        try:
            yield executor
        finally:
            await executor.close()

    async def test_steps_run_at_the_site(self, executor: Executor) -> None:
        site = await executor.site("c:i:A:0", 1)
        assert await site.call_blocking(_double, 21) == 42
        assert await site.call(_triple, 5) == 15

    async def test_an_unreleased_run_starts_nothing(
        self, executor: Executor, tmp_path: Path
    ) -> None:
        site = await executor.site("c:i:A:0", 1)
        marker = tmp_path / "ran"
        run = await site.start(_request(tmp_path / "run", f"touch {marker}"))
        await run.cancel_unreleased()
        assert not marker.exists()
        assert not await run.alive()

    async def test_a_released_run_exits_with_its_code_and_its_lines_are_observed(
        self, executor: Executor, tmp_path: Path
    ) -> None:
        site = await executor.site("c:i:A:0", 1)
        request = _request(tmp_path / "run", "for i in $(seq 1 50); do echo line-$i; done; exit 3")
        run = await site.start(request)
        sink = Collected()
        source = file_source("stdout", Path(request.files.stdout))
        observation = await run.observe([source], Positions(), sink)
        await run.release()
        end = await run.wait()
        await observation.close()
        assert end.how == "exited" and end.code == 3
        assert sink.lines() == [f"line-{i}" for i in range(1, 51)]
        assert isinstance(sink.events[-1], IngestionClosed)
        assert not groups.group_alive(run.record.pgid)

    async def test_an_abort_ends_the_whole_group(self, executor: Executor, tmp_path: Path) -> None:
        site = await executor.site("c:i:A:0", 1)
        request = _request(tmp_path / "run", "sleep 1000 & echo $!; wait")
        run = await site.start(request)
        await run.release()
        out = Path(request.files.stdout)
        await _until(lambda: out.exists() and out.read_text().strip() != "", "the child's pid")
        child = int(out.read_text().split()[0])
        run.abort("test")
        end = await run.wait()
        assert end.how == "aborted" and end.code == groups.ABORT_CODE and end.reason == "test"
        assert not groups.group_alive(run.record.pgid)
        fields = groups.stat_fields(child)
        assert fields is None or fields[0] in ("Z", "X"), "the agent's child outlived it"

    async def test_the_deadline_ends_the_run(self, executor: Executor, tmp_path: Path) -> None:
        site = await executor.site("c:i:A:0", 1)
        run = await site.start(_request(tmp_path / "run", "exec sleep 1000", timeout_s=0.5))
        await run.release()
        end = await run.wait()
        assert end.how == "timed_out" and end.code == groups.TIMEOUT_CODE

    async def test_activity_moves_with_output(self, executor: Executor, tmp_path: Path) -> None:
        site = await executor.site("c:i:A:0", 1)
        request = _request(tmp_path / "run", "echo one; exec sleep 1000")
        run = await site.start(request)
        before = await run.activity()
        await run.release()
        out = Path(request.files.stdout)
        await _until(lambda: out.exists() and out.stat().st_size > 0, "output")
        assert await run.activity() != before
        run.abort("done")
        await run.wait()

    async def test_the_next_daemon_attaches_and_resumes_at_the_logged_offsets(
        self, make_executor: MakeExecutor, tmp_path: Path
    ) -> None:
        first = await make_executor()
        request = _request(
            tmp_path / "run",
            "for i in $(seq 1 20); do echo a-$i; done; read -r _ < fifo; "
            "for i in $(seq 1 20); do echo b-$i; done",
        )
        os.mkfifo(tmp_path / "run" / "fifo")
        site = await first.site("c:i:A:0", 1)
        run = await site.start(request)
        sink = Collected()
        source = file_source("stdout", Path(request.files.stdout))
        observation = await run.observe([source], Positions(), sink)
        await run.release()
        await _until(lambda: len(sink.lines()) == 20, "the first 20 lines")
        # The daemon goes away (its executor closes; the run lives on).
        await observation.abort()
        await first.close()
        second = await make_executor()
        try:
            again = await (await second.site("c:i:A:0", 1)).attach(
                _started(run, request), request.files.run_dir
            )
            assert await again.alive()
            positions = fold_positions(sink.events)
            observation = await again.observe([source], positions, sink)
            with open(tmp_path / "run" / "fifo", "w") as fifo:
                fifo.write("go\n")
            end = await again.wait()
            await observation.close()
        finally:
            await second.close()
        assert end.how == "exited" and end.code == 0
        assert sink.lines() == [f"a-{i}" for i in range(1, 21)] + [f"b-{i}" for i in range(1, 21)]
