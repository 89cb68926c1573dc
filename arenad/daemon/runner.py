"""Drive one cell through the state machine, one step per state.

    submitted    -> materialize the workspace          -> CellMaterialized
    materialized -> launch the arm                     -> RunStarted
    running      -> wait (ingesting its output)        -> RunCompleted | RunTimedOut | RunAborted
    ended        -> patch + verify (+ judge)           -> CellVerified (+ JudgeVerdictRecorded)
    verified     -> capture the agent's store          -> captures + CellRecovered (one transaction)

Every step reads what it needs from the cell's state (a fold of its stream) and
writes its outcome as events; a step that fails for an infrastructure reason
becomes CellFailed with its stage, never a silent stop.
"""

from __future__ import annotations

import asyncio
import json
import logging
import shutil
from collections.abc import Mapping
from pathlib import Path

import msgspec

from arenad import proc
from arenad.arms import supervisor_figures as figures
from arenad.arms.base import ArmContext, arm_for
from arenad.arms.supervisor import SupervisorArmRunner
from arenad.cell.machine import CellState, CellStatus
from arenad.cellenv import cell_env_for, cell_paths, prepare_cell_env
from arenad.clock import Clock
from arenad.daemon.cell_writer import CellMovedOn, CellWriter
from arenad.daemon.ingest_sink import IngestSink, ingest_stream, usage_from_stream
from arenad.daemon.recover import recover_events, recover_supervisor_events, result_json
from arenad.home import Home
from arenad.ingest import RunDirWatcher, file_source, fold_positions, supervisor_source
from arenad.ingest.stream import StreamIngester
from arenad.materialize import MaterializeError, materialize
from arenad.patch import extract_patch
from arenad.proc import RunHandle
from arenad.store.sqlite import SqliteEventStore
from arenad.verify import run_verify
from events import cell as ev
from events.base import Event
from events.specs import SupervisorArm

log = logging.getLogger("arenad.cell")

S = CellStatus


class RunnerConfig(msgspec.Struct, frozen=True, kw_only=True):
    home: Home
    base_env: Mapping[str, str]
    # Seconds of silence (no output, no ingested line) before a HangDetected event.
    hang_after_s: float | None = None
    hang_abort: bool = False


class CellRunner:
    def __init__(
        self,
        store: SqliteEventStore,
        config: RunnerConfig,
        cell_id: str,
        clock: Clock,
        abort: asyncio.Event,
    ) -> None:
        self.store = store
        self.config = config
        self.cell_id = cell_id
        self.clock = clock
        self.abort = abort
        self.abort_reason = "daemon shutting down"
        self.writer = CellWriter(store, cell_id)
        self.handle: RunHandle | None = None
        # Set when the daemon stops: the run in flight is aborted, nothing new starts.
        self.shutdown = False
        self._materialized_here = False

    def request_abort(self, reason: str) -> None:
        self.abort_reason = reason
        self.abort.set()
        if self.handle is not None:
            self.handle.abort(reason)

    def request_shutdown(self) -> None:
        self.shutdown = True
        if self.handle is not None:
            self.request_abort("daemon shutting down")

    async def drive(self) -> None:
        """Run steps until the cell is terminal, paused, or another writer moved it."""
        try:
            while True:
                state = await self.writer.load()
                if state.terminal or state.paused or self.shutdown:
                    return
                if state.abort_requested and not self.abort.is_set():
                    self.request_abort(state.abort_reason or "operator request")
                await self.step(state)
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
                await self.materialize(state)
            case S.MATERIALIZED:
                if self._materialized_here:
                    await self.run(state)
                else:
                    # Materialized by an earlier daemon that died before the run started:
                    # the workspace may be half-set-up, so start a fresh attempt.
                    await self.writer.append(
                        [
                            ev.CellRetried(
                                attempt=state.attempt + 1,
                                reason=(
                                    "daemon restarted after materializing; workspace not trusted"
                                ),
                                requested_by="resume",
                            )
                        ]
                    )
            case S.RUNNING:
                await self.resume_running(state)
            case S.COMPLETED | S.TIMED_OUT | S.ABORTED:
                await self.verify(state)
            case S.VERIFIED:
                await self.recover(state)

    # -- steps -------------------------------------------------------------------

    def _run_dir(self, state: CellState) -> Path:
        spec = state.spec
        return self.config.home.run_dir(
            spec.campaign, spec.rep, state.attempt, spec.instance.instance_id, spec.arm.name
        )

    async def materialize(self, state: CellState) -> None:
        run_dir = self._run_dir(state)
        ws = run_dir / "ws"
        # Nothing of this attempt was recorded yet, so anything here is debris of a
        # daemon that died mid-materialization: start clean.
        if run_dir.exists():
            shutil.rmtree(run_dir)
        run_dir.mkdir(parents=True)
        try:
            await asyncio.to_thread(prepare_cell_env, run_dir, dict(self.config.base_env))
            result = await materialize(state.spec, ws)
        except MaterializeError as exc:
            await self._fail(state, exc.stage, str(exc), retryable=True)
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
        ctx = self._context(state)
        arm = arm_for(state.spec.arm)
        launch = await asyncio.to_thread(arm.prepare, ctx)
        sink = IngestSink(self.store, ingest_stream(self.cell_id, state.attempt))
        await sink.open()
        ingester = StreamIngester(sink.append, source="stdout", path=launch.stdout_name)
        before_start: list[Event] = []
        watcher: RunDirWatcher | None = None
        if isinstance(arm, SupervisorArmRunner):
            before_start.append(await asyncio.to_thread(arm.provenance, ctx))
            watcher = await self._start_watcher(ctx, sink)
        try:
            handle = await proc.start(
                launch.argv,
                cwd=launch.cwd,
                env=launch.env,
                timeout_s=launch.timeout_s,
                kill_grace_s=launch.kill_grace_s,
                on_stdout_line=ingester.on_line if launch.ingest_stdout else None,
                stdout_path=ctx.run_dir / launch.stdout_name,
                stderr_path=ctx.run_dir / launch.stderr_name,
                abort_event=self.abort,
                clock=self.clock,
            )
        except proc.SpawnError as exc:
            if watcher is not None:
                await watcher.close()
            await self._fail(state, "launch", str(exc), retryable=True)
            return
        self.handle = handle
        if self.abort.is_set():
            handle.abort(self.abort_reason)
        try:
            await self.writer.append(
                [
                    *before_start,
                    ev.RunStarted(
                        attempt=state.attempt,
                        argv=launch.argv,
                        cwd=launch.cwd,
                        pid=handle.pid,
                        pgid=handle.pgid,
                        process_start_ticks=handle.start_ticks,
                        started_at_ms=handle.started_at_ms,
                        deadline_ms=handle.started_at_ms + round(launch.timeout_s * 1000),
                        timeout_s=launch.timeout_s,
                        kill_grace_s=launch.kill_grace_s,
                        stdout_path=str(ctx.run_dir / launch.stdout_name),
                        stderr_path=str(ctx.run_dir / launch.stderr_name),
                    ),
                ]
            )
        except BaseException:
            handle.abort("the run could not be recorded")
            await handle.wait()
            if watcher is not None:
                await watcher.abort()
            raise
        result = await handle.wait()
        await ingester.close()
        after: list[Event] = []
        if watcher is not None:
            await watcher.close()
            after.append(await self._supervisor_outcome(state.attempt, ctx))
        self.handle = None
        if result.timed_out:
            event: Event = ev.RunTimedOut(
                attempt=state.attempt, rc=result.code, wall_s=result.wall_s
            )
        elif result.aborted:
            event = ev.RunAborted(
                attempt=state.attempt,
                rc=result.code,
                wall_s=result.wall_s,
                reason=result.abort_reason or self.abort_reason,
            )
        else:
            event = ev.RunCompleted(attempt=state.attempt, rc=result.code, wall_s=result.wall_s)
        # Separate appends: the outcome is only allowed once the run has ended.
        await self.writer.append([event])
        if after:
            await self.writer.append(after)

    async def _start_watcher(self, ctx: ArmContext, sink: IngestSink) -> RunDirWatcher | None:
        """Watch the supervisor run dir and brain.jsonl, resuming at the recorded offsets."""
        recorded = await self.store.read_stream(sink.stream)
        positions = fold_positions(recorded)
        if positions.closed:
            return None
        watcher = RunDirWatcher(
            [
                supervisor_source(ctx.workspace),
                file_source("brain", ctx.run_dir / "brain.jsonl"),
            ],
            sink.append,
            positions=positions,
        )
        await watcher.start()
        return watcher

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

    async def resume_running(self, state: CellState) -> None:
        """A run recorded by an earlier daemon: it died with it, so record that it was lost."""
        run = state.run
        assert run is not None
        if proc.process_identity_matches(run.pid, run.process_start_ticks or -1):
            await proc.kill_group(run.pgid, run.kill_grace_s)
            reason = "lost with the daemon; its process group was killed on restart"
        else:
            reason = "lost with the daemon"
        after: list[Event] = []
        if isinstance(state.spec.arm, SupervisorArm):
            # Drain what the lost run wrote, from the recorded offsets: exactly once.
            ctx = self._context(state)
            sink = IngestSink(self.store, ingest_stream(self.cell_id, state.attempt))
            await sink.open()
            watcher = await self._start_watcher(ctx, sink)
            if watcher is not None:
                await watcher.close()
            after.append(await self._supervisor_outcome(state.attempt, ctx))
        await self.writer.append([ev.RunAborted(attempt=state.attempt, rc=None, reason=reason)])
        if after:
            await self.writer.append(after)

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
        await self.writer.append(
            [
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
        )

    async def recover(self, state: CellState) -> None:
        ctx = self._context(state)
        if isinstance(state.spec.arm, SupervisorArm):
            await self._recover_supervisor(state, ctx)
            return
        usage = await usage_from_stream(self.store, ingest_stream(self.cell_id, state.attempt))
        db_path = Path(cell_paths(ctx.run_dir).opencode_db)
        events, recovered = await asyncio.to_thread(
            recover_events, db_path, self.cell_id, state, usage
        )
        await self.writer.append([recovered], also=events)

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

    async def _fail(self, state: CellState, stage: str, error: str, *, retryable: bool) -> None:
        log.warning("%s: %s failed: %s", self.cell_id, stage, error)
        await self.writer.append(
            [
                ev.CellFailed(
                    attempt=state.attempt,
                    stage=stage,
                    error=error[-4000:],
                    classification="infrastructure",
                    retryable=retryable,
                )
            ]
        )
