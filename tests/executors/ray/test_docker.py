"""``[sandbox] kind = "docker"`` on a real Ray cluster and a real engine: a node starts its
cell's container on its engine and removes it when the run ends; a node's actor killed
mid-run takes its container with it (the wrapper's lifeline); the head's reaper has each
node remove the home's containers that no attempt holds (skipped, saying why, without an
engine or the base image)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import msgspec
import pytest

from arenad.containers.docker import engine_problem, image_exists
from arenad.runs.executor import RunRequest
from arenad.sandbox import container
from tests.ray_support import RayTestCluster
from tests.runs.executor_contract import _request

BASE = "local/deb-py:bookworm"
CELL = "c:i:A:0"


@pytest.fixture(autouse=True)
def _engine() -> None:
    if (problem := engine_problem()) is not None:
        pytest.skip(f"no container engine: {problem}")
    if not image_exists(BASE):
        pytest.skip(f"{BASE} is not in the engine (scripts/build-base-image)")


def _exists(name: str) -> bool:
    done = subprocess.run(["docker", "inspect", name], capture_output=True, check=False)
    return done.returncode == 0


def _running(name: str) -> bool:
    done = subprocess.run(
        ["docker", "inspect", "--format", "{{.State.Running}}", name],
        capture_output=True,
        text=True,
        check=False,
    )
    return done.stdout.strip() == "true"


async def _until(what: str, cond: Any, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not cond():
        assert time.monotonic() < deadline, what
        await asyncio.sleep(0.1)


def _in_container(home: Path, run_dir: Path, script: str, attempt: int = 1) -> RunRequest:
    """A run whose agent is ``script`` in a container of the base image, as the node's
    prepare step would make it."""
    request = _request(run_dir, "")
    workspace = run_dir / "workspace"
    workspace.mkdir()
    name = container.container_name(str(home), CELL, attempt)
    binds = container.ContainerBinds(
        workspace=str(workspace),
        workdir="/testbed",
        read_only=(),
        run_dir=str(run_dir),
        read_write=(),
    )
    argv = container.container_argv(
        container.docker_bin(),
        BASE,
        name,
        binds,
        ["bash", "-c", script],
        env_names=[],
        network="none",
        memory_bytes=256 << 20,
        pids=256,
        cpus=None,
        labels=container.labels(str(home), CELL, attempt),
    )
    return msgspec.structs.replace(request, argv=argv, attempt=attempt, container=name)


@pytest.fixture
async def executor(
    ray_cluster: RayTestCluster, ray_namespace: str, tmp_path: Path
) -> AsyncIterator[Any]:
    from arenad.executors.ray.executor import RayExecutor

    executor = RayExecutor(namespace=ray_namespace, heartbeat_s=10, home=tmp_path / "home")
    await executor.start()
    try:
        yield executor
    finally:
        await executor.close()


async def test_a_node_runs_the_agent_in_its_container_and_removes_it(
    executor: Any, tmp_path: Path
) -> None:
    home = tmp_path / "home"
    script = 'grep -q bookworm /etc/os-release && echo "in $PWD" && echo made > made.txt'
    request = _in_container(home, tmp_path / "run", script)
    site = await executor.site(CELL, 1)
    run = await site.start(request)
    assert run.record.executor == "ray" and run.record.node is not None
    await run.release()
    end = await run.wait()
    assert (end.how, end.code) == ("exited", 0), Path(request.files.stderr).read_text()
    assert Path(request.files.stdout).read_text() == "in /testbed\n"
    assert (tmp_path / "run" / "workspace" / "made.txt").read_text() == "made\n"
    assert request.container is not None and not _exists(request.container)


async def test_a_killed_actor_takes_its_container_with_it(
    executor: Any, ray_namespace: str, tmp_path: Path
) -> None:
    import ray

    from arenad.executors.ray.executor import actor_name

    request = _in_container(tmp_path / "home", tmp_path / "run", "echo up; exec sleep 1000")
    assert request.container is not None
    site = await executor.site(CELL, 1)
    run = await site.start(request)
    await run.release()
    await _until("the container never ran", lambda: _running(str(request.container)), 120)
    # The node's actor dies (its node removed, `ray.kill`): nobody is left on the node to
    # end the run but its wrapper, which reads the lifeline's end.
    await asyncio.to_thread(ray.kill, ray.get_actor(actor_name(CELL, 1), namespace=ray_namespace))
    await _until("the container outlived its actor", lambda: not _exists(str(request.container)))
    assert (await run.wait()).how == "lost"


async def test_the_reaper_has_the_nodes_remove_the_homes_orphaned_containers(
    executor: Any, tmp_path: Path
) -> None:
    home = tmp_path / "home"
    tag = f"arenad-test-rayreap-{os.getpid()}"
    made = {
        f"{tag}-over": container.labels(str(home), CELL, 1),
        f"{tag}-live": container.labels(str(home), CELL, 2),
        f"{tag}-elsewhere": container.labels(str(tmp_path / "other"), CELL, 1),
    }
    for name, labels in made.items():
        argv = ["docker", "create", "--name", name]
        for key, value in labels.items():
            argv += ["--label", f"{key}={value}"]
        subprocess.run([*argv, BASE, "true"], capture_output=True, check=True)

    async def live(cell_id: str, attempt: int) -> bool:
        return (cell_id, attempt) == (CELL, 2)

    try:
        await executor.reconcile(live)
        assert {name: _exists(name) for name in made} == {
            f"{tag}-over": False,
            f"{tag}-live": True,
            f"{tag}-elsewhere": True,
        }
    finally:
        for name in made:
            subprocess.run(["docker", "rm", "-f", name], capture_output=True, check=False)


HOG = "python3 -c \"b = b'x' * (400 << 20); import time; time.sleep(60)\""


async def test_a_memory_hog_in_its_container_on_a_node_is_recorded_so(
    executor: Any, tmp_path: Path
) -> None:
    from arenad.runs.cgroups import Limits

    request = _in_container(tmp_path / "home", tmp_path / "run", HOG)
    request = msgspec.structs.replace(request, limits=Limits(memory_bytes=256 << 20))
    site = await executor.site(CELL, 1)
    run = await site.start(request)
    # Docker's flags limit it, not a cgroup of the run's; it is not unlimited (the runner's
    # _unlimited_reason), and the kill below is docker's memory limit at work.
    assert run.record.cgroup is None and run.record.unlimited_reason is None
    await run.release()
    end = await run.wait()
    assert end.limit == "memory", end
    assert request.container is not None and not _exists(request.container)
