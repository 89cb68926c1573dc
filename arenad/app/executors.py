"""`arenad daemon --executor local|ray`: which executor the daemon runs cells with.

Ray is an optional extra (``arenad[ray]``), imported only when asked for.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from arenad.daemon.daemon import DaemonOptions, ExecutorFactory, local_executor, run_daemon
from arenad.errors import UserError
from arenad.home import Home
from arenad.runs.executor import Executor, Tools

EXECUTORS = ("local", "ray")
DEFAULT_RAY_HEARTBEAT_S = 30.0
# Environment names a daemon on Ray keeps from its cells: the cluster's own settings (its
# token among them) would let an agent, or the code its verify step runs, drive the cluster.
_RAY_PREFIX = "RAY_"


def executor_factory(
    kind: str,
    *,
    ray_address: str | None = None,
    ray_heartbeat_s: float = DEFAULT_RAY_HEARTBEAT_S,
) -> ExecutorFactory:
    if kind == "local":
        return local_executor
    if kind != "ray":
        raise UserError(f"--executor: {kind!r} is not one of {', '.join(EXECUTORS)}")
    if ray_heartbeat_s <= 0:
        raise UserError("--ray-heartbeat-s must be more than 0")
    try:
        from arenad.executors.ray.executor import RayExecutor, namespace_for
    except ImportError as exc:
        raise UserError(
            f"--executor ray needs the Ray extra (pip install 'arenad[ray]'): {exc}"
        ) from None

    def make(home: Home, tools: Tools) -> Executor:
        # The node's actor has its own tools; the head's prepared checkouts stay here.
        return RayExecutor(
            address=ray_address,
            heartbeat_s=ray_heartbeat_s,
            namespace=namespace_for(home.root),
            home=home.root,
        )

    return make


def cell_base_env(kind: str, env: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment cells start from: the daemon's, without Ray's settings on Ray."""
    base = dict(os.environ if env is None else env)
    if kind == "ray":
        base = {k: v for k, v in base.items() if not k.startswith(_RAY_PREFIX)}
    return base


async def serve_daemon(
    home: Home,
    options: DaemonOptions,
    *,
    executor: str = "local",
    ray_address: str | None = None,
    ray_heartbeat_s: float = DEFAULT_RAY_HEARTBEAT_S,
) -> int:
    """Run the daemon with the named executor until it stops."""
    factory = executor_factory(executor, ray_address=ray_address, ray_heartbeat_s=ray_heartbeat_s)
    return await run_daemon(home, options, cell_base_env(executor), executor=factory)
