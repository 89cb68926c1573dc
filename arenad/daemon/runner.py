"""Drive one cell through the state machine, one step per state.

    submitted    -> materialize the workspace          -> CellMaterialized
    materialized -> launch the arm                     -> RunStarted
    running      -> follow (ingesting its files live)  -> RunCompleted | RunTimedOut | RunAborted
    ended        -> patch + verify (+ judge if scored) -> CellVerified (+ JudgeVerdictRecorded)
                    each on a fresh grading checkout of base + the patch (arenad.verdict.grade)
                    + capture the agent's store           + captures + CellRecovered
    verified     -> capture the agent's store          -> captures + CellRecovered (one transaction)

Verify and recovery share one transaction unless the arm says otherwise
(:attr:`arenad.arms.Arm.recovery_joins_verify`); a cell found verified (written apart, or by
an earlier version) is recovered on its own.

The runner decides and records; the cell's work happens at its site
(:mod:`arenad.runs.executor`): every file and process of the cell is touched there, by a
site step (:mod:`arenad.daemon.steps`, the arm's own) or by the run itself. What differs
between arms is the arm's (:mod:`arenad.arms`); the runner treats every arm alike.

Every step reads what it needs from the cell's state (a fold of its stream) and
writes its outcome as events; a step that fails for an infrastructure reason
becomes CellFailed with its stage, never a silent stop. Each step can be redone
after a crash: a step's effects are one append, and what was not appended did
not happen (a running agent is the exception, and it is adopted, not redone).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import Awaitable, Callable, Mapping, Sequence
from functools import cached_property
from pathlib import Path
from typing import Any, Literal, TypeVar

import msgspec

from arenad.arms import (
    Arm,
    ArmContext,
    Outcome,
    arm_for,
    before_start_step,
    prepare_step,
)
from arenad.arms.base import AttemptReader, stream_objects
from arenad.arms.documents import document_streams, documented_attempt
from arenad.arms.evidence import budget_stop
from arenad.cell.attempts import Attempt
from arenad.cell.kinds import kind_of_arm
from arenad.cell.machine import SHUTDOWN_REASON, CellState, CellStatus, apply
from arenad.cell.overdue import STEP_LIMITS_S
from arenad.cell.retry import RetryPolicy, policy_retry
from arenad.cell.writer import CellMovedOn, CellWriter
from arenad.clock import Clock, wait_for_event
from arenad.daemon import failures, stalls, steps
from arenad.daemon.ingest_sink import IngestSink
from arenad.errors import ConcurrencyError, LogTampered, StoreError, StoreUnwritable
from arenad.home import AttemptPaths, Home
from arenad.ingest import fold_positions
from arenad.materialize import Seal
from arenad.runs import cgroups, groups
from arenad.runs.detached import RunEnd
from arenad.runs.executor import Executor, Observation, Run, RunRecord, RunRequest, Site
from arenad.runs.files import RunFiles
from arenad.sandbox.cellenv import cell_env_for
from arenad.store.base import AppendRequest, EventStore
from arenad.store.group_commit import GroupCommit
from arenad.verdict.grade import Graded, GradeError, Grading
from arenad.verdict.judge import no_verdict
from arenad.verdict.patch import Extraction, PatchResult
from arenad.verdict.verify import VerifyResult
from events import cell as ev
from events.base import Event, Recorded
from events.capture import AgentStoreUnavailable
from events.streams import capture_stream, ingest_stream

T = TypeVar("T")

log = logging.getLogger("arenad.cell")

S = CellStatus

# Why a runner stops walking its cell: the daemon stops (the run in flight is aborted or
# left to the next daemon, nothing new starts), the operator paused the cell (the step in
# flight finishes, no next one), or its campaign is at its spend cap (held where it is).
Stopping = Literal["shutdown", "pause", "held"]


class RunnerConfig(msgspec.Struct, frozen=True, kw_only=True):
    home: Home
    base_env: Mapping[str, str]
    # Seconds of silence (no output, no ingested line) before a HangDetected event.
    hang_after_s: float | None = None
    hang_abort: bool = False
    retry: RetryPolicy = RetryPolicy()


class CellRunner:
    def __init__(
        self,
        store: EventStore,
        config: RunnerConfig,
        cell_id: str,
        clock: Clock,
        executor: Executor,
        *,
        may_start: Callable[[], bool] | None = None,
        campaign_budget: Callable[[], tuple[float, float] | None] | None = None,
        on_ingested: Callable[[str, Sequence[Event]], None] | None = None,
        group_commit: GroupCommit | None = None,
        on_appended: Callable[[str, Sequence[Event]], None] | None = None,
    ) -> None:
        self.store = store
        # Shared by every cell of the daemon: their appends (ingested batches and
        # transitions alike) that arrive together share a transaction.
        self.group_commit = group_commit
        # Asked before an attempt is materialized and before its run starts: False holds
        # the cell where it is (a campaign at its spend cap), never a failure.
        self.may_start = may_start
        # (cap, spent) of the cell's campaign, asked when its attempt starts.
        self.campaign_budget = campaign_budget
        # Sees the attempt's ingested events (recorded before this runner, then live).
        self.on_ingested = on_ingested
        # Sees each of the cell's own appends once committed (the daemon's circuit breaker).
        self.on_appended = on_appended
        self.config = config
        self.cell_id = cell_id
        self.clock = clock
        self.executor = executor
        self.abort = asyncio.Event()
        self.abort_reason = SHUTDOWN_REASON
        # Who asked for the abort (the first request's): it decides whether the run's end
        # is its result or an interruption (arenad.cell.machine.interrupt_cause).
        self.abort_cause: ev.AbortCause | None = None
        self.writer = CellWriter(
            store,
            cell_id,
            append_many=group_commit.append_many if group_commit is not None else None,
        )
        self.run_in_flight: Run | None = None
        # Why the walk stops after the step in flight (None: it goes on). Set once a
        # reason comes; a shutdown is never overwritten (see :meth:`_stop`).
        self.stopping: Stopping | None = None
        self._materialized_here = False
        self._attempt_paths: AttemptPaths | None = None
        self._wake = asyncio.Event()
        # Set by an operator's abort: a verify or judge in flight is cancelled.
        self._operator_abort = asyncio.Event()
        # Set when the daemon stops leaving runs running: the run in flight is no longer
        # followed (nothing is recorded of it; the next daemon adopts it).
        self._leave = asyncio.Event()

    def request_abort(
        self, reason: str, *, operator: bool = False, cause: ev.AbortCause | None = None
    ) -> None:
        """End the run in flight (or keep one from starting). An operator's abort also
        interrupts a verify or judge in flight; a daemon's shutdown lets those finish.
        ``cause`` (default: the operator's when ``operator``, else the agent's) says who
        ended the run; an abort that is not the agent's interrupts the attempt instead of
        ending it with a result."""
        if self.abort_cause is None:
            self.abort_cause = cause or ("operator" if operator else "agent")
        self.abort_reason = reason
        self.abort.set()
        self._wake.set()
        if operator:
            self._operator_abort.set()
        if self.run_in_flight is not None:
            self.run_in_flight.abort(reason)

    def request_shutdown(self, *, abort_runs: bool = True, force: bool = False) -> None:
        """Stop after the step in flight; ``abort_runs`` ends a running agent (else it is
        left running for the next daemon to adopt); ``force`` skips the kill grace."""
        self._stop("shutdown")
        run = self.run_in_flight
        if not abort_runs:
            self._leave.set()
        elif run is not None:
            self.request_abort(SHUTDOWN_REASON, cause="shutdown")
            if force:
                run.kill_now()

    def request_pause(self) -> None:
        self._stop("pause")

    def _stop(self, why: Stopping) -> None:
        """Stop the walk after the step in flight. A shutdown is never overwritten by a
        pause or a hold: it alone also cuts a retry's backoff short."""
        if self.stopping != "shutdown":
            self.stopping = why
        self._wake.set()

    async def drive(self) -> None:
        """Run steps until the cell is terminal, paused, or another writer moved it.

        The cell's state is read from the log once; after that each step's own append
        gives the next state (the writer folds what it wrote). What others write arrives
        as requests from the daemon's control follower (abort, pause), or as a lost race
        that makes the writer re-read.
        """
        try:
            state = await self.writer.load()
            while not (state.terminal or state.paused or self.stopping is not None):
                if state.abort_requested and not self.abort.is_set():
                    self.request_abort(state.abort_reason or "operator request", operator=True)
                await self.step(state)
                after = self.writer.state
                # A step that recorded nothing (a backoff cut short) re-reads the log.
                state = (
                    after if after is not None and after is not state else await self.writer.load()
                )
            if state.terminal:
                await self.executor.done_with(self.cell_id, state.attempt)
        except CellMovedOn as exc:
            log.info("%s: %s", self.cell_id, exc)

    async def step(self, state: CellState) -> None:
        if self.abort.is_set() and state.status in (S.SUBMITTED, S.MATERIALIZED):
            await self._append(
                [
                    ev.CellFailed(
                        attempt=state.attempt,
                        stage="abort",
                        error=f"aborted before the run started: {self.abort_reason}",
                        classification="operator",
                    )
                ]
            )
            return
        if state.status in (S.SUBMITTED, S.MATERIALIZED) and not self._may_start():
            return
        with contextlib.suppress(failures.StepFailed):
            await self._walk(state)

    async def _walk(self, state: CellState) -> None:
        """The step for the cell's state (one that fails is recorded, then StepFailed)."""
        match state.status:
            case S.SUBMITTED:
                if await self._backoff(state):
                    await self.materialize(state)
            case S.MATERIALIZED:
                if self._materialized_here:
                    await self.run(state)
                else:
                    # Materialized by a daemon that died before the run was recorded: the
                    # workspace may be half-set-up, so it is made afresh for the same
                    # attempt (no agent ran; a wrapper it may have spawned never starts
                    # one, as the log holds no RunStarted naming it).
                    await self.materialize(state)
            case S.RUNNING:
                await self.resume_running(state)
            case S.ABORTED if state.interrupted is not None:
                # Recorded before the interruption was (an older arenad): never verified.
                await self._interrupt(state, [], reader=self._ingested(state.attempt))
            case S.COMPLETED | S.TIMED_OUT | S.ABORTED:
                await self.verify(state)
            case S.VERIFIED:
                await self.recover(state)

    def _may_start(self) -> bool:
        if self.may_start is None or self.may_start():
            return True
        log.info("%s: held (its campaign is at its spend cap); it stays as it is", self.cell_id)
        self._stop("held")
        return False

    async def _backoff(self, state: CellState) -> bool:
        """Wait out a policy retry's backoff; False if the daemon stops meanwhile."""
        if state.not_before_ms is None:
            return True
        while self.stopping != "shutdown" and not self.abort.is_set():
            wait_s = (state.not_before_ms - self.clock()) / 1000
            if wait_s <= 0:
                return True
            self._wake.clear()
            await wait_for_event(self._wake, min(wait_s, 60.0))
        return False

    # -- what every step needs ---------------------------------------------------

    @cached_property
    def arm(self) -> Arm:
        """The cell's arm, resolved once (a cell's arm spec never changes)."""
        state = self.writer.state
        assert state is not None, "the cell is loaded before its first step"
        return arm_for(state.spec.arm)

    async def _site(self, state: CellState) -> Site:
        return await self.executor.site(self.cell_id, state.attempt, state.spec)

    def _paths(self, state: CellState) -> AttemptPaths:
        """Where the attempt lives, computed once per attempt (a cell's spec never changes;
        a new attempt lives elsewhere)."""
        paths = self._attempt_paths
        if paths is None or paths.attempt != state.attempt:
            paths = self._attempt_paths = self.config.home.attempt_paths(state.spec, state.attempt)
        return paths

    def _context(self, state: CellState) -> ArmContext:
        assert state.run_dir is not None and state.workspace is not None
        run_dir = Path(state.run_dir)
        budget = self.campaign_budget() if self.campaign_budget is not None else None
        return ArmContext(
            spec=state.spec,
            cell_id=self.cell_id,
            attempt=state.attempt,
            run_dir=run_dir,
            workspace=Path(state.workspace),
            env=cell_env_for(run_dir, self.config.base_env),
            home_root=str(self.config.home.root),
            campaign_cap_usd=budget[0] if budget is not None else None,
            campaign_spent_usd=budget[1] if budget is not None else 0.0,
        )

    def _guarded(
        self, state: CellState, step: failures.Step
    ) -> contextlib.AbstractAsyncContextManager[None]:
        """``step``'s exceptions that :data:`arenad.daemon.failures.FAILURES` names become
        the cell's CellFailed (then StepFailed); the others propagate to the daemon."""

        async def record(failure: failures.Failure) -> None:
            await self._fail(state, failure.stage, failure.error, retryable=failure.retryable)

        return failures.guarded(step, record)

    def _ingested(self, attempt: int, sink: IngestSink | None = None) -> _IngestedReader:
        return _IngestedReader(self.store, ingest_stream(self.cell_id, attempt), sink)

    def _read_attempt(self, state: CellState) -> AttemptReader:
        """The current attempt as the attempts fold records it, for the documents an arm
        leaves after the attempt's commit. The walk holds the machine's state, not the
        records: they are read when an arm asks (one read of the streams its documents are
        folded from, once per attempt; no other arm pays it), so the runner writes what the
        daemon's restart and ``arenad export-artifacts`` write, from the same records."""
        streams = document_streams(self.cell_id, state.attempt, kind_of_arm(state.spec.arm))

        async def read() -> Attempt:
            found = documented_attempt(await self.store.read_streams(streams), state.attempt)
            assert found is not None, "read after the attempt's commit"
            return found[1]

        return read

    # -- steps -------------------------------------------------------------------

    async def materialize(self, state: CellState) -> None:
        paths = self._paths(state)
        site = await self._site(state)
        async with (
            self._guarded(state, "materialize"),
            stalls.reported(self.cell_id, "materialize"),
        ):
            result = await site.call(
                steps.materialize_step,
                state.spec,
                str(paths.run_dir),
                dict(self.config.base_env),
                str(paths.git_root),
                str(paths.workspace),
            )
        self._materialized_here = True
        seal = result.seal
        await self._append(
            [
                ev.CellMaterialized(
                    attempt=state.attempt,
                    run_dir=str(paths.run_dir),
                    workspace=result.workspace,
                    head=result.head,
                    clean=result.clean,
                    materializer=state.spec.materializer.kind,
                    git_root=seal.root if seal is not None else None,
                    base_tree=seal.base_tree if seal is not None else None,
                    ws_identity=seal.ws_identity if seal is not None else None,
                    dotgit_identity=seal.dotgit_identity if seal is not None else None,
                )
            ]
        )

    async def run(self, state: CellState) -> None:
        """Start the agent so that it runs if and only if its RunStarted is committed.

        The run is started held (its wrapper waits); RunStarted (naming the wrapper) is
        appended; only then is the agent released. A daemon that dies in between leaves
        either no RunStarted (the wrapper exits, nothing ran) or a committed one (the
        wrapper starts the agent itself and the next daemon adopts it).
        """
        ctx = self._context(state)
        arm = self.arm
        site = await self._site(state)
        # First: an arm whose identity is unknown launches nothing (no paid run without
        # knowing what sat in its seat), and leaves no inputs behind.
        async with self._guarded(state, "before_start"), stalls.reported(self.cell_id, "spawn"):
            before_start = await site.call_blocking(before_start_step, state.spec.arm, ctx)
        async with self._guarded(state, "prepare"), stalls.reported(self.cell_id, "spawn"):
            launch = await site.call_blocking(prepare_step, state.spec.arm, ctx)
        files = RunFiles(
            run_dir=str(ctx.run_dir),
            stdout=str(ctx.run_dir / arm.stdout_name),
            stderr=str(ctx.run_dir / arm.stderr_name),
            cap_bytes=state.spec.max_output_bytes,
        )
        request = RunRequest(
            argv=launch.argv,
            cwd=launch.cwd,
            env=launch.env,
            files=files,
            timeout_s=launch.timeout_s,
            kill_grace_s=launch.kill_grace_s,
            stream=self.writer.stream,
            attempt=state.attempt,
            limits=cgroups.limits_of(state.spec.sandbox),
            disk_dir=str(ctx.run_dir) if state.spec.sandbox.disk_bytes is not None else None,
            disk_bytes=state.spec.sandbox.disk_bytes,
            network=launch.network,
            forwards=launch.forwards,
            container=launch.container,
            container_forwards=launch.container_forwards,
        )
        async with self._guarded(state, "start"), stalls.reported(self.cell_id, "spawn"):
            run = await site.start(request)
        record = run.record
        started = ev.RunStarted(
            attempt=state.attempt,
            argv=launch.argv,
            cwd=launch.cwd,
            pid=record.pid,
            pgid=record.pgid,
            process_start_ticks=record.start_ticks,
            started_at_ms=record.started_at_ms,
            deadline_ms=record.deadline_ms,
            timeout_s=launch.timeout_s,
            kill_grace_s=launch.kill_grace_s,
            exit_file=str(files.exit_file),
            stdout_path=files.stdout,
            stderr_path=files.stderr,
            output_cap_bytes=files.cap_bytes,
            executor=record.executor,
            node=record.node,
            sandbox=launch.sandbox,
            cgroup=record.cgroup,
            unlimited_reason=_unlimited_reason(request, record),
        )
        try:
            state = await self._append([*before_start, started])
        except BaseException:
            await run.cancel_unreleased()
            raise
        await run.release()
        await self._follow_run(state, ctx, site, run, new=True)

    async def resume_running(self, state: CellState) -> None:
        """A run an earlier daemon recorded: adopt it if it still runs, else record how it
        ended (its wrapper's exit record), or that it was lost with the daemon."""
        started = state.run
        assert started is not None
        ctx = self._context(state)
        site = await self._site(state)
        run = await site.attach(started, str(ctx.run_dir))
        if await run.alive():
            log.info("%s: adopting run pid %d", self.cell_id, run.record.pid)
            state = await self._append(
                [ev.RunAdopted(attempt=state.attempt, pid=run.record.pid, daemon_pid=os.getpid())]
            )
        await self._follow_run(state, ctx, site, run)

    async def _follow_run(
        self, state: CellState, ctx: ArmContext, site: Site, run: Run, *, new: bool = False
    ) -> None:
        """Ingest the run's files live until it ends, then record how it ended.

        ``new``: this daemon just recorded the run's start, so its ingest stream is known
        to be empty (nothing ingests before a RunStarted) and is not read. The closing
        batch of the ingestion is appended with the run's end, in one transaction.
        """
        self.run_in_flight = run
        if self.abort.is_set():
            run.abort(self.abort_reason)
        sink = IngestSink(
            self.store,
            ingest_stream(self.cell_id, state.attempt),
            hold_close=True,
            observer=self.on_ingested,
            group=self.group_commit,
        )
        await sink.open(new=new)
        recorded = [] if new else await self.store.read_stream(sink.stream)
        if recorded and self.on_ingested is not None:
            self.on_ingested(sink.stream, [r.event for r in recorded])
        positions = fold_positions(recorded)
        observation: Observation | None = None
        if not positions.closed:
            sources = self.arm.watch_sources(ctx)
            observation = await run.observe(sources, positions, sink.append)
        hangs = (
            asyncio.create_task(self._watch_for_hangs(state.attempt, run, sink))
            if self.config.hang_after_s
            else None
        )
        ingest_failure: BaseException | None = None
        try:
            end, ingest_failure = await self._wait_run(state, run, sink, observation)
        except BaseException:
            if observation is not None:
                await observation.abort()
            raise
        finally:
            self.run_in_flight = None
            if hangs is not None:
                hangs.cancel()
                await asyncio.gather(hangs, return_exceptions=True)
        if end is None:
            # Left running: like a crash for this run, minus the crash. What was ingested
            # is committed; the next daemon resumes from the logged offsets.
            if observation is not None:
                await observation.abort()
            if sink.fatal is not None:
                raise sink.fatal
            log.info("%s: left running (pid %d) for the next daemon", self.cell_id, run.record.pid)
            return
        if observation is not None and ingest_failure is None:
            await observation.close()
        elif observation is not None:
            await observation.abort()
        await self._record_end(state, ctx, site, end, sink)
        if ingest_failure is not None and self.writer.state is not None:
            await self._fail(
                self.writer.state,
                "ingest",
                f"ingestion stopped while the run ran: {ingest_failure!r}",
                retryable=True,
            )

    async def _wait_run(
        self, state: CellState, run: Run, sink: IngestSink, observation: Observation | None
    ) -> tuple[RunEnd | None, BaseException | None]:
        """The run's end, and the ingestion's failure if it stopped first.

        None for the end: the daemon stops leaving runs running, or the store failed under
        the run's ingestion (nothing more can be recorded). Ingestion that stopped can
        never catch up with the run (its peer, the watcher, is gone): rather than wait out
        the run unobserved (hours, maybe), the run is aborted and the cell fails with that
        reason. An unwritable store is fatal for the daemon instead, and is raised.
        """
        if self._leave.is_set() or sink.fatal is not None:
            return None, None
        record = run.record
        limit_s = (
            max(0.0, (record.deadline_ms - self.clock()) / 1000)
            + (state.run.kill_grace_s if state.run is not None else 0.0)
            + STEP_LIMITS_S["run"]
        )
        async with stalls.reported(self.cell_id, "run", limit_s):
            ended = asyncio.ensure_future(run.wait())
            others: list[asyncio.Future[Any]] = [
                asyncio.ensure_future(self._leave.wait()),
                asyncio.ensure_future(sink.fatal_seen.wait()),
            ]
            failing = asyncio.ensure_future(observation.failed()) if observation else None
            if failing is not None:
                others.append(failing)
            try:
                await asyncio.wait({ended, *others}, return_when=asyncio.FIRST_COMPLETED)
            except BaseException:
                ended.cancel()
                raise
            finally:
                for task in others:
                    task.cancel()
                await asyncio.gather(*others, return_exceptions=True)
            if ended.done():
                return ended.result(), None
            if failing is not None and failing.done() and not failing.cancelled():
                failure = failing.result()
                if not isinstance(failure, StoreUnwritable | LogTampered):
                    log.error("%s: ingestion stopped, aborting the run: %r", self.cell_id, failure)
                    run.abort(f"ingestion stopped: {failure}")
                    return await ended, failure
                if sink.fatal is None:
                    ended.cancel()
                    await asyncio.gather(ended, return_exceptions=True)
                    raise failure
            # Left running, or the store failed: this run is no longer followed.
            ended.cancel()
            await asyncio.gather(ended, return_exceptions=True)
            return None, None

    async def _record_end(
        self, state: CellState, ctx: ArmContext, site: Site, end: RunEnd, sink: IngestSink
    ) -> None:
        started_at = state.run.started_at_ms if state.run is not None else end.ended_at_ms
        wall_s = max(0.0, (end.ended_at_ms - started_at) / 1000)
        attempt = state.attempt
        outcome: Event
        match end.how:
            case "exited" | "lost" if end.limit is not None:
                # The cell's own limit ended it (the cgroup's counters, or the wrapper's
                # disk check): the agent's failure, named, with its real exit status.
                outcome = ev.RunAborted(
                    attempt=attempt,
                    rc=end.code,
                    wall_s=wall_s,
                    reason=cgroups.LIMIT_REASONS.get(end.limit, f"{end.limit} limit"),
                    limit=end.limit,
                    # The agent's own doing, never an interruption, whatever its exit.
                    cause="agent",
                )
            case "exited":
                assert end.code is not None
                outcome = ev.RunCompleted(attempt=attempt, rc=end.code, wall_s=wall_s)
            case "timed_out":
                outcome = ev.RunTimedOut(attempt=attempt, rc=groups.TIMEOUT_CODE, wall_s=wall_s)
            case "aborted":
                # Without an abort request, the runner's own (its ingestion stopped): the
                # cell then fails at ingest, as before causes were recorded.
                outcome = ev.RunAborted(
                    attempt=attempt,
                    rc=groups.ABORT_CODE,
                    wall_s=wall_s,
                    reason=end.reason or self.abort_reason,
                    cause=self.abort_cause if self.abort.is_set() else None,
                )
            case "lost":
                # The executor says what is known (how the wrapper died, or that no daemon
                # watched it end): "lost with the daemon" only when that is what happened.
                outcome = ev.RunAborted(
                    attempt=attempt,
                    rc=None,
                    reason=end.reason or "lost with the daemon",
                    cause="infrastructure",
                )
            case "not_started":
                # The wrapper ran but the agent never did (its binary could not start):
                # nothing was spent, so this is an infrastructure failure before the run.
                await self._fail(
                    state,
                    "launch",
                    end.reason or "the agent did not start",
                    retryable=True,
                    also=sink.take_held(),
                )
                return
        events: list[Event] = [outcome, *_output_capped(state.run, end, attempt)]
        reader = self._ingested(attempt, sink)
        events += await self.arm.end_events(site, ctx, reader)
        if apply(state, outcome, self.clock()).interrupted is not None:
            await self._interrupt(state, events, reader=reader, also=sink.take_held())
            return
        failed = end.how == "timed_out" or (end.how == "exited" and end.code != 0)
        infra = await self.arm.infra_cause(site, ctx, reader) if failed else None
        if infra is not None:
            # The provider failed the run before any model step: not the agent's loss. The
            # run's end and the failure are one transaction, with the policy's new attempt.
            await self._fail(
                state, "run", infra.cause, retryable=True, also=sink.take_held(), before=events
            )
            return
        await self._append_with(events, sink.take_held())

    async def _append_with(self, events: Sequence[Event], also: Sequence[AppendRequest]) -> None:
        """Append to the cell with ``also`` in the same transaction; if the cell moved on
        meanwhile, ``also`` (facts about what was ingested) is still recorded on its own."""
        try:
            await self._append(events, also=also)
        except CellMovedOn:
            if also:
                await self.store.append_many(list(also))
            raise

    async def _watch_for_hangs(self, attempt: int, run: Run, sink: IngestSink) -> None:
        """Record a HangDetected when the run makes no output and no ingested line for
        ``hang_after_s`` (once per silence), and abort it when configured to."""
        after_s = self.config.hang_after_s
        assert after_s is not None
        last_mark: tuple[int, ...] | None = None
        last_change_ms = self.clock()
        reported = False
        while True:
            await asyncio.sleep(min(after_s / 4, 5.0))
            mark = (sink.appended, *await run.activity())
            now = self.clock()
            if mark != last_mark:
                last_mark, last_change_ms, reported = mark, now, False
                continue
            silent_s = (now - last_change_ms) / 1000
            if silent_s < after_s or reported:
                continue
            reported = True
            action: Literal["none", "abort"] = "abort" if self.config.hang_abort else "none"
            log.warning("%s: no output for %.0f s (%s)", self.cell_id, silent_s, action)
            try:
                await self._append(
                    [ev.HangDetected(attempt=attempt, silent_s=round(silent_s, 3), action=action)]
                )
            except CellMovedOn:
                return
            if action == "abort":
                self.request_abort(f"hang: no output for {silent_s:.0f} s")

    async def verify(self, state: CellState) -> None:
        """The ended run's steps, in order: patch, verify, judge (a scored run's), then the
        recovery when the arm joins it. What they find is one append: a crash before it
        redoes them together, so an attempt is never left verified but unjudged."""
        # An abort that came before this step was the run's (it ended the run); only one
        # that comes while verify or the judge runs stops them.
        self._operator_abort.clear()
        ctx = self._context(state)
        site = await self._site(state)
        outcome = await self._outcome(state)
        extraction = await self._patch(state, ctx, site)
        grading = self._grading(state, ctx, extraction)
        graded = await self._verify(state, ctx, site, grading)
        verified = self._verified(state, ctx, outcome, extraction, graded)
        events: list[Event] = [verified]
        if verified.scored:
            events += await self._judge(state, ctx, site, grading)
        events += _captured(state.attempt, extraction.patch, graded.verify if graded else None)
        if not self.arm.recovery_joins_verify:
            await self._append(events)
            return
        await self._recovery(state, ctx, site, events)

    async def _outcome(self, state: CellState) -> Outcome:
        """Whether the run counts, as its arm reads its end (before patch and verify)."""
        outcome = self.arm.outcome(state)
        if state.spec.gateway.kind == "gateway":
            # A run stopped at a spend cap is the campaign's budget, not the agent's exit:
            # its own outcome, from the gateway's record of the refused call.
            ingested = await self._ingested(state.attempt)()
            stopped = budget_stop(stream_objects(ingested, "gateway"))
            if stopped is not None:
                return Outcome(scored=False, not_scored_reason=stopped)
        return outcome

    async def _patch(self, state: CellState, ctx: ArmContext, site: Site) -> Extraction:
        """The agent's changes against base, stored at the attempt's patch path."""
        spec = state.spec
        async with self._guarded(state, "patch"), stalls.reported(self.cell_id, "patch"):
            return await site.call(
                steps.patch_step,
                str(ctx.workspace),
                spec.instance.base_commit,
                list(spec.excludes),
                str(self._paths(state).patch_path),
                recorded_seal(state),
            )

    def _grading(self, state: CellState, ctx: ArmContext, extraction: Extraction) -> Grading:
        """Where verify and the judge run: a fresh checkout of base + the stored patch
        (never the agent's ws), unless the campaign chose its workspace."""
        patched = extraction.patch is not None
        return Grading(
            verify_in=state.spec.verify_in,
            run_dir=str(ctx.run_dir),
            workspace=str(ctx.workspace),
            env=ctx.env,
            sandbox=ctx.sandbox,
            seal=recorded_seal(state),
            patch_path=str(self._paths(state).patch_path) if patched else None,
            base_env=dict(self.config.base_env),
        )

    async def _verify(
        self, state: CellState, ctx: ArmContext, site: Site, grading: Grading
    ) -> Graded | None:
        """The verify command's verdict; None when an operator's abort stopped it. It runs
        even when the result does not count: its log is evidence too."""
        spec = state.spec
        verify_limit = spec.verify_timeout_s + STEP_LIMITS_S["verify"]
        async with (
            self._guarded(state, "verify"),
            stalls.reported(self.cell_id, "verify", verify_limit),
        ):
            return await self._unless_aborted(
                site.call(
                    steps.verify_step,
                    spec.instance.verify_cmd,
                    grading,
                    str(_verify_log(ctx)),
                    spec.verify_timeout_s,
                )
            )

    def _verified(
        self,
        state: CellState,
        ctx: ArmContext,
        outcome: Outcome,
        extraction: Extraction,
        graded: Graded | None,
    ) -> ev.CellVerified:
        """What patch and verify found. A tampered workspace is evidence, not a failure
        (what the agent did is the attempt's result), and an aborted verify never passes:
        neither counts."""
        patch = extraction.patch
        if extraction.tampered:
            outcome = Outcome(
                scored=False,
                not_scored_reason="workspace tampered: " + "; ".join(extraction.tampered),
            )
        verdict = graded.verify if graded is not None else None
        # An aborted verify's rc is the abort's; a patch that did not apply ran none.
        verify_rc = verdict.rc if verdict is not None else None
        if graded is None:
            verify_rc = groups.ABORT_CODE
            outcome = Outcome(
                scored=False, not_scored_reason=f"verify aborted: {self.abort_reason}"
            )
        place = graded.place if graded is not None else None
        return ev.CellVerified(
            attempt=state.attempt,
            scored=outcome.scored,
            not_scored_reason=outcome.not_scored_reason,
            patch_path=str(self._paths(state).patch_path) if patch is not None else None,
            patch_lines=patch.lines if patch is not None else None,
            patch_sha256=patch.sha256 if patch is not None else None,
            verify_rc=verify_rc,
            verify_pass=verdict.passed if verdict is not None else False,
            verify_log=str(_verify_log(ctx)),
            verify_limit=verdict.limit if verdict is not None else None,
            tampered=extraction.tampered,
            nested_repos=patch.nested_repos if patch is not None else None,
            verify_in=state.spec.verify_in,
            patch_applied=place.applied if place is not None else None,
            patch_apply_note=place.note if place is not None else None,
            patch_left_out=place.left_out if place is not None else None,
            tampered_paths=patch.tampered_paths if patch is not None else None,
        )

    async def _judge(
        self, state: CellState, ctx: ArmContext, site: Site, grading: Grading
    ) -> list[Event]:
        """The judge's verdict on a scored run (none without a judge). Only a run that counts
        is judged (the reference's arm throws before, otherwise): a verdict on an unscored
        run is no reward, its cost and time spent for nothing."""
        spec = state.spec
        if spec.judge is None:
            return []
        judge_limit = spec.judge.timeout_s + STEP_LIMITS_S["judge"]
        try:
            async with stalls.reported(self.cell_id, "judge", judge_limit):
                judged = await self._unless_aborted(
                    site.call(
                        steps.judge_step,
                        spec.judge,
                        state.attempt,
                        grading,
                        str(ctx.run_dir),
                        # What a container judge grades (kind = "swebench").
                        spec.instance,
                        spec.arm.name,
                    )
                )
        except GradeError as exc:
            return [no_verdict(spec.judge, state.attempt, f"no grading checkout: {exc}")]
        if judged is None:
            return [no_verdict(spec.judge, state.attempt, f"judge aborted: {self.abort_reason}")]
        return [judged]

    async def _recovery(
        self, state: CellState, ctx: ArmContext, site: Site, events: Sequence[Event]
    ) -> None:
        """The agent's store captured and CellRecovered, appended after ``events`` in one
        transaction. A capture that fails, or that the store refuses, still records
        ``events`` and the figures it has."""
        reader = self._ingested(state.attempt)
        captures, recovered = await self._recovered(site, ctx, state, reader)
        state = await self._append_recovered(events, captures, recovered)
        await self.arm.after_recovered(site, ctx, self._read_attempt(state))

    async def _append(
        self, events: Sequence[Event], also: Sequence[AppendRequest] = ()
    ) -> CellState:
        async with stalls.reported(self.cell_id, "append"):
            state = await self.writer.append(events, also=also)
        if self.on_appended is not None:
            self.on_appended(self.cell_id, events)
        return state

    async def _unless_aborted(self, step: Awaitable[T]) -> T | None:
        """The step's result, or None when an operator's abort came first (the step is
        cancelled, which ends what it started; after an abort it is not started)."""
        if self._operator_abort.is_set():
            # A coroutine never awaited must still be closed (else a warning).
            if asyncio.iscoroutine(step):
                step.close()
            return None
        task = asyncio.ensure_future(step)
        aborted = asyncio.ensure_future(self._operator_abort.wait())
        try:
            await asyncio.wait({task, aborted}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            aborted.cancel()
            if not task.done():
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        return None if task.cancelled() else task.result()

    async def recover(self, state: CellState) -> None:
        """A cell verified apart (or by an earlier version): its recovery on its own."""
        await self._recovery(state, self._context(state), await self._site(state), [])

    async def _recovered(
        self, site: Site, ctx: ArmContext, state: CellState, reader: _IngestedReader
    ) -> tuple[list[AppendRequest], ev.CellRecovered]:
        """The arm's captures and CellRecovered; a capture that raises is a recorded gap
        (one line; its traceback goes to the daemon's log), never the cell's failure."""
        try:
            async with stalls.reported(self.cell_id, "capture"):
                return await self.arm.recover(site, ctx, state, reader)
        except (StoreUnwritable, LogTampered, CellMovedOn):
            raise
        except Exception as exc:
            log.exception("%s: capturing the agent's store failed", self.cell_id)
            gap = f"the capture failed: {type(exc).__name__}: {exc}"[:2000]
            return [], ev.CellRecovered(
                attempt=state.attempt, store_available=False, gap=gap, spend=ev.SpendFigures()
            )

    async def _append_recovered(
        self,
        events: Sequence[Event],
        captures: Sequence[AppendRequest],
        recovered: ev.CellRecovered,
    ) -> CellState:
        """``events`` and ``recovered`` with the captures; when the store refuses the
        captures (an event past SQLite's size limit), without them, the refusal recorded
        on the capture stream and in the CellRecovered's gap."""
        try:
            return await self._append([*events, recovered], also=captures)
        except (StoreUnwritable, LogTampered, ConcurrencyError):
            raise
        except StoreError as exc:
            if not captures:
                raise
            log.error("%s: the store refused the captures: %s", self.cell_id, exc)
            why = f"the captures could not be recorded: {exc}"[:2000]
            unavailable = AgentStoreUnavailable(
                attempt=recovered.attempt, store_path=recovered.store_path or "", error=why
            )
            stream = capture_stream(self.cell_id, recovered.attempt)
            kept = msgspec.structs.replace(recovered, gap=why)
            return await self._append(
                [*events, kept], also=[AppendRequest(stream, 0, [unavailable])]
            )

    async def _interrupt(
        self,
        state: CellState,
        before: Sequence[Event],
        *,
        reader: _IngestedReader,
        also: Sequence[AppendRequest] = (),
    ) -> None:
        """Record that the attempt's run was interrupted (after ``before``, the run's end):
        a failure that is not the agent's, never verified nor scored (no patch, no verify on
        a workspace whose agent may still run), with what comes next in the same
        transaction. Its spend is captured first (the arm's store, as any run's: the money
        was spent; a capture that fails is a gap). The daemon's shutdown requeues the cell
        as a new attempt (the next daemon runs it); an infrastructure loss is retried under
        the infra retry policy; an operator's abort stays as it is until `arenad retry`."""
        now = self.clock()
        for event in before:
            state = apply(state, event, now)
        site: Site | None = None
        # A lost run's site is gone, or its agent may still run there: nothing of it is
        # touched (its spend is a gap); the others' agents are known dead.
        reachable = state.interrupted != "infrastructure"
        if (
            reachable
            and state.run is not None
            and state.run_dir is not None
            and state.workspace is not None
        ):
            site = await self._site(state)
            captures, recovered = await self._recovered(site, self._context(state), state, reader)
            before = [*before, recovered]
            also = [*also, *captures]
            state = apply(state, recovered, now)
        cause = state.interrupted
        assert cause is not None
        reason = next((e.reason for e in before if isinstance(e, ev.RunAborted)), None)
        by = _INTERRUPTED_BY.get(cause, cause)
        error = f"run interrupted by {by}" + (f": {reason}" if reason else "")
        log.warning("%s: %s", self.cell_id, error)
        failure = ev.CellFailed(
            attempt=state.attempt,
            stage="interrupted",
            error=error[-4000:],
            classification="infrastructure" if cause == "infrastructure" else "operator",
            retryable=cause != "operator",
        )
        failed = apply(state, failure, now)
        retry: ev.CellRetried | None = None
        if cause == "shutdown":
            retry = ev.CellRetried(
                attempt=state.attempt + 1,
                reason="interrupted by the daemon's shutdown: requeued as a new attempt",
                requested_by="resume",
            )
        elif cause == "infrastructure":
            retry = policy_retry(failed, failure, self.config.retry, now)
        events = [*before, failure] if retry is None else [*before, failure, retry]
        await self._append_with(events, also)
        if site is not None:
            # What the arm leaves beside a recovered run (result.json), for this attempt.
            await self.arm.after_recovered(site, self._context(state), self._read_attempt(state))
        await self.executor.done_with(self.cell_id, state.attempt)

    async def _fail(
        self,
        state: CellState,
        stage: str,
        error: str,
        *,
        retryable: bool,
        also: Sequence[AppendRequest] = (),
        before: Sequence[Event] = (),
    ) -> None:
        """Record an infrastructure failure (after ``before``, e.g. the run's end), and the
        policy's new attempt in the same transaction when it asks for one (so a crash
        cannot separate them)."""
        if error.startswith(f"{stage}: "):
            log.warning("%s: %s", self.cell_id, error)
        else:
            log.warning("%s: %s failed: %s", self.cell_id, stage, error)
        failure = ev.CellFailed(
            attempt=state.attempt,
            stage=stage,
            error=error[-4000:],
            classification="infrastructure",
            retryable=retryable,
        )
        now = self.clock()
        for event in before:
            state = apply(state, event, now)
        retry = policy_retry(apply(state, failure, now), failure, self.config.retry, now)
        events = [*before, failure] if retry is None else [*before, failure, retry]
        await self._append_with(events, also)
        await self.executor.done_with(self.cell_id, state.attempt)


_INTERRUPTED_BY = {
    "shutdown": "the daemon's shutdown",
    "operator": "the operator",
    "infrastructure": "the infrastructure",
}


class _IngestedReader:
    """An attempt's ingested events, read once on first use: what was committed, and the
    closing batch still held for the run's end transaction."""

    def __init__(self, store: EventStore, stream: str, sink: IngestSink | None) -> None:
        self.store = store
        self.stream = stream
        self.sink = sink
        self._events: list[Recorded | Event] | None = None

    async def __call__(self) -> list[Recorded | Event]:
        if self._events is None:
            held = self.sink.held_events if self.sink is not None else []
            self._events = [*await self.store.read_stream(self.stream), *held]
        return self._events


def recorded_seal(state: CellState) -> Seal | None:
    """The workspace's seal as its CellMaterialized recorded it (None: made before seals)."""
    m = state.materialized
    if m is None or m.git_root is None or m.base_tree is None:
        return None
    return Seal(
        root=m.git_root,
        workspace=m.workspace,
        base=state.spec.instance.base_commit,
        base_tree=m.base_tree,
        ws_identity=m.ws_identity,
        dotgit_identity=m.dotgit_identity,
    )


def _verify_log(ctx: ArmContext) -> Path:
    return ctx.run_dir / "verify.log"


def _captured(attempt: int, patch: PatchResult | None, verdict: VerifyResult | None) -> list[Event]:
    """What verify saw, bounded, for the log: it outlives the run dir (an aborted verify
    left no result to capture)."""
    out: list[Event] = []
    if patch is not None and patch.excerpt is not None:
        out.append(
            ev.PatchCaptured(
                attempt=attempt,
                patch=patch.excerpt,
                files=patch.files,
                files_omitted=patch.files_omitted,
            )
        )
    if verdict is not None and verdict.log_excerpt is not None:
        out.append(ev.VerifyLogCaptured(attempt=attempt, log=verdict.log_excerpt))
    return out


def _unlimited_reason(request: RunRequest, record: RunRecord) -> str | None:
    """Why a run that asked for limits has none (never silently unlimited)."""
    if request.limits is None or record.cgroup is not None:
        return None
    if request.container is not None:
        # A container's limits are docker's own (`docker run --memory --pids-limit --cpus`,
        # arenad.sandbox.container), on this machine or a Ray node alike.
        return None
    return record.unlimited_reason or f"the {record.executor} executor applies no limits"


def _output_capped(
    started: ev.RunStarted | None, end: RunEnd, attempt: int
) -> list[ev.RunOutputCapped]:
    """A RunOutputCapped for each of the run's output files that the wrapper's cap cut."""
    if started is None or started.output_cap_bytes is None:
        return []
    return [
        ev.RunOutputCapped(
            attempt=attempt,
            path=path,
            cap_bytes=started.output_cap_bytes,
            cause=cause,
            kept_bytes=end.kept.get(path),
        )
        for path, cause in end.capped
    ]
