"""The Ray executor: cells on the nodes of a Ray cluster, recorded by the head's log.

The daemon (the head) stays the log's only writer; each cell attempt's work happens in one
detached, named actor (:mod:`arenad.executors.ray.actor`) on a node that offers the cell's
resources, and every :class:`~arenad.runs.executor.Site` / :class:`~arenad.runs.executor.Run`
call is forwarded to it. Never a plain Ray task: Ray re-runs a task whose node died, and
its caller sees one stream stitched from two runs — a paid run must never be started
twice behind the log's back. So the actor is made with ``max_restarts=0``,
``max_task_retries=0``, ``num_cpus=0`` (an agent is not a Ray workload; the cell's custom
resource, e.g. ``{"arenad_slot": 1}``, bounds how many a node runs).

Exactly once, as locally: the actor starts the wrapper held; the runner commits
``RunStarted`` (naming the node and the wrapper's pid); only then is it released. A head
that dies before the commit leaves a held wrapper that the next start on that actor, or the
reaper, ends (it never started its agent); one that dies after it finds the actor by name
and releases it (the log says it started). The actor's name is the attempt's:
``<cell_id>#<attempt>`` in the executor's namespace.

Liveness (the head's side): every call to an actor, and a ping every ``heartbeat_s / 10``,
count as contact. ``ActorUnavailableError`` means "maybe later": the call is made again
(every actor method may be repeated). No contact for ``heartbeat_s`` — a frozen or
partitioned node, which Ray itself reports only after a minute — or ``ActorDiedError``
makes the site lost: the run ends ``lost`` with what was ingested kept, and a step fails
with :class:`SiteLost` (a ``ConnectionError``: an infrastructure failure). The node side
ends the agent on its own by then (the actor's lease and the wrapper's lifeline are
fractions of ``heartbeat_s``).

Ingestion is by offsets (:mod:`arenad.executors.ray.batches`): the head pulls one batch at a
time and appends it only if it starts where the log's record of each file ends.

The reaper (:meth:`RayExecutor.reconcile`, called by the daemon at start and now and then)
kills every actor of the namespace whose attempt the log does not hold as going, and removes
the home's containers (``[sandbox] kind = "docker"``) that no attempt holds from every node's
own engine (:mod:`arenad.executors.ray.containers`).
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import hashlib
import logging
import os
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any, Concatenate, ParamSpec, TypeVar

import ray
import ray.exceptions

from arenad.clock import Clock, system_clock
from arenad.executors.ray import containers
from arenad.executors.ray.actor import ActorConfig, CellActor, PullReply, RemoteError
from arenad.executors.ray.batches import Batch, BatchGate, batch_events
from arenad.ingest.offsets import Positions
from arenad.ingest.watcher import Sink, WatchSource
from arenad.runs import groups
from arenad.runs.detached import RunEnd
from arenad.runs.executor import (
    AttemptLive,
    Executor,
    NodeFile,
    Observation,
    Run,
    RunRecord,
    RunRequest,
    Site,
    Tools,
    check_executor,
)
from arenad.runs.files import RunFiles
from events.cell import RunStarted
from events.specs import CellSpec

log = logging.getLogger("arenad.executors.ray")

P = ParamSpec("P")
T = TypeVar("T")

NAMESPACE = "arenad"
DEFAULT_HEARTBEAT_S = 30.0
# What a cell holds on its node unless its campaign's [executor] table says otherwise.
DEFAULT_RESOURCES: dict[str, float] = {"arenad_slot": 1.0}
# Bounded batches: what one pull hands over (the object store is not for this).
MAX_BATCH_EVENTS = 5000
MAX_BATCH_BYTES = 1024 * 1024
# How long one pull / wait call waits on the node for something new.
_LONG_POLL_S = 1.0
# Pause before a call that met ActorUnavailableError is made again.
_RETRY_S = 0.2


class SiteLost(ConnectionError):
    """The cell's actor is gone, or has not answered for the heartbeat limit."""


def namespace_for(home: Path) -> str:
    """The actor namespace of one arenad home: two daemons (two logs) may share a cluster,
    and each one's reaper must see only its own actors."""
    digest = hashlib.sha256(str(home.resolve()).encode()).hexdigest()[:16]
    return f"{NAMESPACE}-{digest}"


def actor_name(cell_id: str, attempt: int) -> str:
    return f"{cell_id}#{attempt}"


def parse_actor_name(name: str) -> tuple[str, int] | None:
    cell_id, sep, attempt = name.rpartition("#")
    if not sep or not cell_id or not attempt.isdigit():
        return None
    return cell_id, int(attempt)


_remote_class: Any = None


def _actor_class() -> Any:
    global _remote_class
    if _remote_class is None:
        _remote_class = ray.remote(CellActor)
    return _remote_class


class _Contact:
    """When the head last heard from an actor, and whether it counts as lost."""

    def __init__(self, limit_s: float) -> None:
        self.limit_s = limit_s
        self.last_ok: float | None = None
        self.lost = asyncio.Event()
        self.why = ""

    def ok(self) -> None:
        if not self.lost.is_set():
            self.last_ok = time.monotonic()

    def check(self) -> None:
        # Before the first answer the actor may be waiting for a free node: that is
        # backpressure, not a loss.
        if self.last_ok is not None and time.monotonic() - self.last_ok > self.limit_s:
            self.mark(f"no answer from its node for {self.limit_s:g} s")

    def mark(self, why: str) -> None:
        if not self.lost.is_set():
            self.why = why
            self.lost.set()


class RaySite(Site):
    """One cell attempt's actor, made on first use (or found by name after a restart)."""

    def __init__(self, executor: RayExecutor, cell_id: str, attempt: int, spec: CellSpec | None):
        self.executor = executor
        self.cell_id = cell_id
        self.attempt = attempt
        self.name = actor_name(cell_id, attempt)
        self.resources = dict(executor.resources)
        if spec is not None and spec.executor is not None and spec.executor.resources:
            self.resources = dict(spec.executor.resources)
        self._actor: Any = None
        self._contact = _Contact(executor.heartbeat_s)
        self._lock = asyncio.Lock()
        self._pinger: asyncio.Task[None] | None = None
        self._fired: set[asyncio.Task[None]] = set()

    # -- the actor -------------------------------------------------------------------

    async def _handle(self, *, create: bool) -> Any:
        """The live actor (found by name, else made when ``create``); None if there is
        none and ``create`` is false."""
        async with self._lock:
            if self._actor is not None and self._contact.lost.is_set():
                # Lost earlier: a later step gets a fresh actor of the same name and finds
                # what its node still holds (nothing, if the node is gone).
                with contextlib.suppress(Exception):
                    await asyncio.to_thread(ray.kill, self._actor, no_restart=True)
                self._reset()
            if self._actor is None:
                ex = self.executor
                try:
                    self._actor = await asyncio.to_thread(
                        ray.get_actor, self.name, namespace=ex.namespace
                    )
                except ValueError:
                    if not create:
                        return None
                    self._actor = await asyncio.to_thread(self._create)
                self._pinger = asyncio.create_task(self._ping(), name=f"ping {self.name}")
            return self._actor

    def _create(self) -> Any:
        ex = self.executor
        resources = dict(self.resources)
        cpus = resources.pop("CPU", 0.0)
        gpus = resources.pop("GPU", 0.0)
        short = self._unoffered()
        if short:
            raise SiteLost(f"no node of the Ray cluster offers {short}")
        options: dict[str, Any] = {
            "name": self.name,
            "namespace": ex.namespace,
            "lifetime": "detached",
            "max_restarts": 0,
            "max_task_retries": 0,
            "num_cpus": cpus,
            "num_gpus": gpus,
            "resources": resources,
        }
        try:
            return _actor_class().options(**options).remote(ex.actor_config)
        except ValueError:
            # ActorAlreadyExistsError: another call made it meanwhile.
            return ray.get_actor(self.name, namespace=ex.namespace)

    def _reset(self) -> None:
        if self._pinger is not None:
            self._pinger.cancel()
        self._actor, self._pinger = None, None
        self._contact = _Contact(self.executor.heartbeat_s)

    async def _ping(self) -> None:
        contact, actor = self._contact, self._actor
        every = self.executor.ping_s
        await self._until_placed(actor, contact)
        while not contact.lost.is_set():
            try:
                async with asyncio.timeout(max(every, 1.0)):
                    await actor.ping.remote()
                contact.ok()
            except (TimeoutError, ray.exceptions.ActorUnavailableError):
                pass
            except ray.exceptions.RayActorError as exc:
                contact.mark(_died(exc))
            contact.check()
            if contact.lost.is_set():
                break
            await asyncio.sleep(every)
        # Lost: make sure it is gone (on a frozen node Ray kills it once the node wakes).
        with contextlib.suppress(Exception):
            await asyncio.to_thread(ray.kill, actor, no_restart=True)

    async def _until_placed(self, actor: Any, contact: _Contact) -> None:
        """Wait for the actor's first answer: it may wait for a free node (backpressure),
        but not for a node that no longer exists (Ray would keep it pending forever)."""
        first = asyncio.ensure_future(actor.ping.remote())
        try:
            while not contact.lost.is_set():
                done, _ = await asyncio.wait({first}, timeout=max(self.executor.ping_s, 1.0))
                if not done:
                    short = await asyncio.to_thread(self._unoffered)
                    if short:
                        contact.mark(f"no node of the cluster offers {short} any more")
                    continue
                try:
                    first.result()
                    contact.ok()
                except ray.exceptions.ActorUnavailableError:
                    first = asyncio.ensure_future(actor.ping.remote())
                    continue
                except ray.exceptions.RayActorError as exc:
                    contact.mark(_died(exc))
                return
        finally:
            if not first.done():
                first.cancel()

    def _unoffered(self) -> dict[str, float]:
        """The cell's resources that no live node of the cluster has enough of."""
        offered: dict[str, float] = ray.cluster_resources()  # type: ignore[no-untyped-call]
        return {k: v for k, v in self.resources.items() if v > 0 and offered.get(k, 0.0) < v}

    async def rpc(self, method: str, *args: Any) -> Any:
        """One call to the actor, made again while it is unavailable; raises SiteLost when
        the actor is gone or has been silent for the heartbeat limit, and the error the
        node raised."""
        actor = self._actor
        contact = self._contact
        if actor is None:
            raise SiteLost(f"{self.name}: no actor")
        while True:
            if contact.lost.is_set():
                raise SiteLost(f"{self.name}: {contact.why}")
            call = asyncio.ensure_future(getattr(actor, method).remote(*args))
            lost = asyncio.ensure_future(contact.lost.wait())
            try:
                await asyncio.wait({call, lost}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                lost.cancel()
                answered = call.done()
                if not answered:
                    call.cancel()
            if not answered:
                raise SiteLost(f"{self.name}: {contact.why}")
            try:
                status, value = call.result()
            except ray.exceptions.ActorUnavailableError:
                contact.check()
                await asyncio.sleep(_RETRY_S)
                continue
            except ray.exceptions.RayActorError as exc:
                contact.mark(_died(exc))
                raise SiteLost(f"{self.name}: {contact.why}") from None
            contact.ok()
            if status == "err":
                assert isinstance(value, RemoteError)
                raise value.rebuild()
            return value

    def fire(self, method: str, *args: Any) -> None:
        """A call whose answer nobody waits for (an abort from synchronous code)."""

        async def go() -> None:
            try:
                await self.rpc(method, *args)
            except Exception as exc:
                log.warning("%s: %s failed: %s", self.name, method, exc)

        task = asyncio.get_running_loop().create_task(go())
        self._fired.add(task)
        task.add_done_callback(self._fired.discard)

    async def kill(self) -> None:
        """End the actor (and with it any agent it still holds)."""
        async with self._lock:
            actor = self._actor
            self._reset()
        if actor is not None:
            with contextlib.suppress(Exception):
                await asyncio.to_thread(ray.kill, actor, no_restart=True)

    async def stop(self) -> None:
        """Stop calling (the head is stopping; the actor lives on for the next one)."""
        for task in [self._pinger, *self._fired]:
            if task is not None:
                task.cancel()

    # -- the Site --------------------------------------------------------------------

    async def call(
        self,
        step: Callable[Concatenate[Tools, P], Awaitable[T]],
        /,
        *args: P.args,
        **kwargs: P.kwargs,
    ) -> T:
        result: T = await self._step(step, args, kwargs, blocking=False)
        return result

    async def call_blocking(
        self, step: Callable[Concatenate[Tools, P], T], /, *args: P.args, **kwargs: P.kwargs
    ) -> T:
        result: T = await self._step(step, args, kwargs, blocking=True)
        return result

    async def _step(
        self, step: Callable[..., Any], args: Any, kwargs: Any, *, blocking: bool
    ) -> Any:
        await self._handle(create=True)
        value, text = await self.rpc("call", step, tuple(args), dict(kwargs), blocking)
        if isinstance(value, NodeFile) and text is not None:
            await asyncio.to_thread(_keep_copy, Path(value.path), text)
        return value

    async def start(self, request: RunRequest) -> Run:
        await self._handle(create=True)
        record = await self.rpc("start", request)
        return RayRun(self, record, request.files)

    async def attach(self, started: RunStarted, run_dir: str) -> Run:
        files = RunFiles(
            run_dir=run_dir,
            stdout=started.stdout_path or "",
            stderr=started.stderr_path or "",
            cap_bytes=started.output_cap_bytes,
        )
        record = RunRecord(
            pid=started.pid,
            pgid=started.pgid,
            start_ticks=started.process_start_ticks,
            started_at_ms=started.started_at_ms,
            deadline_ms=started.deadline_ms,
            executor="ray",
            node=started.node,
        )
        clock = self.executor.clock
        if started.executor != "ray":
            # Started on this machine by a daemon with another executor: nothing here can
            # follow it, so it is ended (if it is still that process) and recorded lost.
            ticks = started.process_start_ticks
            if ticks is not None and groups.process_identity_matches(started.pid, ticks):
                await groups.kill_group(started.pgid, started.kill_grace_s)
            why = f"started by the {started.executor} executor; this daemon runs cells on Ray"
            return _GoneRun(record, files, clock, why)
        try:
            if await self._handle(create=False) is None:
                return _GoneRun(record, files, clock, "its actor is gone (its node died?)")
            held = await self.rpc("attach", started.pid)
            if held == "none":
                return _GoneRun(record, files, clock, "its actor holds no such run")
            if held == "held":
                # The log holds its RunStarted: the head that committed it died before
                # releasing it.
                await self.rpc("release")
        except SiteLost as exc:
            return _GoneRun(record, files, clock, str(exc))
        return RayRun(self, record, files)


class RayRun(Run):
    def __init__(self, site: RaySite, record: RunRecord, files: RunFiles) -> None:
        self.site = site
        self.record = record
        self.files = files
        self._activity: tuple[int, ...] = ()

    async def release(self) -> None:
        with contextlib.suppress(SiteLost):
            await self.site.rpc("release")

    async def cancel_unreleased(self) -> None:
        with contextlib.suppress(SiteLost):
            await self.site.rpc("cancel_unreleased")

    def abort(self, reason: str) -> None:
        self.site.fire("abort", reason)

    def kill_now(self) -> None:
        self.site.fire("kill_now")

    async def alive(self) -> bool:
        try:
            return bool(await self.site.rpc("alive"))
        except SiteLost:
            return False

    async def wait(self) -> RunEnd:
        while True:
            try:
                end = await self.site.rpc("wait", _LONG_POLL_S)
            except SiteLost as exc:
                now = self.site.executor.clock()
                return RunEnd(how="lost", code=None, ended_at_ms=now, reason=str(exc))
            if end is not None:
                assert isinstance(end, RunEnd)
                return end

    async def observe(
        self, sources: Sequence[WatchSource], positions: Positions, sink: Sink
    ) -> Observation:
        observation = RayObservation(self.site, list(sources), positions, sink)
        await observation.start()
        return observation

    async def activity(self) -> tuple[int, ...]:
        with contextlib.suppress(SiteLost):
            self._activity = tuple(await self.site.rpc("activity"))
        return self._activity


class _GoneRun(Run):
    """A recorded run whose actor is gone: lost, with what was ingested kept."""

    def __init__(self, record: RunRecord, files: RunFiles, clock: Clock, why: str) -> None:
        self.record = record
        self.files = files
        self._clock = clock
        self._why = why

    async def release(self) -> None:
        return None

    async def cancel_unreleased(self) -> None:
        return None

    def abort(self, reason: str) -> None:
        return None

    def kill_now(self) -> None:
        return None

    async def alive(self) -> bool:
        return False

    async def wait(self) -> RunEnd:
        return RunEnd(how="lost", code=None, ended_at_ms=self._clock(), reason=self._why)

    async def observe(
        self, sources: Sequence[WatchSource], positions: Positions, sink: Sink
    ) -> Observation:
        return _NoObservation()

    async def activity(self) -> tuple[int, ...]:
        return ()


class _NoObservation(Observation):
    async def close(self) -> None:
        return None

    async def abort(self) -> None:
        return None


class RayObservation(Observation):
    """The head's side of one observation: pull, admit by offsets, append, acknowledge.

    If the node is lost the observation ends with what was appended; ingestion is then not
    closed (the files could not be drained), which is what the log says.
    """

    def __init__(
        self,
        site: RaySite,
        sources: list[WatchSource],
        positions: Positions,
        sink: Sink,
        *,
        max_events: int = MAX_BATCH_EVENTS,
        max_bytes: int = MAX_BATCH_BYTES,
    ) -> None:
        self.site = site
        self.sources = sources
        self.gate = BatchGate(positions)
        self.sink = sink
        self.max_events = max_events
        self.max_bytes = max_bytes
        self.obs_id = ""
        self.acked = 0
        self.ignored = 0
        self._finishing = False
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        try:
            await self._open()
        except SiteLost as exc:
            log.warning("%s: cannot observe: %s", self.site.name, exc)
            return
        self._task = asyncio.create_task(self._pump(), name=f"observe {self.site.name}")

    async def _open(self) -> None:
        self.obs_id, self.acked = uuid.uuid4().hex, 0
        await self.site.rpc(
            "observe",
            self.obs_id,
            self.sources,
            self.gate.positions,
            self.max_events,
            self.max_bytes,
        )
        if self._finishing:
            await self.site.rpc("finish", self.obs_id)

    async def _pump(self) -> None:
        while True:
            try:
                reply = await self.site.rpc("pull", self.obs_id, self.acked, _LONG_POLL_S)
            except SiteLost as exc:
                log.warning("%s: ingestion ends with the node: %s", self.site.name, exc)
                return
            assert isinstance(reply, PullReply)
            if reply.unknown:
                await self._reopen("the node no longer has this observation")
                continue
            if reply.batch is not None:
                if not await self.deliver(reply.batch):
                    await self._reopen(f"batch {reply.batch.seq} does not start at the log's")
                continue
            if reply.failure is not None:
                raise RuntimeError(f"ingestion on {self.site.name}'s node: {reply.failure}")
            if reply.done:
                # Acknowledge the closing batch, so the node's watcher ends too.
                with contextlib.suppress(SiteLost):
                    await self.site.rpc("stop_observing", self.obs_id)
                return

    async def deliver(self, batch: Batch) -> bool:
        """Append ``batch`` if it starts where the log's record ends; a batch already
        appended (delivered again, or late) is ignored. False: the batch is new but does
        not fit (the node and the head disagree: the observation is opened again)."""
        if batch.seq <= self.acked or not self.gate.admits(batch):
            self.ignored += 1
            return batch.seq <= self.acked
        events = batch_events(batch)
        await self.sink(events)
        self.gate.record(events)
        self.acked = batch.seq
        return True

    async def _reopen(self, why: str) -> None:
        log.warning("%s: observing again from the log's offsets: %s", self.site.name, why)
        with contextlib.suppress(SiteLost):
            await self.site.rpc("stop_observing", self.obs_id)
        try:
            await self._open()
        except SiteLost:
            return

    async def close(self) -> None:
        task = self._task
        if task is None:
            return
        self._finishing = True
        with contextlib.suppress(SiteLost):
            await self.site.rpc("finish", self.obs_id)
        await task

    async def abort(self) -> None:
        task, self._task = self._task, None
        if task is not None and not task.done():
            task.cancel()
            with contextlib.suppress(BaseException):
                await task
        if self.obs_id:
            self.site.fire("stop_observing", self.obs_id)


class RayExecutor(Executor):
    """Cells on a Ray cluster (see the module docstring).

    ``address``: the cluster (None: ``RAY_ADDRESS``, else the local ``ray start``); if this
    process is already connected (a test, the demo) that connection is used and left
    open. ``heartbeat_s``: how long an actor may go unheard before its run is lost.
    ``resources``: what a cell holds on its node when its campaign does not say.
    ``home``: the arenad home whose leftover containers the reaper removes from the nodes'
    engines (None: none are looked for).
    """

    kind = "ray"

    def __init__(
        self,
        *,
        address: str | None = None,
        heartbeat_s: float = DEFAULT_HEARTBEAT_S,
        namespace: str = NAMESPACE,
        resources: dict[str, float] | None = None,
        clock: Clock = system_clock,
        home: Path | None = None,
    ) -> None:
        if heartbeat_s <= 0:
            raise ValueError("heartbeat_s must be positive")
        self.address = address
        self.heartbeat_s = heartbeat_s
        self.namespace = namespace
        self.resources = dict(DEFAULT_RESOURCES if resources is None else resources)
        self.clock = clock
        self.home = home
        # The reaper's line between an earlier daemon's judge containers and this one's.
        self.started_at = dt.datetime.now(dt.UTC)
        self.ping_s = heartbeat_s / 10
        # The node-side agent is dead well before the head calls the run lost: the lease
        # runs out after half the limit without a call, the wrapper a quarter later.
        silence = heartbeat_s / 4
        self.actor_config = ActorConfig(
            lease_s=heartbeat_s / 2, silence_s=silence, beat_s=min(1.0, silence / 4)
        )
        self._sites: dict[tuple[str, int], RaySite] = {}
        self._owns_connection = False

    async def start(self) -> None:
        if ray.is_initialized():
            return
        address = self.address or os.environ.get("RAY_ADDRESS") or "auto"
        await asyncio.to_thread(
            ray.init,
            address=address,
            namespace=self.namespace,
            log_to_driver=False,
            logging_level=logging.WARNING,
        )
        self._owns_connection = True

    async def site(self, cell_id: str, attempt: int, spec: CellSpec | None = None) -> Site:
        check_executor(spec, cell_id, self.kind)
        key = (cell_id, attempt)
        site = self._sites.get(key)
        if site is None:
            site = self._sites[key] = RaySite(self, cell_id, attempt, spec)
        return site

    async def done_with(self, cell_id: str, attempt: int) -> None:
        site = self._sites.pop((cell_id, attempt), None)
        if site is None:
            site = RaySite(self, cell_id, attempt, None)
            if await site._handle(create=False) is None:
                return
        await site.stop()
        await site.kill()

    async def reconcile(self, live: AttemptLive) -> None:
        """Kill the actors of this namespace whose attempt the log does not hold as going
        (pending ones too), but those this process is working with; then remove the
        home's orphaned containers from every node's engine
        (:mod:`arenad.executors.ray.containers`)."""
        await self._reap_actors(live)
        if self.home is not None:
            await containers.reap_nodes(str(self.home), live, started_at=self.started_at)

    async def _reap_actors(self, live: AttemptLive) -> None:
        try:
            named = await asyncio.to_thread(ray.util.list_named_actors, all_namespaces=True)
        except Exception as exc:
            log.warning("reaper: cannot list the cluster's actors: %s", exc)
            return
        for entry in named:
            if entry.get("namespace") != self.namespace:
                continue
            parsed = parse_actor_name(str(entry.get("name")))
            if parsed is None or parsed in self._sites or await live(*parsed):
                continue
            log.info("reaper: killing actor %s (its attempt is over)", entry["name"])
            try:
                actor = await asyncio.to_thread(
                    ray.get_actor, entry["name"], namespace=self.namespace
                )
                await asyncio.to_thread(ray.kill, actor, no_restart=True)
            except ValueError:
                continue  # it died meanwhile

    async def close(self) -> None:
        sites = list(self._sites.values())
        self._sites.clear()
        for site in sites:
            await site.stop()
        if self._owns_connection:
            self._owns_connection = False
            await asyncio.to_thread(ray.shutdown)


def _died(exc: BaseException) -> str:
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"its actor died ({type(exc).__name__}{': ' + first[:300] if first else ''})"


def _keep_copy(path: Path, text: bytes) -> None:
    """The patch where the record says it is, on the head too (atomically)."""
    with contextlib.suppress(OSError):
        if path.read_bytes() == text:
            return  # the node shares this file system
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_bytes(text)
    os.replace(tmp, path)
