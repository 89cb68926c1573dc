"""The Ray executor on a real multi-node cluster: the executor contract, and what only a
remote run has (errors that cross the network, batches delivered twice or out of order, the
reaper)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from arenad.ingest.offsets import Positions, fold_positions
from arenad.ingest.watcher import file_source
from arenad.materialize import MaterializeError
from arenad.runs import groups
from arenad.runs.executor import Executor, Tools
from events.ingest import IngestionClosed
from tests.ray_support import RayTestCluster
from tests.runs.executor_contract import (
    Collected,
    ExecutorContract,
    MakeExecutor,
    _double,
    _request,
    _started,
)


class TestRayExecutor(ExecutorContract):
    @pytest.fixture
    def make_executor(self, ray_cluster: RayTestCluster, ray_namespace: str) -> MakeExecutor:
        from arenad.executors.ray.executor import RayExecutor

        async def make() -> Executor:
            executor = RayExecutor(namespace=ray_namespace, heartbeat_s=10)
            await executor.start()
            return executor

        return make


def _fails(tools: Tools) -> None:
    raise MaterializeError("clone-fail", "no such repository")


@pytest.fixture
async def executor(ray_cluster: RayTestCluster, ray_namespace: str) -> AsyncIterator[Any]:
    from arenad.executors.ray.executor import RayExecutor

    executor = RayExecutor(namespace=ray_namespace, heartbeat_s=10)
    await executor.start()
    try:
        yield executor
    finally:
        await executor.close()


async def test_a_step_error_comes_back_as_itself(executor: Any) -> None:
    site = await executor.site("c:i:A:0", 1)
    with pytest.raises(MaterializeError) as info:
        await site.call_blocking(_fails)
    assert info.value.stage == "clone-fail" and info.value.message == "no such repository"


async def test_a_duplicated_or_reordered_batch_from_a_node_is_ignored(
    executor: Any, tmp_path: Path
) -> None:
    from arenad.executors.ray.executor import RayObservation

    site = await executor.site("c:i:A:0", 1)
    request = _request(tmp_path / "run", "for i in $(seq 1 25); do echo line-$i; done")
    run = await site.start(request)
    await run.release()
    assert (await run.wait()).how == "exited"
    # Real batches, pulled by hand from the node, ten lines at most each.
    source = file_source("stdout", Path(request.files.stdout))
    await site.rpc("observe", "by-hand", [source], Positions(), 10, 1 << 20)
    await site.rpc("finish", "by-hand")
    batches, ack = [], 0
    while True:
        reply = await site.rpc("pull", "by-hand", ack, 1.0)
        if reply.batch is not None:
            batches.append(reply.batch)
            ack = reply.batch.seq
        elif reply.done:
            break
    assert len(batches) >= 3 and batches[-1].closes
    expected = [f"line-{i}" for i in range(1, 26)]
    first, second = batches[0], batches[1]
    for order in (
        [first, first, second, first, *batches[2:], batches[-1], second],  # duplicated
        [second, batches[-1], first, second, *batches[2:]],  # reordered
    ):
        sink = Collected()
        observation = RayObservation(site, [source], Positions(), sink)
        for batch in order:
            await observation.deliver(batch)
        assert sink.lines() == expected
        assert [type(e) for e in sink.events].count(IngestionClosed) == 1
        assert observation.ignored == len(order) - len(batches)


async def test_the_reaper_kills_actors_whose_attempt_is_over(
    ray_cluster: RayTestCluster, ray_namespace: str, tmp_path: Path
) -> None:
    import ray

    from arenad.executors.ray.executor import RayExecutor, actor_name

    first = RayExecutor(namespace=ray_namespace, heartbeat_s=10)
    await first.start()
    over = await first.site("c:over:A:0", 1)
    request = _request(tmp_path / "run", "sleep 1000 & echo $!; wait")
    run = await over.start(request)
    await run.release()
    going = await first.site("c:going:A:0", 2)
    assert await going.call_blocking(_double, 1) == 2
    await first.close()  # the head dies; its actors live on

    async def live(cell_id: str, attempt: int) -> bool:
        return (cell_id, attempt) == ("c:going:A:0", 2)

    second = RayExecutor(namespace=ray_namespace, heartbeat_s=10)
    await second.start()
    try:
        await second.reconcile(live)
    finally:
        await second.close()
    with pytest.raises(ValueError):
        ray.get_actor(actor_name("c:over:A:0", 1), namespace=ray_namespace)
    assert ray.get_actor(actor_name("c:going:A:0", 2), namespace=ray_namespace) is not None
    # Its agent went with it (the lifeline).
    deadline = time.monotonic() + 20
    while groups.group_alive(run.record.pgid):
        assert time.monotonic() < deadline, "the reaped actor's agent lives on"
        await asyncio.sleep(0.05)


async def test_a_restarted_head_finds_a_gone_actor_lost_with_its_lines_kept(
    ray_cluster: RayTestCluster, ray_namespace: str, tmp_path: Path
) -> None:
    import ray

    from arenad.executors.ray.executor import RayExecutor, actor_name

    first = RayExecutor(namespace=ray_namespace, heartbeat_s=10)
    await first.start()
    site = await first.site("c:i:A:0", 1)
    request = _request(tmp_path / "run", "echo one; echo two; exec sleep 1000")
    run = await site.start(request)
    await run.release()
    sink = Collected()
    source = file_source("stdout", Path(request.files.stdout))
    observation = await run.observe([source], Positions(), sink)
    deadline = time.monotonic() + 20
    while len(sink.lines()) < 2:
        assert time.monotonic() < deadline, "the lines never came"
        await asyncio.sleep(0.05)
    await observation.abort()
    await first.close()
    # While no head runs, the actor goes (its node died): its agent goes with it.
    ray.kill(ray.get_actor(actor_name("c:i:A:0", 1), namespace=ray_namespace))
    second = RayExecutor(namespace=ray_namespace, heartbeat_s=10)
    await second.start()
    try:
        again = await (await second.site("c:i:A:0", 1)).attach(
            _started(run, request), request.files.run_dir
        )
        assert not await again.alive()
        observation = await again.observe([source], fold_positions(sink.events), sink)
        end = await again.wait()
        await observation.close()
    finally:
        await second.close()
    assert end.how == "lost" and end.reason and "gone" in end.reason
    # What was ingested stays; nothing more comes, and ingestion is not closed.
    assert sink.lines() == ["one", "two"]
    assert not [e for e in sink.events if isinstance(e, IngestionClosed)]
    deadline = time.monotonic() + 20
    while groups.group_alive(run.record.pgid):
        assert time.monotonic() < deadline, "the agent outlived its actor"
        await asyncio.sleep(0.05)


async def test_a_run_past_its_disk_bound_on_a_node_is_ended_and_recorded_so(
    executor: Any, tmp_path: Path
) -> None:
    import msgspec

    # The wrapper walks the run dir on the node, as on this machine (issue 30: no longer
    # stripped from the request there).
    request = _request(
        tmp_path / "run", "head -c 8388608 /dev/zero > big; exec sleep 60", timeout_s=120
    )
    request = msgspec.structs.replace(request, disk_dir=request.files.run_dir, disk_bytes=1 << 20)
    site = await executor.site("c:i:A:0", 1)
    run = await site.start(request)
    await run.release()
    end = await run.wait()
    assert end.limit == "disk", end
