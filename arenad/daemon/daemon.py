"""The daemon loop: schedule runnable cells up to max-parallel, react to control
events from the log, stop gracefully.

Scheduling is a query of the cells read port (what is not terminal and not paused);
the decision of what to do with a cell is its runner's, from the cell's own fold.
Control requests (abort, pause, max-parallel) arrive as events, written by
`arenad abort|pause|...` from another process; the daemon follows the log. Where the
cells' work happens is the executor's (:mod:`arenad.runs.executor`).

Spend caps (:mod:`arenad.budget.cap`): before a cell of a capped campaign is materialized or
its run started, the campaign's spend (:mod:`arenad.budget.spend`, folded once from the log at
start, then from the followed cell events and from every ingested batch of this daemon's
runs, as it is recorded) is held against the cap in force. At the cap the daemon records
one ``campaign.budget-reached``, starts nothing more of the campaign (its cells stay as they
are, not failed) and, with ``abort_running``, aborts its running runs; a raised cap
(``campaign.budget-set``) lets it go on.

Lifecycle (procrastinate's worker is the model): each resource registers its teardown
on one exit stack as it is acquired, so the teardowns run in reverse order whatever
happens; a side task (the control follower, the proposer capture) that fails stops the
daemon at once, not when the loop next wakes; signal handlers are installed and
restored in one place (:func:`signal_handlers`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket
import sys
import traceback
from collections.abc import Callable, Coroutine, Iterator, Mapping, Sequence
from typing import Any

import msgspec

from arenad import __version__
from arenad.budget.cap import CampaignBudget, apply_budget, cap_in_force, is_reached
from arenad.budget.spend import SPEND_TAGS, SpendFold
from arenad.campaign.load import DEFAULT_BREAKER_AFTER
from arenad.cell.retry import RetryPolicy
from arenad.clock import Clock, system_clock, wait_for_event
from arenad.daemon import diskfull
from arenad.daemon.breaker import Breaker, Trip
from arenad.daemon.documents import rewrite_missing_documents
from arenad.daemon.lease import CHECK_EVERY_S, DaemonLease
from arenad.daemon.progress import start_live_line
from arenad.daemon.runner import CellRunner, RunnerConfig
from arenad.errors import (
    ArenadError,
    ConcurrencyError,
    IllegalTransition,
    LeaseError,
    LogTampered,
    StoreUnwritable,
    UserError,
)
from arenad.executors.local import LocalExecutor
from arenad.home import Home, open_store
from arenad.materialize import WorkspaceTemplates
from arenad.proposer.capture import ProposerPaths, run_proposer_capture
from arenad.readmodels.campaigns import load_budgets, load_spend
from arenad.readmodels.view import CellsView, cells_view
from arenad.runs import limits
from arenad.runs.executor import Executor, Tools
from arenad.store.base import AppendRequest, EventStore
from arenad.store.faults import fault_from_env
from arenad.store.group_commit import GroupCommit
from events import cell as ev
from events import streams
from events.base import Event, Recorded
from events.control import (
    BreakerTripped,
    BudgetReached,
    CampaignSubmitted,
    DaemonStarted,
    DaemonStopped,
    DiskFull,
    MaxParallelChanged,
)
from events.specs import arm_of, campaign_of

# How long the daemon's appends wait for another writer's transaction. `arenad submit`
# writes a campaign in one transaction (all or nothing): at 100 000 cells it held the lock
# 13-25 s on a loaded 2-core machine (bench/submit.py), past SQLite's usual 10 s, and an
# append that gives up fails a running cell's step (a crash record). The daemon waits
# instead; a lock held longer than this is a stuck writer, and the step fails as before.
DAEMON_LOCK_WAIT_S = 300.0

log = logging.getLogger("arenad.daemon")

# `daemon --until-idle`'s exit status when it went idle because campaigns are held at their
# spend cap with cells that never started (README's exit-code table): not 0, so a script
# does not take a capped campaign for a finished one.
EXIT_AT_CAP = 3

# After a second stop request, how long steps in flight get before they are cancelled.
_FORCE_GRACE_S = 5.0
# The events that can change what the scheduler should do (the control follower's filter).
_SCHEDULE_TAGS = frozenset(
    {
        "campaign.submitted",
        "control.max-parallel",
        "cell.submitted",
        "cell.retried",
        "cell.abort-requested",
        "cell.paused",
        "cell.resumed",
        "campaign.budget-set",
        "campaign.budget-reached",
        # Another daemon on this home: this one stops (arenad.daemon.lease).
        "daemon.started",
        # What moves a campaign's spend (a few per cell; never the ingested lines).
        *SPEND_TAGS,
    }
)

# Store failures after which nothing more can be written: the daemon stops at once.
_STORE_FATAL = (StoreUnwritable, LogTampered)

# How long a new daemon waits for one that started before it, never recorded its stop and
# still runs, to see the new start and stop (arenad.daemon.lease).
PREVIOUS_DAEMON_WAIT_S = 5.0
# Under the home: the daemon's prepared checkouts (emptied when it starts and stops).
WORKSPACE_TEMPLATES = "workspace-templates"
# How often the executor is asked to release what it holds for attempts that are over
# (Executor.reconcile; the first time at start).
RECONCILE_EVERY_S = 120.0


class DaemonOptions(msgspec.Struct, frozen=True, kw_only=True):
    max_parallel: int | None = None
    until_idle: bool = False
    hang_after_s: float | None = None
    hang_abort: bool = False
    # How long a stop waits for running cells to record their abort and for the steps
    # in flight to finish; what is left is resumed from the log by the next daemon.
    drain_timeout_s: float = 60.0
    # On stop, leave running agents running for the next daemon to adopt (an upgrade or
    # a planned restart) instead of aborting them.
    leave_running: bool = False
    # Run only these campaigns' cells (empty: every campaign's).
    campaigns: tuple[str, ...] = ()
    retry: RetryPolicy = RetryPolicy()
    # A spend cap (USD) on every campaign this daemon runs; a campaign's own lower cap wins.
    max_usd: float | None = None
    # Proposer capture: where shot worktrees live (default <home>/proposer-wt) and Claude
    # Code's projects dir (default ~/.claude/projects).
    proposer_worktree_root: str | None = None
    claude_projects_dir: str | None = None
    # On a terminal: one live line (cells by state, running, spend, ETA) under the logs.
    progress: bool = False


class DaemonFatal(ArenadError):
    """The daemon cannot go on (its store cannot be written); it stops, agents keep running."""


ExecutorFactory = Callable[[Home, Tools], Executor]


def local_executor(home: Home, tools: Tools) -> Executor:
    return LocalExecutor(store_path=home.db_path, tools=tools)


class Daemon:
    def __init__(
        self,
        store: EventStore,
        home: Home,
        options: DaemonOptions,
        base_env: Mapping[str, str],
        clock: Clock = system_clock,
        *,
        cells: CellsView | None = None,
        executor: ExecutorFactory = local_executor,
        capacity: limits.Capacity | None = None,
        lease: DaemonLease | None = None,
    ) -> None:
        self.store = store
        # The home's lease, re-checked while the daemon runs (None: not watched).
        self.lease = lease
        # The seq of this daemon's own daemon.started: a newer one is another daemon's.
        self.started_seq: int | None = None
        self.cells = cells if cells is not None else cells_view(store)
        self.home = home
        self.options = options
        self.clock = clock
        self.config = RunnerConfig(
            home=home,
            base_env=dict(base_env),
            hang_after_s=options.hang_after_s,
            hang_abort=options.hang_abort,
            retry=options.retry,
        )
        self.max_parallel = options.max_parallel or 4
        # What this machine's limits allow (None: unchecked, as in tests of the loop).
        self.capacity = capacity
        self.campaign_limits: dict[str, int] = {}
        self.budgets: dict[str, CampaignBudget] = {}
        self.spend = SpendFold()
        self._spend_loaded = False
        # Campaigns at their cap: none of their cells starts.
        self.held: set[str] = set()
        # The circuit breaker (arenad.daemon.breaker), fed this daemon's cell appends; a
        # campaign it tripped on starts nothing more until its cells are paused in the log.
        self.breaker = Breaker(DEFAULT_BREAKER_AFTER)
        self.tripped: dict[str, Trip] = {}
        # Set when --until-idle went idle with campaigns held at their cap (EXIT_AT_CAP).
        self.at_cap_summary: str | None = None
        self.runners: dict[str, CellRunner] = {}
        # The runs this daemon followed when the disk filled (cell id -> RunStarted).
        self._runs_at_disk_full: dict[str, ev.RunStarted] = {}
        # Set when the store found the disk full and the reserve made room; the bytes freed.
        self._disk_full = asyncio.Event()
        self._released_bytes = 0
        self.tasks: dict[str, asyncio.Task[None]] = {}
        self.stopping = asyncio.Event()
        self.wake = asyncio.Event()
        self.signals = 0
        self.stop_reason = "idle"
        self.fatal: BaseException | None = None
        # A side task's failure: the daemon stops at once and run() raises it.
        self.side_failure: BaseException | None = None
        # Prepared checkouts, one per (source, base), copied for each git workspace.
        self.templates = WorkspaceTemplates(home.root / WORKSPACE_TEMPLATES)
        self._make_executor = executor
        self.executor: Executor | None = None
        # Every cell's appends (transitions, ingested batches): those that arrive together
        # share a transaction.
        self.group_commit = GroupCommit(store)
        # Notices of the machine the executor reports (inotify dropped events), recorded
        # on the daemon stream in order.
        self._notices: asyncio.Queue[Event] = asyncio.Queue()

    # -- control -----------------------------------------------------------------

    def stop(self, reason: str) -> None:
        """First call: drain (no new cells; running agents aborted, or left running with
        ``leave_running`` and no longer waited for; steps in flight finish within the
        drain bound). Second call:
        force (agents killed without grace, steps in flight cancelled)."""
        self.signals += 1
        self.stop_reason = reason
        force = self.signals > 1
        if force:
            log.warning("second stop request: killing running agents now")
        else:
            log.info("stopping (%s): draining running cells", reason)
        self.stopping.set()
        self.wake.set()
        for runner in self.runners.values():
            runner.request_shutdown(abort_runs=not self.options.leave_running, force=force)
        if force:
            for task in self.tasks.values():
                task.get_loop().call_later(_FORCE_GRACE_S, task.cancel)

    def _stop_fatally(self, exc: BaseException, reason: str = "store unwritable") -> None:
        """The store cannot be written (or refuses to: the log fails its chain check), or
        another daemon holds the home: stop at once, recording nothing more and aborting
        nothing (an abort could not be recorded, or is not this daemon's to record);
        running agents stay adoptable."""
        if self.fatal is None:
            self.fatal = exc
            log.error("stopping: %s", exc)
            if diskfull.is_disk_full(exc):
                # Before the runners go: which runs were this daemon's.
                self._runs_at_disk_full = self._running_runs()
        self.stop_reason = reason
        self.stopping.set()
        self.wake.set()
        for runner in self.runners.values():
            runner.request_shutdown(abort_runs=False)
        for task in self.tasks.values():
            task.cancel()

    def _side_task_done(self, task: asyncio.Task[object]) -> None:
        """A side task ended: unless the daemon is stopping, that is a failure, and the
        daemon stops at once (a dead follower would ignore every abort from then on)."""
        if task.cancelled():
            exc: BaseException | None = None
        else:
            exc = task.exception()
        if exc is None and self.stopping.is_set():
            return
        failure = exc or RuntimeError(f"{task.get_name()} ended while the daemon ran")
        if isinstance(failure, _STORE_FATAL):
            self._stop_fatally(failure)
            return
        if self.side_failure is None:
            self.side_failure = failure
            log.error("stopping: %s failed: %r", task.get_name(), failure)
            self.stop(f"{task.get_name()} failed")

    async def _follow_control(self, after_seq: int) -> None:
        # Only what can change the schedule: the log's bulk (ingested lines, captures) is
        # not even read, let alone decoded. Schedule events come from other processes (the
        # CLI); this daemon's own appends, several per cell, are no reason to look again.
        async for r in self.store.follow(
            after_seq, poll_s=0.2, tags=_SCHEDULE_TAGS, wake_on_appends=False
        ):
            self._on_event(r)

    def _lease_lost(self, why: str) -> None:
        self._stop_fatally(LeaseError(why), "lease lost")

    async def _watch_lease(self) -> None:
        """Stop as soon as the home's lease is another daemon's (arenad.daemon.lease)."""
        assert self.lease is not None
        while True:
            await asyncio.sleep(CHECK_EVERY_S)
            why = self.lease.check()
            if why is not None:
                self._lease_lost(why)
                return

    async def _wait_for_previous(self) -> None:
        """A daemon that started before this one and never recorded its stop may still be
        running beside it (its lease file deleted): it sees this daemon's start and stops
        within a moment (:meth:`_on_event`). Its exit is waited for (bounded), so the two
        never drive a cell at once; a dead pid (a crash) costs no wait."""
        previous: DaemonStarted | None = None
        for r in await self.store.read_stream(streams.DAEMON):
            if self.started_seq is not None and r.seq >= self.started_seq:
                break
            if isinstance(r.event, DaemonStarted):
                previous = r.event
            elif isinstance(r.event, DaemonStopped):
                previous = None
        if previous is None or previous.pid == os.getpid():
            return
        if previous.hostname != socket.gethostname():
            return
        deadline = self.clock() + PREVIOUS_DAEMON_WAIT_S * 1000
        while _alive(previous.pid) and self.clock() < deadline:
            await asyncio.sleep(0.05)

    def _on_event(self, r: Recorded) -> None:
        e = r.event
        if isinstance(e, DaemonStarted):
            if self.started_seq is not None and r.seq > self.started_seq:
                self._lease_lost(
                    f"another daemon (pid {e.pid} on {e.hostname}) started on this home"
                    f" (daemon.started at seq {r.seq}, after this one's at {self.started_seq})"
                )
            return
        if r.tag in SPEND_TAGS or r.stream.startswith(streams.CAMPAIGN):
            if r.stream.startswith(streams.CAMPAIGN):
                name = r.stream[len(streams.CAMPAIGN) :]
                self.budgets[name] = apply_budget(self.budgets.get(name), name, e, r.recorded_at_ms)
            touched = self.spend.apply(r.stream, e)
            if r.tag in SPEND_TAGS and not isinstance(e, CampaignSubmitted):
                if touched is not None and self._cap(touched) is not None:
                    self.wake.set()
                return
        if isinstance(e, MaxParallelChanged):
            self.max_parallel = self._within_capacity(e.max_parallel)
            log.info("max-parallel is now %d", self.max_parallel)
        elif streams.is_cell_stream(r.stream):
            cell_id = streams.cell_of(r.stream)
            runner = self.runners.get(cell_id)
            if isinstance(e, ev.AbortRequested) and runner is not None:
                runner.request_abort(e.reason, operator=True)
            elif isinstance(e, ev.CellPaused) and runner is not None:
                log.info("%s paused; the step in flight finishes first", cell_id)
                runner.request_pause()
        elif isinstance(e, CampaignSubmitted):
            if e.max_parallel:
                self.campaign_limits[e.name] = e.max_parallel
            if e.breaker_after is not None:
                self.breaker.after[e.name] = e.breaker_after
        self.wake.set()

    # -- scheduling --------------------------------------------------------------

    async def _runnable(self) -> list[tuple[str, str]]:
        # A bounded look ahead (campaign limits may skip some rows): the scheduler runs on
        # every freed slot, and reading every pending row each time would make a campaign
        # of n cells cost n² row reads. Campaigns at their cap are left out in the query,
        # so their waiting cells never fill the look ahead.
        free = max(self.max_parallel - len(self.tasks), 0)
        return await self.cells.runnable(
            exclude=list(self.tasks),
            limit=4 * free + 16,
            hold_campaigns=sorted(self.held),
            only_campaigns=self.options.campaigns,
        )

    # -- spend caps --------------------------------------------------------------

    def _cap(self, campaign: str) -> tuple[float, str] | None:
        return cap_in_force(self.budgets.get(campaign), self.options.max_usd)

    def _cap_and_spent(self, campaign: str) -> tuple[float, float] | None:
        """The cap in force and the spend of record, for the gateway's grant: only for a
        campaign whose cap aborts running cells (``abort_running``). Otherwise the cap
        stops new cells and a running one finishes, so the gateway must not cut it off."""
        budget = self.budgets.get(campaign)
        cap = self._cap(campaign)
        if cap is None or budget is None or not budget.abort_running:
            return None
        return cap[0], self.spend.campaign(campaign).spent_usd

    def _at_cap(self, campaign: str) -> bool:
        """The spend reached the cap in force, or the log says it did: only a new cap lets
        the campaign go on (a recovered figure below the live one does not)."""
        cap = self._cap(campaign)
        if cap is None:
            return False
        budget = self.budgets.get(campaign)
        if budget is not None and budget.reached == cap[0]:
            return True
        return is_reached(self.spend.campaign(campaign).spent_usd, cap[0])

    def _fits(self, cell_id: str, campaign: str) -> bool:
        """Under a cap, a cell starts only if the spend, what the running cells reserve and
        its own expected cost fit (arenad.budget.spend.SpendFold.may_start)."""
        cap = self._cap(campaign)
        if cap is None or not self._spend_loaded:
            return True
        return self.spend.may_start(campaign, arm_of(cell_id), cap[0], self._running_in(campaign))

    def _on_ingested(self, stream: str, events: Sequence[Event]) -> None:
        """A run's ingested batch: its step costs go into the campaign's spend as they are
        recorded (the stream is never read again for it)."""
        touched = None
        for e in events:
            touched = self.spend.apply(stream, e) or touched
        if touched is not None and self._cap(touched) is not None:
            self.wake.set()

    async def _check_budgets(self) -> None:
        """Hold the campaigns at their cap (recording it once per cap, aborting their runs
        when asked to); let go of those whose cap was raised."""
        known = set(self.budgets) | set(self.spend.campaigns())
        names = {n for n in known if self._cap(n) is not None} | self.held
        if names and not self._spend_loaded:
            await load_spend(self.store, self.spend)
            self._spend_loaded = True
        for name in sorted(names):
            cap = self._cap(name)
            spend = self.spend.campaign(name)
            if cap is None or not self._at_cap(name):
                if name in self.held:
                    log.info("%s: under its cap again; its cells start", name)
                self.held.discard(name)
                continue
            self.held.add(name)
            budget = self.budgets.get(name) or CampaignBudget(name=name)
            if budget.reached == cap[0]:
                continue
            abort = budget.abort_running and cap[1] == "campaign"
            reason = f"campaign budget reached: ${spend.spent_usd:.4f} of ${cap[0]:g}"
            log.warning("%s: %s; no new cell starts", name, reason)
            record = BudgetReached(
                max_usd=cap[0],
                spent_usd=round(spend.spent_usd, 10),
                unknown_attempts=spend.unknown_attempts,
                running=spend.running,
                source="daemon" if cap[1] == "daemon" else "campaign",
                action="abort" if abort else "hold",
            )
            recorded = await self.store.append(streams.campaign_stream(name), None, [record])
            self.budgets[name] = apply_budget(budget, name, record, recorded[0].recorded_at_ms)
            if abort:
                for runner in list(self.runners.values()):
                    if campaign_of(runner.cell_id) == name and runner.run_in_flight:
                        # The cap is the operator's: the run is interrupted, not scored.
                        runner.request_abort(reason, cause="operator")

    # -- the circuit breaker -----------------------------------------------------

    def _on_appended(self, cell_id: str, events: Sequence[Event]) -> None:
        """A cell's own append, as it commits: folded into the breaker at once (so no more
        cell of a tripped campaign starts while the trip is being recorded)."""
        trip = self.breaker.apply(cell_id, events)
        if trip is not None and trip.campaign not in self.tripped:
            self.tripped[trip.campaign] = trip
            self.wake.set()

    async def _check_breakers(self) -> None:
        """Record each trip: one campaign.breaker-tripped and a CellPaused of every
        unfinished, unpaused cell of the campaign, in one transaction."""
        for name, trip in list(self.tripped.items()):
            reason = (
                f"circuit breaker: {trip.failures} consecutive infrastructure failures"
                f" ({trip.cause})"
            )
            for _ in range(5):
                ids = [str(row["cell_id"]) for row in await self.cells.rows(name)]
                requests: list[AppendRequest] = []
                for i in range(0, len(ids), 500):
                    states = await self.cells.states(ids[i : i + 500])
                    for state in states.values():
                        if not state.terminal and not state.paused:
                            requests.append(
                                AppendRequest(
                                    streams.cell_stream(state.cell_id),
                                    state.version,
                                    [ev.CellPaused(reason=reason)],
                                )
                            )
                record = BreakerTripped(
                    cause=trip.cause,
                    failures=trip.failures,
                    last_error=trip.last_error,
                    cells=trip.cells,
                    paused=len(requests),
                )
                try:
                    await self.store.append_many(
                        [*requests, AppendRequest(streams.campaign_stream(name), None, [record])]
                    )
                except (ConcurrencyError, IllegalTransition):
                    continue  # a cell moved on meanwhile: read them again
                break
            log.warning(
                "%s: paused by the %s; last error: %s (`arenad resume --campaign %s`"
                " once the cause is fixed)",
                name,
                reason,
                trip.last_error.splitlines()[-1] if trip.last_error else "?",
                name,
            )
            for runner in list(self.runners.values()):
                if campaign_of(runner.cell_id) == name:
                    runner.request_pause()
            del self.tripped[name]

    def _start(self, cell_id: str, executor: Executor) -> None:
        campaign = campaign_of(cell_id)
        runner = CellRunner(
            self.store,
            self.config,
            cell_id,
            self.clock,
            executor,
            may_start=lambda: not self._at_cap(campaign) and campaign not in self.tripped,
            campaign_budget=lambda: self._cap_and_spent(campaign),
            on_ingested=self._on_ingested,
            on_appended=self._on_appended,
            group_commit=self.group_commit,
        )
        self.runners[cell_id] = runner
        task = asyncio.create_task(self._drive(runner), name=f"cell {cell_id}")
        self.tasks[cell_id] = task

    async def _drive(self, runner: CellRunner) -> None:
        try:
            await runner.drive()
        except _STORE_FATAL as exc:
            self._stop_fatally(exc)
        except Exception as exc:
            log.exception("%s: the cell runner crashed", runner.cell_id)
            await self._record_crash(runner, exc)
        finally:
            self.runners.pop(runner.cell_id, None)
            self.tasks.pop(runner.cell_id, None)
            self.wake.set()

    async def _record_crash(self, runner: CellRunner, exc: Exception) -> None:
        # A bug in a step must not leave the cell looking healthy: fail it, visibly. The
        # reason is one line (what failed, and where); the traceback is in the daemon's log.
        try:
            state = await runner.writer.load()
            if not state.terminal:
                await runner.writer.append(
                    [
                        ev.CellFailed(
                            attempt=state.attempt,
                            stage=str(state.status),
                            error=crash_reason(exc),
                            classification="infrastructure",
                        )
                    ]
                )
        except _STORE_FATAL as exc:
            self._stop_fatally(exc)
        except Exception:
            log.exception("%s: could not record the runner's crash", runner.cell_id)

    def _running_in(self, campaign: str) -> int:
        return sum(1 for r in self.runners.values() if campaign_of(r.cell_id) == campaign)

    def _side_task(
        self, stack: contextlib.AsyncExitStack, coro: Coroutine[Any, Any, None], name: str
    ) -> None:
        """Start a side task whose failure stops the daemon; its teardown (cancel, wait)
        is registered on ``stack``."""
        task = asyncio.create_task(coro, name=name)
        task.add_done_callback(self._side_task_done)

        async def teardown() -> None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

        stack.push_async_callback(teardown)

    def _within_capacity(self, wanted: int) -> int:
        """``wanted`` cells at once, or as many as the machine's limits allow (a request
        from the log cannot be refused like a command-line option: it is clamped)."""
        if self.capacity is None:
            return wanted
        refusal = self.capacity.refusal(wanted)
        if refusal is None:
            return wanted
        log.warning("%s; running %d at once", refusal, self.capacity.max_cells)
        return self.capacity.max_cells

    def _check_capacity(self) -> None:
        """Refuse a --max-parallel the limits cannot carry, before anything is recorded."""
        if self.capacity is None:
            return
        requested = self.options.max_parallel
        refusal = self.capacity.refusal(requested) if requested is not None else None
        if refusal is not None:
            raise UserError(refusal)
        for warning in self.capacity.warnings():
            log.warning("%s", warning)
        self.max_parallel = self._within_capacity(self.max_parallel)

    async def _check_campaigns(self) -> None:
        """``--campaign`` names only campaigns in the log: a typo would run nothing."""
        if not self.options.campaigns:
            return
        known = {c for c, *_ in await self.cells.campaign_counts()}
        missing = [c for c in self.options.campaigns if c not in known]
        if missing:
            raise UserError(f"--campaign: no campaign {missing[0]!r} (see `arenad campaigns`)")

    async def run(self) -> int:
        await self._check_campaigns()
        async with contextlib.AsyncExitStack() as stack:
            if not await asyncio.to_thread(diskfull.ensure_reserve, self.home.root):
                log.warning(
                    "no room for the store's reserve (%s): a full disk may stop this daemon"
                    " before it can record why",
                    diskfull.reserve_path(self.home.root),
                )
            self.store.on_disk_full = self._disk_filled
            start_seq = await self.store.last_seq()
            await self._load_limits()
            self._check_capacity()
            started = await self.store.append(
                streams.DAEMON,
                None,
                [
                    DaemonStarted(
                        pid=os.getpid(),
                        hostname=socket.gethostname(),
                        max_parallel=self.max_parallel,
                        version=__version__,
                        max_usd=self.options.max_usd,
                    )
                ],
            )
            self.started_seq = started[0].seq
            if self.lease is not None:
                self._side_task(stack, self._watch_lease(), "lease watch")
            await self._wait_for_previous()
            self._side_task(stack, self._record_notices(), "notice recorder")
            self._side_task(stack, self._watch_disk(), "disk watch")
            stack.push_async_callback(self._flush_notices)
            tools = Tools(templates=self.templates, report=self._notices.put_nowait)
            executor = self._make_executor(self.home, tools)
            self.executor = await stack.enter_async_context(executor)
            await asyncio.to_thread(self.templates.clear)
            stack.push_async_callback(self._clear_templates)
            await rewrite_missing_documents(self.store, self.cells, self.executor, self.home)
            await self._start_proposer_capture(stack)
            self._side_task(stack, self._follow_control(start_seq), "control follower")
            if self.options.progress:
                await start_live_line(stack, self.store, self.clock, lambda: self.max_parallel)
            self._side_task(stack, self._reconcile(executor), "executor reconcile")
            # Registered last, so it runs first: the cells wind down before their tools go.
            stack.push_async_callback(self._drain)
            await self._schedule(executor)
        if isinstance(self.fatal, LeaseError):
            raise DaemonFatal(
                f"{self.fatal}: this daemon stopped without recording anything more; its"
                " running agents are left to the daemon that holds the lease"
            ) from self.fatal
        if isinstance(self.fatal, LogTampered):
            raise DaemonFatal(
                f"{self.fatal}; the daemon stopped, and running agents were left running"
            ) from self.fatal
        if self.fatal is not None and diskfull.is_disk_full(self.fatal):
            self._disk_filled()
            # Stopping: runs are left running for the next daemon, as on any fatal stop.
            await self._record_disk_full(str(self.fatal), end_largest=False)
        if self.fatal is not None:
            raise DaemonFatal(
                f"{self.fatal}; the daemon stopped without recording anything more. The log"
                " is intact (`arenad verify-log`); running agents were left running and the"
                " next daemon adopts them once the store can be written again"
            ) from self.fatal
        await self.store.append(
            streams.DAEMON, None, [DaemonStopped(pid=os.getpid(), reason=self.stop_reason)]
        )
        if self.side_failure is not None:
            raise DaemonFatal(f"{self.stop_reason}: {self.side_failure}") from self.side_failure
        if self.at_cap_summary is not None:
            # One paragraph on stderr, beside the log lines: what was left and why.
            sys.stderr.write(self.at_cap_summary + "\n")
            return EXIT_AT_CAP
        return 0

    def _running_runs(self) -> dict[str, ev.RunStarted]:
        return {
            cell_id: runner.writer.state.run
            for cell_id, runner in self.runners.items()
            if runner.writer.state is not None and runner.writer.state.run is not None
        }

    def _disk_filled(self) -> int:
        """The store found the disk full (its ``on_disk_full``): the reserve goes, so the
        append can be tried again and the disk watch records what happened."""
        released = diskfull.release_reserve(self.home.root)
        if released:
            self._released_bytes += released
            self._disk_full.set()
            self.wake.set()
        return released

    async def _watch_disk(self) -> None:
        """Record a full disk once the reserve has made room for it; re-create the reserve
        once there is room again (arenad.daemon.diskfull)."""
        while True:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(diskfull.RECHECK_S):
                    await self._disk_full.wait()
            if self._disk_full.is_set():
                self._disk_full.clear()
                self._runs_at_disk_full = self._running_runs()
                await self._record_disk_full("database or disk is full", end_largest=True)
            elif not diskfull.reserve_path(self.home.root).exists():
                await asyncio.to_thread(diskfull.ensure_reserve, self.home.root)

    async def _record_disk_full(self, error: str, *, end_largest: bool) -> None:
        """The disk under the store is full (the reserve is freed already): name the
        largest run dirs, end the largest one's run if it is ours (``end_largest``, and
        only if the disk really is short of room: a store can be full for other reasons),
        and record it (arenad.daemon.diskfull). Best effort: a failure to record is only
        logged."""
        released, self._released_bytes = self._released_bytes, 0
        largest = await asyncio.to_thread(diskfull.largest_run_dirs, self.home.root)
        ended = None
        runs = self._runs_at_disk_full if end_largest else {}
        if not await asyncio.to_thread(diskfull.short_of_room, self.home.root):
            runs = {}
        for entry in largest[:1]:
            started = runs.get(entry.cell_id)
            if (
                started is not None
                and started.attempt == entry.attempt
                and diskfull.end_run(started)
            ):
                ended = entry.cell_id
        log.error(
            "disk full; largest run dirs: %s%s",
            ", ".join(f"{e.cell_id} (attempt {e.attempt}): {e.bytes} bytes" for e in largest)
            or "none",
            f"; ended the run of {ended}" if ended else "",
        )
        try:
            await self.store.append(
                streams.DAEMON,
                None,
                [
                    DiskFull(
                        pid=os.getpid(),
                        error=error,
                        reserve_released_bytes=released,
                        largest=largest,
                        ended=ended,
                    )
                ],
            )
        except (StoreUnwritable, LogTampered) as exc:
            log.error("could not record the full disk: %s", exc)

    async def _clear_templates(self) -> None:
        # After the lease was lost the templates are the other daemon's, maybe in use.
        if not isinstance(self.fatal, LeaseError):
            await asyncio.to_thread(self.templates.clear)

    async def _record_notices(self) -> None:
        while True:
            notice = await self._notices.get()
            await self.store.append(streams.DAEMON, None, [notice])

    async def _flush_notices(self) -> None:
        # After the executor closed: what it reported last is recorded too.
        if self.fatal is not None:
            return
        pending = []
        while not self._notices.empty():
            pending.append(self._notices.get_nowait())
        if pending:
            await self.store.append(streams.DAEMON, None, pending)

    async def _schedule(self, executor: Executor) -> None:
        while not self.stopping.is_set():
            self.wake.clear()
            await self._check_budgets()
            await self._check_breakers()
            runnable = await self._runnable()
            for cell_id, campaign in runnable:
                if len(self.tasks) >= self.max_parallel:
                    break
                limit = self.campaign_limits.get(campaign)
                if limit is not None and self._running_in(campaign) >= limit:
                    continue
                if not self._fits(cell_id, campaign):
                    continue
                self._start(cell_id, executor)
            if self.options.until_idle and not self.tasks and not runnable:
                self.at_cap_summary = await self._at_cap_summary()
                break
            await wait_for_event(self.wake, 1.0)

    async def _at_cap_summary(self) -> str | None:
        """Why an idle daemon left cells unfinished: the campaigns held at their spend cap,
        with their cells that never started (None: no campaign is held with cells left)."""
        parts = []
        for name in sorted(self.held):
            rows = await self.cells.rows(name)
            waiting = sum(r["state"] in ("submitted", "materialized") for r in rows)
            unfinished = sum(r["state"] not in ("recovered", "failed") for r in rows)
            if not unfinished:
                continue
            spend = self.spend.campaign(name)
            cap = self._cap(name)
            cap_text = f" of its ${cap[0]:g} cap" if cap is not None else ""
            parts.append(
                f"campaign {name}: ${spend.spent_usd:.4f} spent{cap_text}; {waiting} cell(s)"
                f" never started, {unfinished} of {len(rows)} unfinished"
            )
        if not parts:
            return None
        return (
            "arenad daemon: idle at a spend cap: "
            + "; ".join(parts)
            + ". Raise the cap (`arenad set-budget`, or the daemon's --max-usd) and run the"
            " daemon again to go on."
        )

    async def _reconcile(self, executor: Executor) -> None:
        while True:
            await executor.reconcile(self._attempt_live)
            await asyncio.sleep(RECONCILE_EVERY_S)

    async def _attempt_live(self, cell_id: str, attempt: int) -> bool:
        """Whether the log holds ``attempt`` as the cell's current one, not yet over."""
        state = await self.cells.state(cell_id)
        return state is not None and not state.terminal and state.attempt == attempt

    async def _start_proposer_capture(self, stack: contextlib.AsyncExitStack) -> None:
        paths = ProposerPaths.for_home(
            self.home.root,
            worktree_root=self.options.proposer_worktree_root,
            claude_projects_dir=self.options.claude_projects_dir,
        )
        stop = asyncio.Event()
        task = asyncio.create_task(
            run_proposer_capture(self.store, paths, stop), name="proposer capture"
        )
        task.add_done_callback(self._side_task_done)

        async def teardown() -> None:
            # Its last pass records every file's final content (not after a store failure).
            stop.set()
            if self.fatal is not None:
                task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

        stack.push_async_callback(teardown)

    async def _load_limits(self) -> None:
        self.budgets = await load_budgets(self.store)
        for stream in await self.store.streams(streams.CAMPAIGN):
            for r in await self.store.read_stream(stream):
                if isinstance(r.event, CampaignSubmitted):
                    self.spend.apply(r.stream, r.event)
                    if r.event.max_parallel:
                        self.campaign_limits[r.event.name] = r.event.max_parallel
                    if r.event.breaker_after is not None:
                        self.breaker.after[r.event.name] = r.event.breaker_after
        for r in await self.store.read_stream(streams.CONTROL):
            if self.options.max_parallel is None:
                self._on_event(r)

    async def _drain(self) -> None:
        self.stopping.set()
        if not self.tasks:
            return
        # After a fatal store error nothing is aborted: an abort could not be recorded.
        abort_runs = not self.options.leave_running and self.fatal is None
        for runner in self.runners.values():
            runner.request_shutdown(abort_runs=abort_runs)
        tasks = list(self.tasks.values())
        _, pending = await asyncio.wait(tasks, timeout=self.options.drain_timeout_s)
        for task in pending:
            task.cancel()
        if pending:
            await asyncio.wait(pending, timeout=5)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def crash_reason(exc: BaseException) -> str:
    """A step's unexpected exception as a cell's reason: one line, its type, its message
    and the frame it came from (never a traceback: ``status`` shows the first line)."""
    where = ""
    frames = traceback.extract_tb(exc.__traceback__)
    if frames:
        last = frames[-1]
        where = f" (at {os.path.basename(last.filename)}:{last.lineno} in {last.name})"
    message = " ".join(str(exc).split())
    text = (
        f"the daemon's step failed: {type(exc).__name__}: {message}"
        if message
        else (f"the daemon's step failed: {type(exc).__name__}")
    )
    return (text[:1900] + where)[:2000]


@contextlib.contextmanager
def signal_handlers(daemon: Daemon) -> Iterator[None]:
    """SIGTERM and SIGINT stop the daemon (the second one forces); on the way out the
    handlers that were there before come back."""
    loop = asyncio.get_running_loop()
    sigs = (signal.SIGTERM, signal.SIGINT)
    before = {sig: signal.getsignal(sig) for sig in sigs}
    for sig in sigs:
        loop.add_signal_handler(sig, daemon.stop, signal.Signals(sig).name)
    try:
        yield
    finally:
        for sig in sigs:
            loop.remove_signal_handler(sig)
            signal.signal(sig, before[sig])


@contextlib.contextmanager
def pidfd_child_watcher() -> Iterator[None]:
    """Watch children through pidfds, not a thread per child (Python 3.11's default).

    The daemon starts a handful of short processes per cell (git, verify, the run
    wrapper); a thread per child was a large part of its CPU. Python 3.12+ does this by
    itself. On the way out the default watcher comes back (lazily), so a later event loop
    in the same process is not left with a watcher bound to this closed one.
    """
    if sys.version_info >= (3, 12) or not hasattr(os, "pidfd_open"):
        yield
        return
    watcher = asyncio.PidfdChildWatcher()
    watcher.attach_loop(asyncio.get_running_loop())
    asyncio.set_child_watcher(watcher)
    try:
        yield
    finally:
        asyncio.set_child_watcher(None)  # type: ignore[arg-type]  # None restores the default


async def run_daemon(
    home: Home,
    options: DaemonOptions,
    base_env: Mapping[str, str] | None = None,
    *,
    executor: ExecutorFactory = local_executor,
) -> int:
    faults = fault_from_env()
    limits.raise_open_files()
    capacity = await asyncio.to_thread(limits.capacity)
    with DaemonLease(home.lock_path) as lease, pidfd_child_watcher():
        async with open_store(home, faults=faults, lock_wait_s=DAEMON_LOCK_WAIT_S) as store:
            daemon = Daemon(
                store,
                home,
                options,
                base_env or dict(os.environ),
                executor=executor,
                capacity=capacity,
                lease=lease,
            )
            with signal_handlers(daemon):
                return await daemon.run()
