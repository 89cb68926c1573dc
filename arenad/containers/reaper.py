"""The reaper: containers of this arenad home that nothing will ever end.

An agent container (``[sandbox] kind = "docker"``) is removed by its wrapper and again by the
daemon when the run ends; a swebench judge's by the judge. Whatever outlives both (the
wrapper and the daemon SIGKILLed together, a judge's daemon gone mid-grade) is found here,
by its labels, and removed:

- an agent container (``arenad.home`` = this home) whose attempt the log no longer holds as
  running (``live`` says no);
- a judge container (``arenad.judge``, its ``arenad.run_dir`` inside this home) created
  before this daemon started (no judge of this daemon can be that old).

Only this home's containers are looked at: the engine is shared (other homes, other users).

In three steps (:func:`find`, :func:`orphans`, :func:`remove`) so that on the Ray executor
each node lists and removes on its own engine while the head, which holds the log, decides
(:meth:`arenad.executors.ray.executor.RayExecutor.reconcile`).
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import shutil
from collections.abc import Awaitable, Callable

import msgspec

from arenad.containers.docker import docker_bin, remove_container
from arenad.runs.commands import CommandError, run_ok
from arenad.sandbox.bwrap import inside
from arenad.sandbox.container import LABEL_ATTEMPT, LABEL_CELL, LABEL_HOME

log = logging.getLogger(__name__)

LIST_TIMEOUT_S = 60.0
# Judge containers older than this daemon's start by at least this much are orphans (the
# engine's clock and ours are the same machine's; the margin covers rounding to seconds).
JUDGE_MARGIN_S = 2.0

AttemptLive = Callable[[str, int], Awaitable[bool]]


async def _list(filter_: str, fmt: str, docker: str) -> list[list[str]]:
    argv = [docker, "ps", "-a", "--no-trunc", "--filter", filter_, "--format", fmt]
    out = (await run_ok(argv, LIST_TIMEOUT_S, stage="ps")).stdout.decode("utf-8", "replace")
    return [line.split("\t") for line in out.splitlines() if line.strip()]


def _created(text: str) -> dt.datetime | None:
    """docker ps's CreatedAt ("2026-12-05 08:50:01 +0000 UTC") as an aware datetime."""
    try:
        return dt.datetime.strptime(text[:25], "%Y-%m-%d %H:%M:%S %z")
    except ValueError:
        return None


class Found(msgspec.Struct, frozen=True, kw_only=True):
    """What one engine holds of a home: its agent containers (name, cell, attempt) and the
    judge containers (name, run dir, created at) of every home (plain data: a Ray node
    lists, the head decides)."""

    agents: list[list[str]]
    judges: list[list[str]]


async def find(home_root: str, docker: str | None = None) -> Found | None:
    """The engine's containers that may be this home's orphans; None when there is no
    client or the engine did not answer (logged: the reaper runs again later)."""
    docker = docker or docker_bin()
    if shutil.which(docker) is None:
        return None
    home = os.path.abspath(home_root)
    try:
        agents = await _list(
            f"label={LABEL_HOME}={home}",
            f'{{{{.Names}}}}\t{{{{.Label "{LABEL_CELL}"}}}}\t{{{{.Label "{LABEL_ATTEMPT}"}}}}',
            docker,
        )
        judges = await _list(
            "label=arenad.judge",
            '{{.Names}}\t{{.Label "arenad.run_dir"}}\t{{.CreatedAt}}',
            docker,
        )
    except (CommandError, OSError) as exc:
        log.info("containers not reaped (the engine did not answer): %s", exc)
        return None
    return Found(agents=agents, judges=judges)


async def orphans(
    found: Found, home_root: str, live: AttemptLive, *, started_at: dt.datetime
) -> list[str]:
    """The names of ``found`` that nothing will ever end (see the module docstring)."""
    home = os.path.abspath(home_root)
    doomed = []
    for row in found.agents:
        if len(row) != 3 or not row[2].isdigit():
            continue
        name, cell_id, attempt = row[0], row[1], int(row[2])
        if not await live(cell_id, attempt):
            doomed.append(name)
    for row in found.judges:
        run_dir = os.path.normpath(row[1]) if len(row) == 3 else ""
        if not os.path.isabs(run_dir) or not inside(run_dir, home):
            continue
        created = _created(row[2])
        if created is not None and (started_at - created).total_seconds() > JUDGE_MARGIN_S:
            doomed.append(row[0])
    return doomed


async def remove(names: list[str], docker: str | None = None) -> list[str]:
    """Remove ``names`` (gone already counts as removed); return those removed."""
    docker = docker or docker_bin()
    removed = []
    for name in names:
        problem = await remove_container(name, docker)
        if problem is None:
            removed.append(name)
        else:
            log.warning("orphaned container %s not removed: %s", name, problem)
    if removed:
        log.info("removed %d orphaned containers: %s", len(removed), ", ".join(removed))
    return removed


async def reap(
    home_root: str,
    live: AttemptLive,
    *,
    started_at: dt.datetime,
    docker: str | None = None,
) -> list[str]:
    """Remove this home's orphaned containers; return their names. An engine that cannot be
    asked is logged, not raised (the reaper runs again later)."""
    found = await find(home_root, docker)
    if found is None:
        return []
    return await remove(await orphans(found, home_root, live, started_at=started_at), docker)
