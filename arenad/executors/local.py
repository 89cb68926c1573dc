"""The local executor: every cell's work on this machine, in the daemon's process.

Steps run in the daemon's event loop (or a thread, for blocking ones). Agent runs start
through the daemon's :class:`~arenad.runs.launcher_client.WrapperLauncher` as detached
runs (:mod:`arenad.runs.detached`) that outlive the daemon; their files are watched through
one shared watchdog inotify instance (:mod:`arenad.ingest.inotify`: one thread for every
run; a :class:`~arenad.ingest.watcher.RunDirWatcher` per run).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Concatenate, ParamSpec, TypeVar

import msgspec

from arenad.clock import Clock, system_clock
from arenad.containers import reaper
from arenad.containers.docker import remove_container
from arenad.executors import spawn
from arenad.ingest.inotify import Inotify
from arenad.ingest.offsets import Positions
from arenad.ingest.watcher import RunDirWatcher, Sink, WatchSource
from arenad.runs import cgroups, groups
from arenad.runs.detached import DetachedRun, RunEnd
from arenad.runs.executor import (
    AttemptLive,
    Executor,
    Observation,
    Run,
    RunRequest,
    Site,
    Tools,
    check_executor,
)
from arenad.runs.files import RunFiles
from arenad.runs.launcher_client import WrapperLauncher
from events.cell import RunStarted
from events.specs import CellSpec

log = logging.getLogger(__name__)

P = ParamSpec("P")
T = TypeVar("T")


class LocalObservation(Observation):
    def __init__(self, watcher: RunDirWatcher) -> None:
        self.watcher = watcher

    async def close(self) -> None:
        await self.watcher.close()

    async def abort(self) -> None:
        await self.watcher.abort()

    async def failed(self) -> BaseException:
        try:
            await self.watcher.wait()
        except Exception as exc:
            return exc
        # Closed without an error: nothing more to say.
        await asyncio.Event().wait()
        raise AssertionError("unreachable")


class LocalRun(Run):
    def __init__(
        self,
        run: DetachedRun,
        clock: Clock,
        observer: Inotify | None,
        node: str | None,
        group: cgroups.Group | None = None,
        unlimited_reason: str | None = None,
        *,
        container: str | None = None,
    ) -> None:
        self.run = run
        self.container = container
        self.files = run.files
        self.group = group
        self.record = spawn.record(
            run,
            executor="local",
            node=node,
            cgroup=group.name if group is not None else None,
            unlimited_reason=unlimited_reason,
        )
        self._clock = clock
        self._observer = observer

    async def release(self) -> None:
        self.run.release()

    async def cancel_unreleased(self) -> None:
        try:
            await self.run.cancel_unreleased()
        finally:
            if self.group is not None:
                await asyncio.to_thread(cgroups.remove, self.group)

    def abort(self, reason: str) -> None:
        self.run.abort(reason)

    def kill_now(self) -> None:
        self.run.kill_now()

    async def alive(self) -> bool:
        return self.run.alive

    async def wait(self) -> RunEnd:
        end = await self.run.wait(self._clock)
        if self.container is not None:
            # A group KILL (the grace ran out) kills the client, not its container; the
            # wrapper normally removed it already (then this is a no-op).
            problem = await remove_container(self.container)
            if problem is not None:
                log.warning("container %s not removed: %s", self.container, problem)
        group = self.group
        if group is None:
            return end
        # The kernel's own counters name the limit (the wrapper's word may be missing: it
        # died, or the run ended before its next look); then the group goes.
        counters = await asyncio.to_thread(cgroups.read_counters, group)
        await asyncio.to_thread(cgroups.remove, group)
        if end.limit is None and not (end.how == "exited" and end.code == 0):
            limit = cgroups.limit_hit(counters)
            if limit is not None:
                end = msgspec.structs.replace(end, limit=limit)
        return end

    async def observe(
        self, sources: Sequence[WatchSource], positions: Positions, sink: Sink
    ) -> Observation:
        watcher = RunDirWatcher(sources, sink, positions=positions, observer=self._observer)
        await watcher.start()
        return LocalObservation(watcher)

    async def activity(self) -> tuple[int, ...]:
        return spawn.activity(self.files)


class _LostRun(LocalRun):
    """A run recorded before runs had a wrapper: nothing can say how it ended."""

    async def wait(self) -> RunEnd:
        return RunEnd(
            how="lost",
            code=None,
            ended_at_ms=self._clock(),
            reason="recorded before runs had an exit record",
        )


class LocalSite(Site):
    def __init__(self, executor: LocalExecutor) -> None:
        self.executor = executor

    async def call(
        self,
        step: Callable[Concatenate[Tools, P], Awaitable[T]],
        /,
        *args: P.args,
        **kwargs: P.kwargs,
    ) -> T:
        return await step(self.executor.tools, *args, **kwargs)

    async def call_blocking(
        self, step: Callable[Concatenate[Tools, P], T], /, *args: P.args, **kwargs: P.kwargs
    ) -> T:
        return await asyncio.to_thread(step, self.executor.tools, *args, **kwargs)

    async def start(self, request: RunRequest) -> Run:
        ex = self.executor
        group, unlimited = await asyncio.to_thread(ex.group_for, request)
        argv = request.argv
        if request.limits is not None:
            argv = cgroups.join_argv(group, argv)
        try:
            run = await spawn.spawn(
                request,
                store_path=ex.store_path,
                clock=ex.clock,
                launcher=ex.launcher,
                argv=argv,
                cgroup_dirs=group.dirs if group is not None else (),
            )
        except BaseException:
            if group is not None:
                await asyncio.to_thread(cgroups.remove, group)
            raise
        return LocalRun(
            run, ex.clock, ex.observer, ex.node, group, unlimited, container=request.container
        )

    async def attach(self, started: RunStarted, run_dir: str) -> Run:
        ex = self.executor
        files = RunFiles(
            run_dir=run_dir,
            stdout=started.stdout_path or "",
            stderr=started.stderr_path or "",
            cap_bytes=started.output_cap_bytes,
        )
        run = DetachedRun.adopt(
            pid=started.pid,
            start_ticks=started.process_start_ticks,
            files=files,
            started_at_ms=started.started_at_ms,
            deadline_ms=started.deadline_ms,
            kill_grace_s=started.kill_grace_s,
        )
        if started.exit_file is None:
            ticks = started.process_start_ticks
            if ticks is not None and groups.process_identity_matches(started.pid, ticks):
                await groups.kill_group(started.pgid, started.kill_grace_s)
            return _LostRun(run, ex.clock, ex.observer, ex.node)
        group = None
        if started.cgroup is not None and ex.hierarchy is not None:
            group = cgroups.find(ex.hierarchy, ex.cgroup_parent, started.cgroup)
        box = started.sandbox
        container = box.container if box is not None else None
        return LocalRun(run, ex.clock, ex.observer, ex.node, group, container=container)


class LocalExecutor(Executor):
    """Cells on this machine. ``store_path``: the log an orphaned wrapper consults;
    ``tools``: what the daemon lends its steps (prepared checkouts)."""

    kind = "local"

    def __init__(
        self,
        *,
        store_path: Path,
        tools: Tools | None = None,
        clock: Clock = system_clock,
        inotify: bool = True,
        node: str | None = None,
    ) -> None:
        self.store_path = store_path
        self.tools = tools if tools is not None else Tools()
        self.clock = clock
        self.node = node
        self.launcher = WrapperLauncher()
        self.observer: Inotify | None = None
        self._inotify = inotify
        self._site = LocalSite(self)
        # Where runs' cgroups are made (None: no usable hierarchy; runs are not limited).
        self.hierarchy = cgroups.probe()
        self.cgroup_parent = cgroups.parent_name(store_path.parent)
        # The reaper's line between an earlier daemon's judge containers and this one's.
        self.started_at = dt.datetime.now(dt.UTC)

    def group_for(self, request: RunRequest) -> tuple[cgroups.Group | None, str | None]:
        """The run's cgroup with its limits, or why the run has none."""
        limits = request.limits
        if limits is None or not limits.any:
            return None, None
        if self.hierarchy is None:
            return None, "no cgroup hierarchy with memory, pids and cpu controllers here"
        name = cgroups.group_name(request.stream, request.attempt, "run")
        try:
            return cgroups.create(self.hierarchy, self.cgroup_parent, name, limits), None
        except OSError as exc:
            return None, f"cannot make cgroup {name}: {exc.strerror or exc}"

    async def start(self) -> None:
        """Open the shared inotify instance (one descriptor and reader thread); reap the
        empty cgroups a crashed daemon left; make this process (the daemon) the kernel's
        last choice when memory runs out (its agents raise theirs: cgroups.join_argv)."""
        if self.hierarchy is not None:
            reaped = await asyncio.to_thread(cgroups.reap, self.hierarchy, self.cgroup_parent)
            if reaped:
                log.info("removed %d cgroups left by an earlier daemon", len(reaped))
        refused = cgroups.lower_own_oom_score()
        if refused is not None:
            # The agents still raise theirs (any process may): they are picked first.
            log.info("the daemon's oom_score_adj stays as it is: %s", refused)
        if self._inotify and self.observer is None:
            try:
                self.observer = Inotify(report=self.tools.report)
            except OSError as exc:
                log.warning("inotify unavailable, ingestion relies on rescans: %s", exc)

    async def site(self, cell_id: str, attempt: int, spec: CellSpec | None = None) -> Site:
        check_executor(spec, cell_id, self.kind)
        return self._site

    async def reconcile(self, live: AttemptLive) -> None:
        """Remove this home's containers that nothing will end (:mod:`arenad.containers.reaper`)."""
        await reaper.reap(str(self.store_path.parent), live, started_at=self.started_at)

    async def done_with(self, cell_id: str, attempt: int) -> None:
        return None

    async def close(self) -> None:
        observer, self.observer = self.observer, None
        try:
            if observer is not None:
                observer.close()
        finally:
            await self.launcher.close()
