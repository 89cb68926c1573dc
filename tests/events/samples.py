"""One realistic sample of every event type, and the cell specs they carry.

Shared by the events, store, cell, read-model and CLI tests. ``sample(kind, attempt=)``
builds a fresh instance; ``SAMPLE_TYPES`` must cover ``events.codec.EVENT_TYPES``
(tests/events/test_codec.py checks it), so a new event type needs a sample here.
"""

from __future__ import annotations

from collections.abc import Callable

import msgspec

from events import capture, cell, control, ingest
from events.base import Event
from events.specs import CellSpec, InstanceSpec, MaterializerSpec, SoloArm, SupervisorArm


def make_spec(
    campaign: str = "demo",
    instance_id: str = "bug-1",
    arm: str = "SOLO",
    rep: int = 0,
    *,
    supervisor: bool = False,
) -> CellSpec:
    instance = InstanceSpec(
        instance_id=instance_id,
        repo="example/widgets",
        base_commit="0123456789abcdef0123456789abcdef01234567",
        problem_statement="The widget frobnicates twice when the lever is pulled once.",
        verify_cmd="python -m pytest -q tests/test_widget.py",
        extra={"FAIL_TO_PASS": ["tests/test_widget.py::test_once"], "version": "1.2"},
    )
    arm_spec: SoloArm | SupervisorArm
    if supervisor:
        arm_spec = SupervisorArm(
            name=arm,
            worker_model="local/worker",
            driver_model="local/driver",
            loops_repo="/opt/loops",
            extension_path="/opt/loops/ext.ts",
            shim_path="/opt/loops/shim.sh",
            driver_cmd=["node", "{loops_repo}/driver.js", "--ws", "{ws}"],
            env_knobs={"LOOPS_BRAIN_RETRIES": "3"},
        )
    else:
        arm_spec = SoloArm(name=arm, model="local/scripted", timeout_s=120.0)
    return CellSpec(
        campaign=campaign,
        instance=instance,
        arm=arm_spec,
        rep=rep,
        materializer=MaterializerSpec(kind="git", source="/srv/repos/widgets"),
    )


def _cell_id() -> str:
    return make_spec().cell_id


_FACTORIES: dict[type[Event], Callable[[int], Event]] = {
    cell.CellSubmitted: lambda a: cell.CellSubmitted(
        spec=make_spec(), attempt=a, spec_sha256="ab" * 32
    ),
    cell.CellMaterialized: lambda a: cell.CellMaterialized(
        attempt=a,
        run_dir=f"/h/campaigns/demo/rep-0/attempt-{a}/runs/bug-1/SOLO",
        workspace=f"/h/campaigns/demo/rep-0/attempt-{a}/runs/bug-1/SOLO/ws",
        head="0123456789abcdef0123456789abcdef01234567",
        clean=True,
        materializer="git",
    ),
    cell.RunStarted: lambda a: cell.RunStarted(
        attempt=a,
        argv=["opencode", "run", "fix it", "-m", "local/scripted", "--format", "json"],
        cwd="/h/ws",
        pid=4242,
        pgid=4242,
        process_start_ticks=123456,
        started_at_ms=1_700_000_000_000,
        deadline_ms=1_700_000_120_000,
        timeout_s=120.0,
        kill_grace_s=1.0,
        exit_file="/h/run/exit",
        stdout_path="/h/run/stdout",
        stderr_path="/h/run/stderr",
    ),
    cell.RunAdopted: lambda a: cell.RunAdopted(attempt=a, pid=4242, daemon_pid=99),
    cell.RunCompleted: lambda a: cell.RunCompleted(attempt=a, rc=0, wall_s=12.5),
    cell.RunTimedOut: lambda a: cell.RunTimedOut(attempt=a, wall_s=120.0),
    cell.RunAborted: lambda a: cell.RunAborted(attempt=a, wall_s=3.25, reason="operator request"),
    cell.CellVerified: lambda a: cell.CellVerified(
        attempt=a,
        scored=True,
        patch_path="/h/patches/bug-1.solo.patch",
        patch_lines=14,
        patch_sha256="cd" * 32,
        verify_rc=0,
        verify_pass=True,
        verify_log="1 passed",
    ),
    cell.CellReverified: lambda a: cell.CellReverified(
        attempt=a,
        scored=True,
        patch_path="/h/patches/bug-1.solo.patch",
        patch_lines=14,
        patch_sha256="cd" * 32,
        verify_rc=1,
        verify_pass=False,
        verify_log="/h/run/verify.reverify-1.log",
        verify_in="checkout",
        patch_applied=True,
        verify_cmd="pytest -q",
        reason="verify script fixed",
        previous_seq=7,
        previous_pass=True,
        previous_rc=0,
    ),
    cell.CellRecovered: lambda a: cell.CellRecovered(
        attempt=a,
        store_path="/h/run/opencode.db",
        store_available=True,
        spend=cell.SpendFigures(sessions=1, tokens_in=1200, tokens_out=340, cost_usd=0.0125),
        usage=cell.SoloUsage(
            steps=3,
            tokens_in=1200,
            tokens_out=340,
            reasoning=20,
            cache_w=0,
            cache_r=600,
            max_ctx=1800,
            oc_cost=0.0125,
            total_io=1540,
        ),
    ),
    cell.CellFailed: lambda a: cell.CellFailed(
        attempt=a,
        stage="materialize",
        error="git clone failed: no such repo",
        classification="infrastructure",
    ),
    cell.CellRetried: lambda a: cell.CellRetried(attempt=a, reason="infrastructure failure"),
    cell.ProvenanceRecorded: lambda a: cell.ProvenanceRecorded(
        attempt=a, repo="/opt/loops", commit="f" * 40, env_knobs={"WORKER_BACKEND": "cli"}
    ),
    cell.SupervisorOutcome: lambda a: cell.SupervisorOutcome(
        attempt=a,
        sup_run_dir="/h/run/sup",
        status="done",
        verdict="delivered",
        delivered=True,
        spent_tokens=50_000,
        spent_usd=1.5,
    ),
    cell.AbortRequested: lambda a: cell.AbortRequested(reason="operator request"),
    cell.CellPaused: lambda a: cell.CellPaused(),
    cell.CellResumed: lambda a: cell.CellResumed(),
    cell.HangDetected: lambda a: cell.HangDetected(attempt=a, silent_s=300.0),
    cell.RunOutputCapped: lambda a: cell.RunOutputCapped(
        attempt=a, path="/runs/oc.jsonl", cap_bytes=64 << 20
    ),
    cell.JudgeVerdictRecorded: lambda a: cell.JudgeVerdictRecorded(
        attempt=a,
        judge="swe-arena-official-judge",
        verdict_json='{"resolved": true}',
        resolved=True,
        score=1.0,
    ),
    cell.PatchCaptured: lambda a: cell.PatchCaptured(
        attempt=a,
        patch=cell.TextExcerpt(
            text="diff --git a/add.py b/add.py\n-    return a - b\n+    return a + b\n",
            kept_bytes=66,
            size=66,
            sha256="cd" * 32,
        ),
    ),
    cell.VerifyLogCaptured: lambda a: cell.VerifyLogCaptured(
        attempt=a,
        log=cell.TextExcerpt(
            text="1 passed in 0.01s\n", kept_bytes=18, size=4114, sha256="ef" * 32, cut="tail"
        ),
    ),
    ingest.LineIngested: lambda a: ingest.LineIngested(
        source="stdout",
        path="stdout.jsonl",
        offset=0,
        length=42,
        raw='{"type":"step_start","part":{"id":"p1"}}',
        kind="step_start",
        observed_at_ms=1_700_000_000_500,
    ),
    ingest.LineOversized: lambda a: ingest.LineOversized(
        source="stdout",
        path="stdout.jsonl",
        offset=42,
        length=52_428_800,
        sha256="a" * 64,
        head="AAAA",
        encoding="base64",
        limit_bytes=1 << 20,
        observed_at_ms=1_700_000_000_500,
    ),
    ingest.LineMalformed: lambda a: ingest.LineMalformed(
        source="stdout", path="stdout.jsonl", offset=42, length=5, raw="{oops", error="bad JSON"
    ),
    ingest.FileTruncated: lambda a: ingest.FileTruncated(
        source="supervisor", path="journal.jsonl", previous_offset=900, new_size=10, reason="shrunk"
    ),
    ingest.FileSnapshotted: lambda a: ingest.FileSnapshotted(
        source="supervisor",
        path="state.json",
        content='{"status":"running"}',
        sha256="ef" * 32,
        size=20,
    ),
    ingest.FileRefused: lambda a: ingest.FileRefused(
        source="supervisor",
        path="workers/w1.ndjson",
        reason="leads outside /h/run/ws (a symbolic link?): not read",
    ),
    ingest.IngestionClosed: lambda a: ingest.IngestionClosed(files={"stdout.jsonl": 47}),
    ingest.InotifyEventsLost: lambda a: ingest.InotifyEventsLost(watchers=12),
    ingest.InotifyWatchFailed: lambda a: ingest.InotifyWatchFailed(
        path="/h/run", error="RuntimeError: notify bug"
    ),
    capture.AgentSessionCaptured: lambda a: capture.AgentSessionCaptured(
        attempt=a,
        purpose="solo",
        store_path="/h/run/opencode.db",
        session_id="ses_1",
        parent_id=None,
        directory="/h/ws",
        row={"id": "ses_1", "title": "fix", "time_created": 1},
        messages=[capture.MessageRow(id="msg_1", time_created=2, data='{"role":"user"}')],
        parts=[capture.PartRow(id="prt_1", message_id="msg_1", data='{"type":"text"}')],
        transcript=capture.SessionTranscript(
            rules=1, messages=msgspec.Raw(b'[{"role":"user","content":""}]')
        ),
    ),
    capture.AgentStoreUnavailable: lambda a: capture.AgentStoreUnavailable(
        attempt=a, store_path="/h/run/opencode.db", error="no such file"
    ),
    capture.WorkerCwdUnmatched: lambda a: capture.WorkerCwdUnmatched(attempt=a, cwd="/h/sup/w1"),
    capture.ProposerShotCaptured: lambda a: capture.ProposerShotCaptured(
        path="/h/proposer-shots/g1-c0-s0.json",
        author="proposer",
        generation=1,
        candidate_index=0,
        shot=0,
        content='{"ok":true}',
    ),
    capture.ClaudeTranscriptCaptured: lambda a: capture.ClaudeTranscriptCaptured(
        cwd="/h/wt",
        path="/h/.claude/projects/x.jsonl",
        session_id="s1",
        content='{"type":"user"}\n',
    ),
    control.CampaignSubmitted: lambda a: control.CampaignSubmitted(
        name="demo",
        source_path="/h/demo.toml",
        spec_sha256="12" * 32,
        cell_ids=[_cell_id()],
        max_parallel=2,
        budget_usd=50.0,
        selection=control.InstanceSelection(instance_filter="^demo", rows=3, selected=1),
        arm_kinds={"SOLO": "solo"},
    ),
    control.BudgetSet: lambda a: control.BudgetSet(max_usd=75.0),
    control.BreakerTripped: lambda a: control.BreakerTripped(
        cause="clone-fail",
        failures=5,
        last_error="clone-fail: no such repository",
        cells=["c:i:A:0"],
        paused=15,
    ),
    control.BudgetReached: lambda a: control.BudgetReached(
        max_usd=50.0, spent_usd=50.25, unknown_attempts=1, running=2
    ),
    control.DaemonStarted: lambda a: control.DaemonStarted(
        pid=99, hostname="box", max_parallel=2, version="0.1.0"
    ),
    control.DaemonStopped: lambda a: control.DaemonStopped(pid=99, reason="SIGTERM"),
    control.MaxParallelChanged: lambda a: control.MaxParallelChanged(max_parallel=4),
    control.DiskFull: lambda a: control.DiskFull(
        pid=99,
        error="database or disk is full",
        reserve_released_bytes=64 << 20,
        largest=[control.RunDirSize(cell_id="c:i:A:0", attempt=a, bytes=9 << 30)],
        ended="c:i:A:0",
    ),
}

SAMPLE_TYPES: tuple[type[Event], ...] = tuple(_FACTORIES)


def sample(kind: type[Event], attempt: int = 1) -> Event:
    return _FACTORIES[kind](attempt)
