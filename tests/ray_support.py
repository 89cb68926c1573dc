"""Pytest support for the Ray tests: one real multi-node cluster, shared by consecutive tests.

Registered as a plugin (tests/conftest.py), it gives every test module:

* ``ray_cluster``: a ``ray.cluster_utils.Cluster`` whose head has no CPU and whose two
  worker nodes offer ``{"arenad_slot": 4}``, with a small object store, token auth (a token
  file of its own) and fast node-death detection; this process is connected to it. Started
  on first use (~10-20 s) and shared by the tests that follow; shut down, with every process
  it started verified gone, once the next test does not use it (the Ray tests run one after
  another, tests/conftest.py) or at the end of the session. Skips only when ray is not
  installed.
* ``ray_namespace`` (function): a fresh actor namespace; the test's actors are killed
  after it.
* ``spare_node`` (function): one more worker node, the only one offering ``{SPARE: 1}``,
  that the test may remove or freeze.

Never ``ray stop``: other Ray clusters may run on this machine; only pids recorded here
are cleaned up.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

OBJECT_STORE_BYTES = 80 * 1024 * 1024
SLOTS = 4
# The GCS declares a silent node dead after ~8 s instead of ~15 s (killed) / ~64 s (frozen).
# A margin over 3 s: a node declared dead takes its actors with it, and a raylet on a
# loaded 2-core machine (the suite's other worker busy) can pause for seconds.
FAST_HEALTH = {
    "health_check_initial_delay_ms": 1000,
    "health_check_period_ms": 1000,
    "health_check_timeout_ms": 1000,
    "health_check_failure_threshold": 8,
}


def _tree(pid: int) -> set[int]:
    import psutil

    try:
        return {pid, *(c.pid for c in psutil.Process(pid).children(recursive=True))}
    except psutil.NoSuchProcess:
        return set()


def node_pids(node: Any) -> set[int]:
    """Every process of a cluster node (its raylet, agents, workers and their children)."""
    pids: set[int] = set()
    for infos in node.all_processes.values():
        for info in infos:
            pids |= _tree(info.process.pid)
    return pids


def alive(pid: int) -> bool:
    import psutil

    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


class RayTestCluster:
    def __init__(self, cluster: Any, token_path: Path) -> None:
        self.cluster = cluster
        self.token_path = token_path
        self.pids: set[int] = set()

    @property
    def address(self) -> str:
        return str(self.cluster.address)

    def env(self, base: dict[str, str] | None = None) -> dict[str, str]:
        """An environment for a process that joins this cluster (a daemon)."""
        env = dict(os.environ if base is None else base)
        env.update(
            RAY_AUTH_MODE="token",
            RAY_AUTH_TOKEN_PATH=str(self.token_path),
            RAY_ADDRESS=self.address,
        )
        env.pop("RAY_AUTH_TOKEN", None)
        return env

    def add_node(self, *, slots: int = SLOTS, **resources: float) -> Any:
        offered = {"arenad_slot": float(slots), **resources} if slots else dict(resources)
        node = self.cluster.add_node(
            num_cpus=0,
            resources=offered,
            object_store_memory=OBJECT_STORE_BYTES,
        )
        self.cluster.wait_for_nodes()
        self.snapshot()
        return node

    def snapshot(self) -> None:
        for node in self.cluster.list_all_nodes():
            self.pids |= node_pids(node)


def _reload_auth_config() -> None:
    # `import ray` read RAY_AUTH_MODE once; re-read it, and drop a cached token, as Ray's
    # own _enable_token_auth does.
    from ray._raylet import AuthenticationTokenLoader, Config

    Config.initialize("")
    AuthenticationTokenLoader.instance().reset_cache()


class _Running:
    """The cluster while it runs, and how to undo the environment it was started with."""

    def __init__(self, cluster: RayTestCluster, env: pytest.MonkeyPatch) -> None:
        self.cluster = cluster
        self.env = env


_running: _Running | None = None


def _start(tmp_path_factory: pytest.TempPathFactory) -> RayTestCluster:
    import ray
    from ray.cluster_utils import Cluster

    token = tmp_path_factory.mktemp("ray-auth") / "token"
    token.write_text(secrets.token_hex(32))
    token.chmod(0o600)
    mp = pytest.MonkeyPatch()
    rc: RayTestCluster | None = None
    try:
        # Before any node starts: the nodes are this process's children and inherit it; a
        # driver with an explicit address never turns auth on by itself.
        mp.setenv("RAY_AUTH_MODE", "token")
        mp.setenv("RAY_AUTH_TOKEN_PATH", str(token))
        mp.delenv("RAY_AUTH_TOKEN", raising=False)
        mp.delenv("RAY_ADDRESS", raising=False)
        _reload_auth_config()
        cluster = Cluster(
            initialize_head=True,
            head_node_args={
                "num_cpus": 0,
                "object_store_memory": OBJECT_STORE_BYTES,
                "include_dashboard": False,
                "_system_config": FAST_HEALTH,
            },
        )
        rc = RayTestCluster(cluster, token)
        rc.add_node()
        rc.add_node()
        ray.init(address=cluster.address, namespace="arenad-tests", log_to_driver=False)
    except BaseException:
        try:
            if rc is not None:
                rc.snapshot()
                _teardown(rc)
        finally:
            mp.undo()
            _reload_auth_config()
        raise
    global _running
    _running = _Running(rc, mp)
    return rc


def _stop() -> None:
    """Shut the cluster down (every process it started verified gone), if it runs."""
    global _running
    running, _running = _running, None
    if running is None:
        return
    try:
        running.cluster.snapshot()
        _teardown(running.cluster)
    finally:
        running.env.undo()
        _reload_auth_config()


@pytest.fixture
def ray_cluster(tmp_path_factory: pytest.TempPathFactory) -> RayTestCluster:
    """The session's cluster, started by the first test that needs it. It is shut down
    once the next test to run in this process does not need it (or at the session's end):
    the test order keeps the Ray tests together (tests/conftest.py), and an idle cluster
    costs CPU for the rest of the session. A later test that needs it starts it again."""
    pytest.importorskip("ray", reason="ray is not installed (pip install -e '.[ray]')")
    pytest.importorskip("psutil", reason="psutil is not installed (pip install -e '.[ray]')")
    return _running.cluster if _running is not None else _start(tmp_path_factory)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    yield  # the test's own fixtures (its namespace, its spare node) are torn down first
    if _running is not None and (
        nextitem is None or "ray_cluster" not in getattr(nextitem, "fixturenames", ())
    ):
        _stop()


def pytest_sessionfinish(session: pytest.Session) -> None:
    _stop()


def kill_namespace(namespace: str) -> None:
    import ray

    for entry in ray.util.list_named_actors(all_namespaces=True):
        if entry["namespace"] == namespace:
            with contextlib.suppress(ValueError):
                ray.kill(ray.get_actor(entry["name"], namespace=namespace), no_restart=True)


def _teardown(rc: RayTestCluster) -> None:
    import ray

    if ray.is_initialized():
        # Detached actors outlive drivers: kill them, so their lifelines close first.
        for entry in ray.util.list_named_actors(all_namespaces=True):
            kill_namespace(entry["namespace"])
        ray.shutdown()
    rc.cluster.shutdown()
    deadline = time.monotonic() + 15
    left = [p for p in rc.pids if alive(p)]
    while left and time.monotonic() < deadline:
        time.sleep(0.1)
        left = [p for p in rc.pids if alive(p)]
    for pid in left:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    # A node's dashboard and runtime-env agents may take a while to notice their raylet
    # is gone; anything else left behind is a leak.
    import psutil

    leaked = []
    for pid in left:
        try:
            cmd = " ".join(psutil.Process(pid).cmdline())
        except psutil.NoSuchProcess:
            continue
        if "agent" not in cmd:
            leaked.append(f"{pid} {cmd[:120]}")
    assert not leaked, f"processes left after the cluster's shutdown: {leaked}"


@pytest.fixture
def ray_namespace(ray_cluster: RayTestCluster) -> Iterator[str]:
    namespace = f"arenad-test-{uuid.uuid4().hex[:8]}"
    yield namespace
    kill_namespace(namespace)


SPARE = "arenad_spare"


@pytest.fixture
def spare_node(ray_cluster: RayTestCluster) -> Iterator[Any]:
    """A fresh worker node the test may remove (or freeze and thaw); it offers only
    ``{SPARE: 1}``, so only a cell that asks for it runs there: a later test's cell is
    never placed on it while the GCS has not yet seen it die."""
    node = ray_cluster.add_node(slots=0, **{SPARE: 1})
    yield node
    if node in ray_cluster.cluster.worker_nodes:
        ray_cluster.snapshot()
        ray_cluster.cluster.remove_node(node, allow_graceful=False)
