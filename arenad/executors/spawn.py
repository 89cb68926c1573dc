"""An agent run started on this machine: what the local executor and a Ray node (its
:class:`~arenad.executors.ray.actor.CellActor`) do alike.

Each starts the request's detached run through its launcher (:func:`spawn`), says what it
started (:func:`record`) and reads its liveness from its output files (:func:`activity`);
what differs is theirs: the local executor's cgroup and container, the node's lifeline.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from arenad.clock import Clock
from arenad.runs.detached import DetachedRun, Lifeline, spawn_detached
from arenad.runs.executor import RunRecord, RunRequest
from arenad.runs.files import RunFiles, capped_marker
from arenad.runs.launcher_client import WrapperLauncher

__all__ = ["activity", "record", "spawn"]


async def spawn(
    request: RunRequest,
    *,
    store_path: Path | None,
    clock: Clock,
    launcher: WrapperLauncher,
    argv: Sequence[str] | None = None,
    cgroup_dirs: Sequence[str] = (),
    lifeline: Lifeline | None = None,
) -> DetachedRun:
    """The request's run, held until :meth:`DetachedRun.release`: its argv (or ``argv``,
    the request's joined to its cgroup ``cgroup_dirs``), environment, network, container
    and disk bound as the request says (``store_path``, ``lifeline``: see
    :func:`~arenad.runs.detached.spawn_detached`)."""
    disk = None
    if request.disk_dir is not None and request.disk_bytes is not None:
        disk = (request.disk_dir, request.disk_bytes)
    return await spawn_detached(
        request.argv if argv is None else argv,
        cwd=request.cwd,
        env=request.env,
        files=request.files,
        store_path=store_path,
        stream=request.stream,
        attempt=request.attempt,
        timeout_s=request.timeout_s,
        kill_grace_s=request.kill_grace_s,
        network=request.network,
        forwards=request.forwards,
        container=request.container,
        container_forwards=request.container_forwards,
        clock=clock,
        launcher=launcher,
        lifeline=lifeline,
        cgroup_dirs=cgroup_dirs,
        disk=disk,
    )


def record(
    run: DetachedRun,
    *,
    executor: str,
    node: str | None,
    cgroup: str | None = None,
    unlimited_reason: str | None = None,
) -> RunRecord:
    """What the executor says of the run it started (it goes into ``RunStarted``)."""
    return RunRecord(
        pid=run.pid,
        pgid=run.pgid,
        start_ticks=run.start_ticks,
        started_at_ms=run.started_at_ms,
        deadline_ms=run.deadline_ms,
        executor=executor,
        node=node,
        cgroup=cgroup,
        unlimited_reason=unlimited_reason,
    )


def activity(files: RunFiles) -> tuple[int, ...]:
    """The sizes of the run's stdout and stderr and the mtimes of their cap markers (-1:
    missing). Output dropped past the cap still counts: the wrapper moves the marker's
    mtime while it drops."""
    outputs = (files.stdout, files.stderr)
    return (*(_size(f) for f in outputs), *(_mtime_ns(capped_marker(f)) for f in outputs))


def _mtime_ns(path: str) -> int:
    try:
        return os.stat(path).st_mtime_ns
    except OSError:
        return -1


def _size(path: str) -> int:
    try:
        return os.stat(path).st_size
    except OSError:
        return -1
