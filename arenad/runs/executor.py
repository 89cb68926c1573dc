"""The executor seam: where a cell's work happens, apart from where it is recorded.

The cell runner (:mod:`arenad.daemon.runner`) decides and records; an executor does. The
runner talks to one :class:`Executor` for everything that touches a cell's files and
processes, so a second backend (a cluster) plugs in without touching the runner or the
state machine:

- :meth:`Executor.site` gives the :class:`Site` of one cell attempt: the place (this
  machine, or a node of a cluster) where its workspace lives and its agent runs. It gets
  the cell's spec, whose ``executor`` table says what a cell needs of a cluster node.
- :meth:`Executor.reconcile` lets an executor that holds something per attempt elsewhere
  (a cluster actor) release what the log no longer holds live: the daemon calls it when it
  starts and now and then after.
- :meth:`Site.call` / :meth:`Site.call_blocking` run one *step* there — a plain function
  (materialize, write the arm's inputs, extract the patch, verify, read the agent's store)
  that gets the site's :class:`Tools` as its first argument and returns a picklable value.
- :meth:`Site.start` starts the agent run, *held*: the agent does not start until
  :meth:`Run.release`, which the runner calls only once ``RunStarted`` is committed. So a
  paid run never starts unrecorded, and never twice (the wrapper checks the log itself if
  the daemon dies before releasing it).
- :meth:`Site.attach` re-attaches a run a previous daemon recorded.
- :class:`Run` observes the run's files (lines with their file offsets, resumed from the
  logged positions), tells its activity, and ends it: :meth:`Run.wait` returns how it
  ended; :meth:`Run.abort` and the deadline end the whole process group.

Everything crossing the seam is a msgspec struct or plain data, so it can cross a network.
One contract suite (``tests/runs/executor_contract.py``) runs against every executor.
"""

from __future__ import annotations

import abc
import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Concatenate, ParamSpec, TypeVar

import msgspec

from arenad.errors import ArenadError
from arenad.ingest.offsets import Positions
from arenad.ingest.watcher import Sink, WatchSource
from arenad.runs.cgroups import Limits
from arenad.runs.detached import RunEnd
from arenad.runs.files import RunFiles
from events.base import Event
from events.cell import RunStarted
from events.specs import CellSpec

P = ParamSpec("P")
T = TypeVar("T")

AttemptLive = Callable[[str, int], Awaitable[bool]]
"""``await live(cell_id, attempt)``: whether the log holds that attempt as still going."""


class ExecutorMismatch(ArenadError):
    """A cell's campaign asks for another executor than the daemon runs ([executor])."""

    def __init__(self, cell_id: str, wanted: str, running: str) -> None:
        super().__init__(
            f"cell {cell_id} asks for the {wanted} executor ([executor] in its campaign);"
            f" this daemon runs the {running} executor (arenad daemon --executor {wanted})"
        )


def check_executor(spec: CellSpec | None, cell_id: str, running: str) -> None:
    """Raise ExecutorMismatch when ``spec`` names another executor than ``running``."""
    if spec is not None and spec.executor is not None and spec.executor.kind != running:
        raise ExecutorMismatch(cell_id, spec.executor.kind, running)


class NodeFile(msgspec.Struct, frozen=True, kw_only=True):
    """A step's result that names a file the step wrote at its site.

    An executor whose site is another machine copies the file to the same path here, so
    the runner reads it as if the step had run locally. A step result type subclasses it
    (the patch, :class:`arenad.verdict.patch.PatchResult`): the seam names the shape, not
    the higher layer's type.
    """

    path: str


class RunRequest(msgspec.Struct, frozen=True, kw_only=True):
    """One agent run to start: what runs, where, for how long, and where its output goes."""

    argv: list[str]
    cwd: str
    env: dict[str, str]
    files: RunFiles
    timeout_s: float
    kill_grace_s: float
    # The cell stream and attempt whose RunStarted the wrapper looks for in the log when
    # the daemon dies before releasing it.
    stream: str
    attempt: int
    # The run's limits (arenad.runs.cgroups; None: not limited) and the workspace whose
    # disk use ``disk_bytes`` bounds.
    limits: Limits | None = None
    disk_dir: str | None = None
    disk_bytes: int | None = None
    # The agent's network (arenad.sandbox.network): "host", or its own namespace ("none",
    # "model") with ``forwards`` ("PORT=TARGET") listened on inside.
    network: str = "host"
    forwards: list[str] = []
    # [sandbox] kind = "docker": the agent's container, by name (the wrapper reads its OOM
    # state and removes it; the run's end removes it again, in case the wrapper was killed).
    container: str | None = None
    # Its network "model": the forwards the wrapper listens on inside the container.
    container_forwards: list[str] | None = None


class RunRecord(msgspec.Struct, frozen=True, kw_only=True):
    """What the executor says of a started run: it goes into ``RunStarted``."""

    pid: int
    pgid: int
    # With pid it names the process unambiguously (a recycled pid is not adopted).
    start_ticks: int | None
    started_at_ms: int
    deadline_ms: int
    executor: str = "local"
    # Where it runs, for an executor with more than one place (None: this machine).
    node: str | None = None
    # The run's cgroup (its name under the home's parent), and why a run that asked for
    # limits has none (no cgroup hierarchy here, or it could not be made).
    cgroup: str | None = None
    unlimited_reason: str | None = None


class Tools:
    """What a site lends the steps that run there: things of the machine, made once per
    site, never sent anywhere (a step takes what it needs and leaves the rest)."""

    def __init__(
        self, *, templates: Any = None, report: Callable[[Event], None] | None = None
    ) -> None:
        # arenad.materialize.WorkspaceTemplates: one prepared checkout per (source, base),
        # copied for each git workspace (None: a fresh clone each time).
        self.templates = templates
        # Records a notice of the machine's (inotify dropped events, say) on the daemon's
        # stream; called on the loop (None: the notice is only logged).
        self.report = report


class Observation(abc.ABC):
    """Live ingestion of a run's files into a sink (see :meth:`Run.observe`)."""

    @abc.abstractmethod
    async def close(self) -> None:
        """Drain every file to its end and deliver the last batch, which ends in
        ``IngestionClosed``; re-raises the sink's error if one stopped the observation."""

    @abc.abstractmethod
    async def abort(self) -> None:
        """Stop at once, delivering nothing more (a restart resumes from the log)."""

    async def failed(self) -> BaseException:
        """Returns the error that stopped the observation early (its sink's, or its
        watcher's); waits forever while it goes on. An executor that cannot tell never
        returns: the run's end then says what happened."""
        await asyncio.Event().wait()
        raise AssertionError("unreachable")


class Run(abc.ABC):
    """One agent run, started here or re-attached."""

    record: RunRecord
    files: RunFiles

    @abc.abstractmethod
    async def release(self) -> None:
        """Let the agent start; call only once its ``RunStarted`` is committed."""

    @abc.abstractmethod
    async def cancel_unreleased(self) -> None:
        """End a run whose agent was never released (its start was not recorded)."""

    @abc.abstractmethod
    def abort(self, reason: str) -> None:
        """Ask for the run to end: TERM, the kill grace, then KILL of its whole group."""

    @abc.abstractmethod
    def kill_now(self) -> None:
        """KILL the whole group at once (a forced stop)."""

    @abc.abstractmethod
    async def alive(self) -> bool:
        """Whether the run (not a process that recycled its pid) still runs."""

    @abc.abstractmethod
    async def wait(self) -> RunEnd:
        """Until the run ends: on its own, at its deadline, or aborted."""

    @abc.abstractmethod
    async def observe(
        self, sources: Sequence[WatchSource], positions: Positions, sink: Sink
    ) -> Observation:
        """Deliver what the run writes to ``sources`` into ``sink``, in batches, starting
        at ``positions`` (folded from the log): each byte is delivered once per position."""

    @abc.abstractmethod
    async def activity(self) -> tuple[int, ...]:
        """A mark that changes whenever the run makes output (hang detection)."""


class Site(abc.ABC):
    """Where one cell attempt's work happens."""

    @abc.abstractmethod
    async def call(
        self,
        step: Callable[Concatenate[Tools, P], Awaitable[T]],
        /,
        *args: P.args,
        **kwargs: P.kwargs,
    ) -> T:
        """Run an async step at the site: ``await step(tools, *args, **kwargs)``.

        Cancelling the call cancels the step, and ends whatever processes it started (a
        short command's whole group is killed): how an operator's abort stops a verify."""

    @abc.abstractmethod
    async def call_blocking(
        self, step: Callable[Concatenate[Tools, P], T], /, *args: P.args, **kwargs: P.kwargs
    ) -> T:
        """Run a blocking step at the site, off the caller's event loop."""

    @abc.abstractmethod
    async def start(self, request: RunRequest) -> Run:
        """Start the run's wrapper, holding the agent back until :meth:`Run.release`."""

    @abc.abstractmethod
    async def attach(self, started: RunStarted, run_dir: str) -> Run:
        """The run ``started`` records (it may be gone: :meth:`Run.wait` then says how it
        ended, from its exit record, or that it was lost)."""


class Executor(abc.ABC):
    """A backend that runs cells' work: this machine, or a cluster."""

    kind: str

    async def start(self) -> None:
        """Acquire what the executor needs before the first site (idempotent)."""
        return None

    async def __aenter__(self) -> Executor:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    @abc.abstractmethod
    async def site(self, cell_id: str, attempt: int, spec: CellSpec | None = None) -> Site:
        """The site of one cell attempt (made on first use, found again after a restart);
        ``spec``: the cell's, for what its site needs (a cluster's resources)."""

    async def reconcile(self, live: AttemptLive) -> None:
        """Release what this executor holds for attempts that ``live`` says are over
        (leftovers of a daemon that died); nothing to do for an executor that holds
        nothing between calls."""
        return None

    @abc.abstractmethod
    async def done_with(self, cell_id: str, attempt: int) -> None:
        """The attempt's work is over (recovered or failed): free its site."""

    @abc.abstractmethod
    async def close(self) -> None:
        """Release what the executor holds; running agents are not its to end."""
