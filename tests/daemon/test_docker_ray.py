"""``[sandbox] kind = "docker"`` on ``[executor] kind = "ray"``, end to end: a real
`arenad daemon --executor ray` on the session's multi-node cluster (tests/ray_support.py)
and a real engine with the local SWE-bench images (skipped, saying why, without them).

A node runs its cell's container on its own engine (here every node shares this machine's):
the gold patch applied by a command arm in the container is resolved by the swebench judge
(also run on the node), the container's name is in `run.started`, and nothing is left over;
a daemon SIGKILLed mid-run has the run adopted through its actor, which ran it once."""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

import pytest

from arenad.sandbox.container import container_name
from events import cell as ev
from tests.daemon.support import cli, read_all, start_daemon, wait_for
from tests.daemon.test_docker_sandbox import _campaign, _containers
from tests.ray_support import RayTestCluster
from tests.swebench_support import LocalSwebench, local_swebench  # noqa: F401

pytestmark = pytest.mark.slow

ON_RAY = '[executor]\nkind = "ray"\nresources = { arenad_slot = 1 }\n'


def _submitted(local: LocalSwebench, tmp_path: Path, name: str, slow: bool = False) -> Path:
    home = tmp_path / "home"
    camp = _campaign(local, tmp_path, name, "", "")
    text = camp.read_text()
    if slow:
        # The daemon is killed while the container runs.
        text = text.replace('"bash", "-c", "git apply', '"bash", "-c", "sleep 8; git apply')
    camp.write_text(text + ON_RAY)
    assert cli(home, "init").returncode == 0
    done = cli(home, "submit", str(camp))
    assert done.returncode == 0, done.stderr
    return home


def _daemon(home: Path, cluster: RayTestCluster, err: Path, *args: str) -> Any:
    return start_daemon(
        home, *args, "--executor", "ray", "--ray-heartbeat-s", "20", env=cluster.env(), stderr=err
    )


def _actors(home: Path) -> list[str]:
    import ray

    from arenad.executors.ray.executor import namespace_for

    namespace = namespace_for(home)
    return [
        a["name"]
        for a in ray.util.list_named_actors(all_namespaces=True)
        if a["namespace"] == namespace
    ]


def test_the_gold_patch_in_a_container_on_a_node_is_resolved_and_nothing_is_left(
    local_swebench: LocalSwebench,  # noqa: F811
    ray_cluster: RayTestCluster,
    tmp_path: Path,
) -> None:
    home = _submitted(local_swebench, tmp_path, "dray")
    daemon = _daemon(home, ray_cluster, tmp_path / "daemon.err", "--until-idle")
    assert daemon.wait(timeout=600) == 0, (tmp_path / "daemon.err").read_text()[-3000:]
    records = read_all(home)
    runs = [r for r in records if isinstance(r.event, ev.RunStarted)]
    assert len(runs) == 1
    started = runs[0].event
    assert isinstance(started, ev.RunStarted)
    assert started.executor == "ray" and started.node is not None
    cell_id = runs[0].stream.removeprefix("cell/")
    box = started.sandbox
    assert box is not None and box.kind == "docker"
    assert box.container == container_name(str(home), cell_id, 1)
    assert box.container in started.argv
    completed = [r.event for r in records if isinstance(r.event, ev.RunCompleted)]
    assert [c.rc for c in completed] == [0]  # type: ignore[attr-defined]
    verdicts = [r.event for r in records if isinstance(r.event, ev.JudgeVerdictRecorded)]
    assert [v.resolved for v in verdicts] == [True], records  # type: ignore[attr-defined]
    assert _containers(home) == []
    assert _actors(home) == []


def test_a_daemon_killed_mid_run_adopts_the_node_s_container_and_leaves_none(
    local_swebench: LocalSwebench,  # noqa: F811
    ray_cluster: RayTestCluster,
    tmp_path: Path,
) -> None:
    home = _submitted(local_swebench, tmp_path, "kray", slow=True)
    first = _daemon(home, ray_cluster, tmp_path / "daemon1.err")
    try:
        wait_for(lambda: _containers(home), "the agent's container", timeout_s=300)
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait()
    second = _daemon(home, ray_cluster, tmp_path / "daemon2.err", "--until-idle")
    assert second.wait(timeout=600) == 0, (tmp_path / "daemon2.err").read_text()[-3000:]
    records = read_all(home)
    started = [r.event for r in records if isinstance(r.event, ev.RunStarted)]
    assert len(started) == 1, started
    adopted = [r.event for r in records if isinstance(r.event, ev.RunAdopted)]
    assert [a.pid for a in adopted] == [started[0].pid]  # type: ignore[attr-defined]
    verdicts = [r.event for r in records if isinstance(r.event, ev.JudgeVerdictRecorded)]
    assert [(v.attempt, v.resolved) for v in verdicts] == [(1, True)]  # type: ignore[attr-defined]
    assert _containers(home) == []
    assert _actors(home) == []
