"""The node side of the Ray executor: one detached, named actor per cell attempt.

The head (:mod:`arenad.executors.ray.executor`) creates it where the cell's resources are free
and forwards every :class:`~arenad.runs.executor.Site` and
:class:`~arenad.runs.executor.Run` call to it. The actor does the same work a local run
does, on its node:

- **steps** (:meth:`CellActor.call`): materialize, the arm's inputs, patch, verify, the
  agent's store — the same functions, with the actor's own
  :class:`~arenad.runs.executor.Tools`;
- **the run** (:meth:`CellActor.start` ...): the same launcher and wrapper as a local run
  (:func:`arenad.executors.spawn.spawn`), held until the head has committed
  ``RunStarted`` and calls :meth:`CellActor.release`; the same deadline, abort and exit
  record (:class:`~arenad.runs.detached.DetachedRun`), disk bound and container
  (``[sandbox] kind = "docker"``: the node's own engine, its container removed here when
  the run ends, and by the wrapper when this actor dies first);
- **observation** (:meth:`CellActor.observe` / :meth:`CellActor.pull`): the same tailers
  as a local run, handing the head one batch at a time (:mod:`arenad.executors.ray.batches`),
  at most ``WINDOW`` ahead of what the head has appended (bounded; a restarted head
  resumes from the log's offsets with a new observation).

Three things only a remote run needs, because the actor can die or freeze while its agent
runs on (measured in ``notes/ray-findings.md``):

- the wrapper holds the read end of a **lifeline** pipe whose write end only this actor
  holds: when the actor's process dies — however: ``ray.kill``, its node removed — the
  wrapper reads end-of-file and kills the agent's whole group;
- a thread **beats** one byte into the lifeline every ``beat_s`` while the head has called
  within ``lease_s`` and the actor's raylet is still its parent; a frozen node, a head that
  is gone or cut off, or an actor orphaned by a node declared dead stops the beats, and the
  wrapper ends the group after ``silence_s``;
- the wrapper enforces the run's **deadline** itself too (the actor may be frozen).

Without a log on the node, a wrapper whose release pipe closes unreleased never starts its
agent. The agent's environment never carries ``RAY_*`` (the cluster's token among them).

Every method answers ``("ok", value)`` or ``("err", error)`` (:class:`RemoteError`): the
errors steps raise (``MaterializeError``, ``SpawnError``) do not all survive pickling,
so they travel as their class name, arguments and attributes and are rebuilt on the head.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import os
import sys
import threading
import time
import traceback
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import msgspec

from arenad.clock import system_clock
from arenad.containers.docker import remove_container
from arenad.executors import spawn
from arenad.executors.ray.batches import Batch, make_batch
from arenad.ingest.offsets import FileKey, IngestPosition, Positions
from arenad.ingest.watcher import RunDirWatcher, WatchSource
from arenad.runs.detached import DetachedRun, Lifeline, RunEnd
from arenad.runs.executor import NodeFile, RunRecord, RunRequest, Tools
from arenad.runs.launcher_client import WrapperLauncher
from events.base import Event

log = logging.getLogger(__name__)

# The exit code of an actor whose raylet went away (its node was declared dead).
ORPHANED_EXIT = 70
# Names that must not reach anything the actor starts: the worker's own Ray settings
# (the token's path among them) would let a hostile agent drive the cluster.
_RAY_PREFIX = "RAY_"


class ActorConfig(msgspec.Struct, frozen=True, kw_only=True):
    """How the actor keeps its wrapper's lifeline (see the module docstring)."""

    lease_s: float
    silence_s: float
    beat_s: float
    watch_parent: bool = True


class RemoteError(msgspec.Struct, frozen=True, kw_only=True):
    """An exception raised on the node, as plain data (rebuilt by :meth:`rebuild`)."""

    module: str
    qualname: str
    args: list[Any]
    attrs: dict[str, Any]
    text: str

    @classmethod
    def of(cls, exc: BaseException) -> RemoteError:
        kind = type(exc)
        return cls(
            module=kind.__module__,
            qualname=kind.__qualname__,
            args=[a if _plain(a) else repr(a) for a in exc.args],
            attrs={k: v for k, v in vars(exc).items() if _plain(v)},
            text="".join(traceback.format_exception_only(kind, exc)).strip()[-4000:],
        )

    def rebuild(self) -> BaseException:
        """The same exception on this side (its class, arguments and attributes), or a
        RuntimeError naming it when its class cannot be found here."""
        import importlib

        try:
            kind: Any = importlib.import_module(self.module)
            for part in self.qualname.split("."):
                kind = getattr(kind, part)
            if isinstance(kind, type) and issubclass(kind, BaseException):
                exc = kind.__new__(kind)
                exc.args = tuple(self.args)
                vars(exc).update(self.attrs)
                return exc
        except (ImportError, AttributeError, TypeError):
            pass
        return RuntimeError(f"on the node: {self.text}")


def _plain(value: object) -> bool:
    if value is None or isinstance(value, str | int | float | bool):
        return True
    if isinstance(value, list | tuple):
        return all(_plain(v) for v in value)
    return False


Reply = tuple[str, Any]


async def _answer(work: Awaitable[Any]) -> Reply:
    try:
        return ("ok", await work)
    except Exception as exc:
        return ("err", RemoteError.of(exc))


class PullReply(msgspec.Struct, frozen=True, kw_only=True):
    """One :meth:`CellActor.pull`: the batch in hand (None: nothing new within the wait),
    whether the observation has delivered everything (after :meth:`CellActor.finish`), or
    why it stopped."""

    batch: Batch | None = None
    done: bool = False
    failure: str | None = None
    # The actor holds no observation of that id (it was replaced): open a new one.
    unknown: bool = False


# Batches a node reads ahead of the head's acknowledgement: its next read overlaps the
# head's append, and what is in flight stays bounded.
WINDOW = 2


class _NodeObservation:
    """One observation on the node: a watcher whose sink queues each batch for the head and
    waits while ``WINDOW`` batches are unacknowledged (the head's pull names the seq of the
    last batch it appended)."""

    def __init__(
        self,
        obs_id: str,
        sources: Sequence[WatchSource],
        positions: Positions,
        *,
        max_events: int,
        max_bytes: int,
    ) -> None:
        self.obs_id = obs_id
        # Where the last batch made leaves each file (the next one reads on from there).
        self.files: dict[FileKey, IngestPosition] = dict(positions.files)
        self.seq = 0
        self.outbox: collections.deque[Batch] = collections.deque()
        self._room = asyncio.Event()
        self._room.set()
        self.changed = asyncio.Event()
        self.watcher = RunDirWatcher(
            sources,
            self._sink,
            positions=positions,
            max_batch_events=max_events,
            max_batch_bytes=max_bytes,
        )
        self.closing: asyncio.Task[Positions] | None = None

    async def start(self) -> None:
        await self.watcher.start()

    async def _sink(self, events: list[Event]) -> None:
        await self._room.wait()
        self.seq += 1
        batch, self.files = make_batch(self.seq, events, self.files)
        self.outbox.append(batch)
        if len(self.outbox) >= WINDOW:
            self._room.clear()
        self.changed.set()

    def ack(self, seq: int) -> None:
        while self.outbox and self.outbox[0].seq <= seq:
            self.outbox.popleft()
        if len(self.outbox) < WINDOW:
            self._room.set()

    def finish(self) -> None:
        if self.closing is None:
            self.closing = asyncio.create_task(self.watcher.close())
            self.closing.add_done_callback(lambda _: self.changed.set())

    def reply(self) -> PullReply:
        batch = self.outbox[0] if self.outbox else None
        failure = self.watcher.failure
        if self.closing is not None and self.closing.done() and not self.closing.cancelled():
            exc = self.closing.exception()
            if exc is not None:
                failure = exc
        if failure is not None and batch is None:
            return PullReply(failure=f"{type(failure).__name__}: {failure}")
        done = batch is None and self.closing is not None and self.closing.done()
        return PullReply(batch=batch, done=done)

    async def abort(self) -> None:
        if self.closing is not None:
            self.closing.cancel()
        self._room.set()
        await self.watcher.abort()


class CellActor:
    """See the module docstring. Created by the head with Ray's options (detached,
    named, never restarted, never retried, no CPU, the cell's resources)."""

    def __init__(self, config: ActorConfig) -> None:
        import ray

        self.config = config
        context = ray.get_runtime_context()
        ip = ray.util.get_node_ip_address()  # type: ignore[no-untyped-call]
        self.node = f"{ip}/{context.get_node_id()}"
        # Children this process starts (the launcher, git, verify) must not inherit the
        # worker's Ray settings; the worker itself has read what it needs of them.
        for name in [n for n in os.environ if n.startswith(_RAY_PREFIX + "AUTH_TOKEN")]:
            del os.environ[name]
        self.tools = Tools()
        self._launcher: WrapperLauncher | None = None
        self._run: DetachedRun | None = None
        self._released = False
        self._end: asyncio.Task[RunEnd] | None = None
        self._container: str | None = None
        self._observation: _NodeObservation | None = None
        self._lifeline_w: int | None = None
        self._lifeline_lock = threading.Lock()
        self._heard_at = time.monotonic()
        self._parent = os.getppid()
        threading.Thread(target=self._beat, name="arenad lifeline", daemon=True).start()

    # -- the lifeline ----------------------------------------------------------------

    def _heard(self) -> None:
        self._heard_at = time.monotonic()

    def _beat(self) -> None:
        # A plain thread, not the event loop: a busy step must not starve the wrapper.
        while True:
            if self.config.watch_parent and os.getppid() != self._parent:
                # The raylet that started this worker is gone (the node was declared dead,
                # then came back): Ray has written this actor off, but nothing would end
                # it. Exiting closes the lifeline, and the wrapper ends the agent.
                os._exit(ORPHANED_EXIT)
            if time.monotonic() - self._heard_at < self.config.lease_s:
                with self._lifeline_lock:
                    if self._lifeline_w is not None:
                        with contextlib.suppress(BlockingIOError):
                            os.write(self._lifeline_w, b".")
            time.sleep(self.config.beat_s)

    def _new_lifeline(self) -> int:
        """A fresh lifeline (the previous one, if any, closes: its wrapper ends); returns
        the read end for the wrapper."""
        read_end, write_end = os.pipe()  # close-on-exec: no child inherits either end
        os.set_blocking(write_end, False)
        with self._lifeline_lock:
            old, self._lifeline_w = self._lifeline_w, write_end
            if old is not None:
                os.close(old)
        return read_end

    # -- steps -----------------------------------------------------------------------

    async def ping(self) -> Reply:
        self._heard()
        wrapper = self._run.pid if self._run is not None else None
        return ("ok", {"node": self.node, "actor_pid": os.getpid(), "wrapper_pid": wrapper})

    async def call(
        self,
        step: Callable[..., Any],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        blocking: bool,
    ) -> Reply:
        """Run one site step here; a patch comes back with its text (the head keeps it
        where the record says it is)."""
        self._heard()

        async def work() -> tuple[Any, bytes | None]:
            if blocking:
                value = await asyncio.to_thread(step, self.tools, *args, **kwargs)
            else:
                value = await step(self.tools, *args, **kwargs)
            text = None
            if isinstance(value, NodeFile):
                text = await asyncio.to_thread(Path(value.path).read_bytes)
            return value, text

        return await _answer(work())

    # -- the run ---------------------------------------------------------------------

    async def start(self, request: RunRequest) -> Reply:
        self._heard()
        return await _answer(self._start(request))

    async def _start(self, request: RunRequest) -> RunRecord:
        if self._run is not None:
            if self._released and self._run.alive:
                raise RuntimeError(f"run {self._run.pid} of this attempt is still running")
            if not self._released:
                # Started by a head that died before recording it: never released, so
                # its agent never ran.
                await self._run.cancel_unreleased()
        if self._launcher is None:
            self._launcher = WrapperLauncher()
        read_end = self._new_lifeline()
        # What runs here must not hold the worker's Ray settings. The rest is as a local
        # run's: a container (its client, ``docker run``, was made by this node's prepare
        # step, so it names this node's client and engine) and the disk bound (the wrapper
        # walks the run dir here).
        request = msgspec.structs.replace(
            request,
            env={k: v for k, v in request.env.items() if not k.startswith(_RAY_PREFIX)},
        )
        try:
            run = await spawn.spawn(
                request,
                store_path=None,
                clock=system_clock,
                launcher=self._launcher,
                lifeline=Lifeline(read_fd=read_end, silence_s=self.config.silence_s),
            )
        finally:
            os.close(read_end)
        self._run, self._released, self._end = run, False, None
        self._container = request.container
        # No cgroup of the run's on a node: a container's limits are docker's own, and the
        # runner records a run without either as unlimited, saying why.
        return spawn.record(run, executor="ray", node=self.node)

    async def attach(self, pid: int) -> Reply:
        """What this actor holds of run ``pid``: "held" (never released), "running" /
        "ended" (released), or "none" (another run, or none)."""
        self._heard()
        run = self._run
        if run is None or run.pid != pid:
            return ("ok", "none")
        if not self._released:
            return ("ok", "held")
        return ("ok", "running" if self._end is None or not self._end.done() else "ended")

    async def release(self) -> Reply:
        """Let the agent start (idempotent); the head calls it once RunStarted is
        committed."""
        self._heard()
        if self._run is not None and not self._released:
            self._released = True
            self._run.release()
            self._end = asyncio.create_task(self._ended(self._run, self._container))
        return ("ok", None)

    @staticmethod
    async def _ended(run: DetachedRun, container: str | None) -> RunEnd:
        """How the run ended, once its container (if any) is gone from this node's engine:
        a group KILL (the grace ran out) kills the client, not its container; the wrapper
        normally removed it already (then this is a no-op)."""
        end = await run.wait(system_clock)
        if container is not None:
            problem = await remove_container(container)
            if problem is not None:
                log.warning("container %s not removed: %s", container, problem)
        return end

    async def cancel_unreleased(self) -> Reply:
        self._heard()
        if self._run is not None and not self._released:
            return await _answer(self._run.cancel_unreleased())
        return ("ok", None)

    async def abort(self, reason: str) -> Reply:
        self._heard()
        if self._run is not None:
            self._run.abort(reason)
        return ("ok", None)

    async def kill_now(self) -> Reply:
        self._heard()
        if self._run is not None:
            self._run.kill_now()
        return ("ok", None)

    async def alive(self) -> Reply:
        self._heard()
        return ("ok", self._run is not None and self._run.alive)

    async def wait(self, timeout_s: float) -> Reply:
        """How the run ended, or None if it still runs after ``timeout_s`` (the head
        calls again: each call is also a heartbeat)."""
        self._heard()
        end = self._end
        if end is None:
            await asyncio.sleep(timeout_s)
            return ("ok", None)
        done, _ = await asyncio.wait({end}, timeout=timeout_s)
        if not done:
            return ("ok", None)
        return await _answer(end)

    async def activity(self) -> Reply:
        self._heard()
        run = self._run
        if run is None:
            return ("ok", ())
        return ("ok", spawn.activity(run.files))

    # -- observation -----------------------------------------------------------------

    async def observe(
        self,
        obs_id: str,
        sources: list[WatchSource],
        positions: Positions,
        max_events: int,
        max_bytes: int,
    ) -> Reply:
        """Start observing from ``positions`` (the log's), replacing any observation of an
        earlier head; the same ``obs_id`` again is a no-op."""
        self._heard()
        current = self._observation
        if current is not None and current.obs_id == obs_id:
            return ("ok", None)
        if current is not None:
            self._observation = None
            await current.abort()
        observation = _NodeObservation(
            obs_id, sources, positions, max_events=max_events, max_bytes=max_bytes
        )
        self._observation = observation
        return await _answer(observation.start())

    async def pull(self, obs_id: str, ack: int, wait_s: float) -> Reply:
        """Acknowledge the head's last batch (``ack``: its seq) and hand over the next one,
        waiting up to ``wait_s`` for it."""
        self._heard()
        observation = self._observation
        if observation is None or observation.obs_id != obs_id:
            return ("ok", PullReply(unknown=True))
        observation.ack(ack)
        reply = observation.reply()
        if reply.batch is None and not reply.done and reply.failure is None:
            observation.changed.clear()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(wait_s):
                    await observation.changed.wait()
            reply = observation.reply()
        return ("ok", reply)

    async def finish(self, obs_id: str) -> Reply:
        """The run has ended: drain every file, then close (what the next pulls hand over)."""
        self._heard()
        observation = self._observation
        if observation is not None and observation.obs_id == obs_id:
            observation.finish()
        return ("ok", None)

    async def stop_observing(self, obs_id: str) -> Reply:
        self._heard()
        observation = self._observation
        if observation is not None and observation.obs_id == obs_id:
            self._observation = None
            await observation.abort()
        return ("ok", None)

    async def python(self) -> Reply:
        """The interpreter this node runs (for a clear error when it lacks arenad)."""
        return ("ok", sys.executable)
