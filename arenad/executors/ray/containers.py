"""The reaper's node side: a home's leftover containers on each Ray node's own engine.

A node runs its cells' containers on its own engine (the ``docker`` client and socket it
resolves itself), so what a node leaves over — its actor and wrapper killed together, a run
whose attempt the log ended while the node was cut off — can only be seen and removed
there. The head holds the log: it asks every live node to list this home's containers (a
task pinned to that node, :func:`arenad.containers.reaper.find`), decides which are orphans
(:func:`arenad.containers.reaper.orphans`), and has the same node remove them.

Nodes that share one engine (every node of a one-machine cluster) list the same containers;
the head removes each name once, and a name already gone counts as removed.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import functools
import logging
from collections.abc import Callable
from typing import Any, TypeVar

import ray

from arenad.containers import reaper

log = logging.getLogger("arenad.executors.ray")

T = TypeVar("T")

# One node's answer, at most (a frozen node must not hold the reaper up).
NODE_TIMEOUT_S = 120.0


def _find(home_root: str) -> reaper.Found | None:
    return asyncio.run(reaper.find(home_root))


def _remove(names: list[str]) -> list[str]:
    return asyncio.run(reaper.remove(names))


@functools.cache
def _remote(fn: Callable[..., Any]) -> Any:
    """``fn`` as a Ray remote function (made once: each one is exported to the cluster)."""
    return ray.remote(fn)


async def _on(node_id: str, fn: Callable[..., T], *args: Any) -> T:
    """``fn(*args)`` run as a task on node ``node_id`` only: no CPU taken, never retried
    (on another node it would see another engine)."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    task: Any = _remote(fn).options(
        num_cpus=0,
        max_retries=0,
        scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False),
    )
    ref = task.remote(*args)
    try:
        async with asyncio.timeout(NODE_TIMEOUT_S):
            result: T = await ref
    except TimeoutError:
        ray.cancel(ref, force=True)
        raise
    return result


def live_nodes() -> list[str]:
    """The ids of the cluster's live nodes."""
    nodes: list[dict[str, Any]] = ray.nodes()  # type: ignore[no-untyped-call]
    return [str(n["NodeID"]) for n in nodes if n.get("Alive")]


async def reap_nodes(
    home_root: str, live: reaper.AttemptLive, *, started_at: dt.datetime
) -> list[str]:
    """Remove this home's orphaned containers from every live node's engine; return their
    names. A node that cannot be asked is logged and skipped (the reaper runs again)."""
    removed: list[str] = []
    for node_id in await asyncio.to_thread(live_nodes):
        try:
            found = await _on(node_id, _find, home_root)
            if found is None:
                continue  # no client or no engine on that node: nothing to reap there
            doomed = await reaper.orphans(found, home_root, live, started_at=started_at)
            doomed = [name for name in doomed if name not in removed]
            if doomed:
                removed += await _on(node_id, _remove, doomed)
        except Exception as exc:
            log.warning("reaper: node %s: containers not reaped: %s", node_id[:12], exc)
    return removed
