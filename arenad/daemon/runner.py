"""Drive one cell through the state machine, one step per state.

    submitted    -> materialize the workspace          -> CellMaterialized
    materialized -> launch the arm                     -> RunStarted
    running      -> follow (ingesting its files live)  -> RunCompleted | RunTimedOut | RunAborted
    ended        -> patch + verify (+ judge)           -> CellVerified (+ JudgeVerdictRecorded)
                    + capture the agent's store           + captures + CellRecovered
    verified     -> capture the agent's store          -> captures + CellRecovered (one transaction)

Verify and recovery share one transaction, except for the supervisor arm (its recovery
writes result.json after the append); a cell found verified (written apart, or by an
earlier version) is recovered on its own.

Every step reads what it needs from the cell's state (a fold of its stream) and
writes its outcome as events; a step that fails for an infrastructure reason
becomes CellFailed with its stage, never a silent stop. Each step can be redone
after a crash: a step's effects are one append, and what was not appended did
not happen (a running agent is the exception, and it is adopted, not redone).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Literal

import msgspec
from watchdog.observers.api import BaseObserver

from arenad.arms import supervisor_figures as figures
from arenad.arms.base import ArmContext, arm_for
from arenad.arms.supervisor import SupervisorArmRunner
from arenad.cell.machine import CellState, CellStatus, apply
from arenad.cell.retry import RetryPolicy, policy_retry
from arenad.cell.writer import CellMovedOn, CellWriter
from arenad.clock import Clock, wait_for_event
from arenad.daemon.ingest_sink import IngestSink, usage_from_stream
from arenad.daemon.recover import recover_events, recover_supervisor_events, result_json
from arenad.home import Home
from arenad.ingest import RunDirWatcher, fold_positions, supervisor_source
from arenad.materialize import MaterializeError, WorkspaceTemplates, materialize
from arenad.runs import groups
from arenad.runs.detached import (
    DetachedRun,
    RunEnd,
    RunFiles,
    WrapperLauncher,
    capped_marker,
    capped_outputs,
    spawn_detached,
)
from arenad.sandbox.cellenv import cell_env_for, cell_paths, prepare_cell_env
from arenad.store.base import AppendRequest
from arenad.store.sqlite import SqliteEventStore
from arenad.verdict.judge import run_judge
from arenad.verdict.patch import extract_patch
from arenad.verdict.verify import run_verify
from events import cell as ev
from events.base import Event
from events.specs import SupervisorArm
from events.streams import ingest_stream

log = logging.getLogger("arenad.cell")

S = CellStatus


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
        store: SqliteEventStore,
        config: RunnerConfig,
        cell_id: str,
        clock: Clock,
        observer: BaseObserver | None = None,
        templates: WorkspaceTemplates | None = None,
        *,
        launcher: WrapperLauncher,
    ) -> None:
        self.store = store
        self.config = config
        self.cell_id = cell_id
        self.clock = clock
        # The daemon's watchdog observer, shared by every run it follows.
        self.observer = observer
        # The daemon's prepared checkouts for git workspaces (None: a fresh clone each).
        self.templates = templates
        # The daemon's wrapper launcher: every run's wrapper is forked by it.
        self.launcher = launcher
        self.abort = asyncio.Event()
        self.abort_reason = "daemon shutting down"
        self.writer = CellWriter(store, cell_id)
        self.run_in_flight: DetachedRun | None = None
        # Set when the daemon stops: the run in flight is aborted, nothing new starts.
        self.shutdown = False
        # Set when the operator paused the cell: the step in flight finishes, no next one.
        self.pause_requested = False
        self._materialized_here = False
        self._wake = asyncio.Event()

    def request_abort(self, reason: str) -> None:
        self.abort_reason = reason
        self.abort.set()
        self._wake.set()
        if self.run_in_flight is not None:
            self.run_in_flight.abort(reason)

    def request_shutdown(self, *, abort_runs: bool = True, force: bool = False) -> None:
        """Stop after the step in flight; ``abort_runs`` ends a running agent (else it is
        left running for the next daemon to adopt); ``force`` skips the kill grace."""
        self.shutdown = True
        self._wake.set()
        run = self.run_in_flight
        if run is not None and abort_runs:
            self.request_abort("daemon shutting down")
            if force:
                run.kill_now()

    def request_pause(self) -> None:
        self.pause_requested = True
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
            while not (state.terminal or state.paused or self.shutdown or self.pause_requested):
                if state.abort_requested and not self.abort.is_set():
                    self.request_abort(state.abort_reason or "operator request")
                await self.step(state)
                after = self.writer.state
                # A step that recorded nothing (a backoff cut short) re-reads the log.
                state = (
                    after if after is not None and after is not state else await self.writer.load()
                )
        except CellMovedOn as exc:
            log.info("%s: %s", self.cell_id, exc)

    async def step(self, state: CellState) -> None:
        if self.abort.is_set() and state.status in (S.SUBMITTED, S.MATERIALIZED):
            await self.writer.append(
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
            case S.COMPLETED | S.TIMED_OUT | S.ABORTED:
                await self.verify(state)
            case S.VERIFIED:
                await self.recover(state)

    async def _backoff(self, state: CellState) -> bool:
        """Wait out a policy retry's backoff; False if the daemon stops meanwhile."""
        if state.not_before_ms is None:
            return True
        while not self.shutdown and not self.abort.is_set():
            wait_s = (state.not_before_ms - self.clock()) / 1000
            if wait_s <= 0:
                return True
            self._wake.clear()
            await wait_for_event(self._wake, min(wait_s, 60.0))
        return False

    # -- steps -------------------------------------------------------------------

    def _run_dir(self, state: CellState) -> Path:
        spec = state.spec
        return self.config.home.run_dir(
            spec.campaign, spec.rep, state.attempt, spec.instance.instance_id, spec.arm.name
        )

    async def materialize(self, state: CellState) -> None:
        run_dir = self._run_dir(state)
        ws = run_dir / "ws"
        try:
            # No run of this attempt was recorded, so anything here is debris of a daemon
            # that died before starting one: start clean.
            await asyncio.to_thread(_fresh_run_dir, run_dir, dict(self.config.base_env))
            result = await materialize(state.spec, ws, templates=self.templates)
        except MaterializeError as exc:
            await self._fail(state, exc.stage, str(exc), retryable=exc.stage != "config")
            return
        except OSError as exc:
            await self._fail(state, "materialize", f"{type(exc).__name__}: {exc}", retryable=True)
            return
        self._materialized_here = True
        await self.writer.append(
            [
                ev.CellMaterialized(
                    attempt=state.attempt,
                    run_dir=str(run_dir),
                    workspace=str(ws),
                    head=result.head,
                    clean=result.clean,
                    materializer=state.spec.materializer.kind,
                )
            ]
        )

    def _context(self, state: CellState) -> ArmContext:
        assert state.run_dir is not None and state.workspace is not None
        run_dir = Path(state.run_dir)
        env = cell_env_for(run_dir, self.config.base_env)
        return ArmContext(
            spec=state.spec,
            cell_id=self.cell_id,
            attempt=state.attempt,
            run_dir=run_dir,
            workspace=Path(state.workspace),
            env=env,
        )

    async def run(self, state: CellState) -> None:
        """Start the agent so that it runs if and only if its RunStarted is committed.

        The wrapper is spawned first, holding the agent back; RunStarted (with the
        wrapper's pid) is appended; only then is the agent released. A daemon that dies
        in between leaves either no RunStarted (the wrapper exits, nothing ran) or a
        committed one (the wrapper starts the agent itself and the next daemon adopts it).
        """
        ctx = self._context(state)
        arm = arm_for(state.spec.arm)
        try:
            launch = await asyncio.to_thread(arm.prepare, ctx)
        except OSError as exc:
            await self._fail(state, "launch", f"{type(exc).__name__}: {exc}", retryable=True)
            return
        before_start: list[Event] = []
        if isinstance(arm, SupervisorArmRunner):
            before_start.append(await asyncio.to_thread(arm.provenance, ctx))
        files = RunFiles(
            run_dir=str(ctx.run_dir),
            stdout=str(ctx.run_dir / arm.stdout_name),
            stderr=str(ctx.run_dir / arm.stderr_name),
            cap_bytes=state.spec.max_output_bytes,
        )
        try:
            run = await spawn_detached(
                launch.argv,
                cwd=launch.cwd,
                env=launch.env,
                files=files,
                store_path=self.store.path,
                stream=self.writer.stream,
                attempt=state.attempt,
                timeout_s=launch.timeout_s,
                kill_grace_s=launch.kill_grace_s,
                clock=self.clock,
                launcher=self.launcher,
            )
        except groups.SpawnError as exc:
            await self._fail(state, "launch", str(exc), retryable=True)
            return
        started = ev.RunStarted(
            attempt=state.attempt,
            argv=launch.argv,
            cwd=launch.cwd,
            pid=run.pid,
            pgid=run.pgid,
            process_start_ticks=run.start_ticks,
            started_at_ms=run.started_at_ms,
            deadline_ms=run.deadline_ms,
            timeout_s=launch.timeout_s,
            kill_grace_s=launch.kill_grace_s,
            exit_file=str(files.exit_file),
            stdout_path=files.stdout,
            stderr_path=files.stderr,
            output_cap_bytes=files.cap_bytes,
        )
        try:
            state = await self.writer.append([*before_start, started])
        except BaseException:
            await run.cancel_unreleased()
            raise
        run.release()
        await self._follow_run(state, ctx, run, new=True)

    async def resume_running(self, state: CellState) -> None:
        """A run an earlier daemon recorded: adopt it if it still runs, else record how it
        ended (its wrapper's exit record), or that it was lost with the daemon."""
        started = state.run
        assert started is not None
        ctx = self._context(state)
        if started.exit_file is None:
            # Recorded before runs had a wrapper: nothing can say how it ended.
            if groups.process_identity_matches(started.pid, started.process_start_ticks or -1):
                await groups.kill_group(started.pgid, started.kill_grace_s)
            await self._record_end(
                state, ctx, RunEnd(how="lost", code=None, ended_at_ms=self.clock())
            )
            return
        run = DetachedRun.adopt(
            pid=started.pid,
            start_ticks=started.process_start_ticks,
            files=RunFiles(
                run_dir=str(ctx.run_dir),
                stdout=started.stdout_path or "",
                stderr=started.stderr_path or "",
                cap_bytes=started.output_cap_bytes,
            ),
            started_at_ms=started.started_at_ms,
            deadline_ms=started.deadline_ms,
            kill_grace_s=started.kill_grace_s,
        )
        if run.alive:
            log.info("%s: adopting run pid %d", self.cell_id, run.pid)
            state = await self.writer.append(
                [ev.RunAdopted(attempt=state.attempt, pid=run.pid, daemon_pid=os.getpid())]
            )
        await self._follow_run(state, ctx, run)

    async def _follow_run(
        self, state: CellState, ctx: ArmContext, run: DetachedRun, *, new: bool = False
    ) -> None:
        """Ingest the run's files live until it ends, then record how it ended.

        ``new``: this daemon just recorded the run's start, so its ingest stream is known
        to be empty (nothing ingests before a RunStarted) and is not read. The watcher's
        closing batch is appended with the run's end, in one transaction; a supervisor's
        outcome is read from that stream, so its closing batch goes first, on its own.
        """
        self.run_in_flight = run
        if self.abort.is_set():
            run.abort(self.abort_reason)
        sink = IngestSink(
            self.store,
            ingest_stream(self.cell_id, state.attempt),
            hold_close=not isinstance(state.spec.arm, SupervisorArm),
        )
        await sink.open(new=new)
        watcher = await self._start_watcher(ctx, sink, new=new)
        hangs = (
            asyncio.create_task(self._watch_for_hangs(state.attempt, run, sink))
            if self.config.hang_after_s
            else None
        )
        try:
            end = await run.wait(self.clock)
        except BaseException:
            if watcher is not None:
                await watcher.abort()
            raise
        finally:
            self.run_in_flight = None
            if hangs is not None:
                hangs.cancel()
                await asyncio.gather(hangs, return_exceptions=True)
        if watcher is not None:
            await watcher.close()
        await self._record_end(state, ctx, end, also=sink.take_held())

    async def _record_end(
        self,
        state: CellState,
        ctx: ArmContext,
        end: RunEnd,
        also: Sequence[AppendRequest] = (),
    ) -> None:
        started_at = state.run.started_at_ms if state.run is not None else end.ended_at_ms
        wall_s = max(0.0, (end.ended_at_ms - started_at) / 1000)
        attempt = state.attempt
        outcome: Event
        match end.how:
            case "exited":
                assert end.code is not None
                outcome = ev.RunCompleted(attempt=attempt, rc=end.code, wall_s=wall_s)
            case "timed_out":
                outcome = ev.RunTimedOut(attempt=attempt, rc=groups.TIMEOUT_CODE, wall_s=wall_s)
            case "aborted":
                outcome = ev.RunAborted(
                    attempt=attempt,
                    rc=groups.ABORT_CODE,
                    wall_s=wall_s,
                    reason=end.reason or self.abort_reason,
                )
            case "lost":
                outcome = ev.RunAborted(attempt=attempt, rc=None, reason="lost with the daemon")
            case "not_started":
                # The wrapper ran but the agent never did (its binary could not start):
                # nothing was spent, so this is an infrastructure failure before the run.
                await self._fail(
                    state,
                    "launch",
                    end.reason or "the agent did not start",
                    retryable=True,
                    also=also,
                )
                return
        events: list[Event] = [outcome, *_output_capped(state.run, attempt)]
        if isinstance(state.spec.arm, SupervisorArm):
            events.append(await self._supervisor_outcome(attempt, ctx))
        await self._append_with(events, also)

    async def _append_with(self, events: Sequence[Event], also: Sequence[AppendRequest]) -> None:
        """Append to the cell with ``also`` in the same transaction; if the cell moved on
        meanwhile, ``also`` (facts about what was ingested) is still recorded on its own."""
        try:
            await self.writer.append(events, also=also)
        except CellMovedOn:
            if also:
                await self.store.append_many(list(also))
            raise

    async def _start_watcher(
        self, ctx: ArmContext, sink: IngestSink, *, new: bool = False
    ) -> RunDirWatcher | None:
        """Watch what the arm writes while it runs, resuming at the recorded offsets."""
        recorded = [] if new else await self.store.read_stream(sink.stream)
        positions = fold_positions(recorded)
        if positions.closed:
            return None
        sources = arm_for(ctx.spec.arm).watch_sources(ctx)
        watcher = RunDirWatcher(sources, sink.append, positions=positions, observer=self.observer)
        await watcher.start()
        return watcher

    async def _watch_for_hangs(self, attempt: int, run: DetachedRun, sink: IngestSink) -> None:
        """Record a HangDetected when the run makes no output and no ingested line for
        ``hang_after_s`` (once per silence), and abort it when configured to."""
        after_s = self.config.hang_after_s
        assert after_s is not None
        files = [Path(run.files.stdout), Path(run.files.stderr)]
        # Output dropped past the cap still counts as output: the wrapper moves the
        # marker's mtime while it drops.
        markers = [Path(capped_marker(str(f))) for f in files]
        last_mark: tuple[int, ...] | None = None
        last_change_ms = self.clock()
        reported = False
        while True:
            await asyncio.sleep(min(after_s / 4, 5.0))
            mark = (sink.appended, *(_size(f) for f in files), *(_mtime_ns(m) for m in markers))
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
                await self.writer.append(
                    [ev.HangDetected(attempt=attempt, silent_s=round(silent_s, 3), action=action)]
                )
            except CellMovedOn:
                return
            if action == "abort":
                self.request_abort(f"hang: no output for {silent_s:.0f} s")

    async def _supervisor_outcome(self, attempt: int, ctx: ArmContext) -> ev.SupervisorOutcome:
        recorded = await self.store.read_stream(ingest_stream(self.cell_id, attempt))
        summary = figures.summarize(recorded)
        sup_dir = supervisor_source(ctx.workspace).resolve()
        return ev.SupervisorOutcome(
            attempt=attempt,
            sup_run_dir=str(sup_dir) if sup_dir is not None else None,
            status=summary.status,
            verdict=summary.verdict,
            delivered=summary.delivered,
            spent_tokens=summary.spent_tokens,
            spent_usd=summary.spent_usd,
        )

    async def verify(self, state: CellState) -> None:
        ctx = self._context(state)
        spec = state.spec
        arm = arm_for(spec.arm)
        if isinstance(arm, SupervisorArmRunner):
            recorded = await self.store.read_stream(ingest_stream(self.cell_id, state.attempt))
            sup_status = figures.state_status(recorded)
            outcome = arm.outcome(str(state.status), state.run_rc, ctx, sup_status)
        else:
            outcome = arm.outcome(str(state.status), state.run_rc, ctx)
        patch_path = self.config.home.patch_path(
            spec.campaign, spec.rep, state.attempt, spec.instance.instance_id, spec.arm.name
        )
        try:
            patch = await extract_patch(
                ctx.workspace, spec.instance.base_commit, spec.excludes, patch_path
            )
        except Exception as exc:
            await self._fail(state, "patch", f"{type(exc).__name__}: {exc}", retryable=False)
            return
        verify_log = ctx.run_dir / "verify.log"
        # Verify runs even when the result does not count: its log is evidence too.
        verdict = await run_verify(
            spec.instance.verify_cmd,
            ctx.workspace,
            verify_log,
            env=ctx.env,
            timeout_s=spec.verify_timeout_s,
        )
        events: list[Event] = [
            ev.CellVerified(
                attempt=state.attempt,
                scored=outcome.scored,
                not_scored_reason=outcome.not_scored_reason,
                patch_path=str(patch_path),
                patch_lines=patch.lines,
                patch_sha256=patch.sha256,
                verify_rc=verdict.rc,
                verify_pass=verdict.passed,
                verify_log=str(verify_log),
            )
        ]
        if spec.judge is not None:
            # In the same append: a crash re-runs verify and the judge together, so an
            # attempt is never left verified but unjudged.
            events.append(
                await run_judge(
                    spec.judge,
                    attempt=state.attempt,
                    workspace=ctx.workspace,
                    run_dir=ctx.run_dir,
                    env=ctx.env,
                )
            )
        if isinstance(spec.arm, SupervisorArm):
            await self.writer.append(events)
            return
        # Recovery reads only the agent's store and the ingest stream, so it goes into the
        # verdict's transaction: one append and one scheduling round less per cell. A
        # crash before it redoes both steps; recovery failing records the verdict first.
        try:
            captures, recovered = await self._recover_parts(state, ctx)
        except Exception:
            await self.writer.append(events)
            raise
        await self.writer.append([*events, recovered], also=captures)

    async def recover(self, state: CellState) -> None:
        ctx = self._context(state)
        if isinstance(state.spec.arm, SupervisorArm):
            await self._recover_supervisor(state, ctx)
            return
        captures, recovered = await self._recover_parts(state, ctx)
        await self.writer.append([recovered], also=captures)

    async def _recover_parts(
        self, state: CellState, ctx: ArmContext
    ) -> tuple[list[AppendRequest], ev.CellRecovered]:
        """The captures of the agent's own store and the CellRecovered that sums them."""
        usage = None
        if state.run is None or state.run.stdout_path not in state.capped_outputs:
            # Sums over a stream the cap cut would pass for a whole run's: unknown instead.
            usage = await usage_from_stream(self.store, ingest_stream(self.cell_id, state.attempt))
        db_path = Path(cell_paths(ctx.run_dir).opencode_db)
        return await asyncio.to_thread(recover_events, db_path, self.cell_id, state, usage)

    async def _recover_supervisor(self, state: CellState, ctx: ArmContext) -> None:
        recorded = await self.store.read_stream(ingest_stream(self.cell_id, state.attempt))
        db_path = Path(cell_paths(ctx.run_dir).opencode_db)
        events, recovered = await asyncio.to_thread(
            recover_supervisor_events, db_path, self.cell_id, state, recorded
        )
        await self.writer.append([recovered], also=events)
        doc = result_json(state, recorded, recovered)
        await asyncio.to_thread(
            (ctx.run_dir / "result.json").write_text, json.dumps(doc, indent=1) + "\n"
        )

    async def _fail(
        self,
        state: CellState,
        stage: str,
        error: str,
        *,
        retryable: bool,
        also: Sequence[AppendRequest] = (),
    ) -> None:
        """Record an infrastructure failure, and the policy's new attempt in the same
        transaction when it asks for one (so a crash cannot separate the two)."""
        log.warning("%s: %s failed: %s", self.cell_id, stage, error)
        failure = ev.CellFailed(
            attempt=state.attempt,
            stage=stage,
            error=error[-4000:],
            classification="infrastructure",
            retryable=retryable,
        )
        retry = policy_retry(
            apply(state, failure, self.clock()), failure, self.config.retry, self.clock()
        )
        await self._append_with([failure] if retry is None else [failure, retry], also)


def _output_capped(started: ev.RunStarted | None, attempt: int) -> list[ev.RunOutputCapped]:
    """A RunOutputCapped for each of the run's output files that the wrapper's cap cut."""
    if started is None or started.output_cap_bytes is None:
        return []
    paths = [p for p in (started.stdout_path, started.stderr_path) if p]
    return [
        ev.RunOutputCapped(
            attempt=attempt, path=path, cap_bytes=started.output_cap_bytes, cause=cause
        )
        for path, cause in capped_outputs(paths)
    ]


def _fresh_run_dir(run_dir: Path, base_env: dict[str, str]) -> None:
    """An empty run dir with the cell's private environment in it (one thread hop)."""
    if run_dir.exists():
        shutil.rmtree(run_dir)
    run_dir.mkdir(parents=True)
    prepare_cell_env(run_dir, base_env)


def _mtime_ns(path: Path) -> int:
    try:
        return path.stat().st_mtime_ns
    except OSError:
        return -1


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return -1
