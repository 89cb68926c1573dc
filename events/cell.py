"""Cell lifecycle events: the transitions of the cell state machine and the facts
recorded beside them. Each lives on the cell's own stream (``cell/<cell_id>``)."""

from __future__ import annotations

from typing import Literal

import msgspec

from events.base import Event
from events.ingest import Encoding
from events.specs import CellSpec

Classification = Literal["infrastructure", "agent", "operator"]
# Who ended an aborted run: the agent's own doing (a hang the daemon cut short), the
# operator (an abort, a spend cap's abort), the daemon's own shutdown (SIGINT/SIGTERM), or
# the infrastructure (its wrapper or node lost). Only "agent" is the attempt's result; the
# others interrupt it (arenad.cell.machine.interrupt_cause).
AbortCause = Literal["agent", "operator", "shutdown", "infrastructure"]


class CellSubmitted(Event, tag="cell.submitted", frozen=True, kw_only=True):
    spec: CellSpec
    attempt: int = 1
    spec_sha256: str = ""


class CellMaterialized(Event, tag="cell.materialized", frozen=True, kw_only=True):
    attempt: int
    run_dir: str
    workspace: str
    head: str
    clean: bool
    materializer: str
    detail: str = ""
    # The workspace's seal (arenad.materialize.seal), all None for a workspace made before
    # seals existed: the daemon-owned git root (outside the run dir), the base commit's
    # tree, and the (device:inode:generation) of ws and ws/.git as the daemon made them.
    git_root: str | None = None
    base_tree: str | None = None
    ws_identity: str | None = None
    dotgit_identity: str | None = None


class SandboxView(msgspec.Struct, frozen=True, kw_only=True):
    """What a run could see (the audit trail of its confinement): the sandbox's kind and
    version, and every path shown inside, read-only and read-write. Everything else on the
    machine was hidden. ``kind`` "none": no sandbox (the daemon user's whole view)."""

    kind: str
    version: str | None = None
    read_only: list[str] = []
    read_write: list[str] = []
    # The run's network ("model", "none", "host"; None: recorded before networks were
    # cut) and, with "model", the endpoints forwarded into it ("127.0.0.1:8765 ->
    # 127.0.0.1:8765").
    network: str | None = None
    endpoints: list[str] = []
    # kind "docker": the container's name (a restarted daemon and the reaper find it by
    # it) and its image.
    container: str | None = None
    image: str | None = None


class RunStarted(Event, tag="run.started", frozen=True, kw_only=True):
    attempt: int
    argv: list[str]
    cwd: str
    pid: int
    pgid: int
    # /proc/<pid>/stat start time (clock ticks since boot): with pid it names the
    # process unambiguously, so a restarted daemon never adopts a recycled pid.
    process_start_ticks: int | None = None
    started_at_ms: int
    deadline_ms: int
    timeout_s: float
    kill_grace_s: float
    # Where the run wrapper writes the child's exit status (survives the daemon).
    exit_file: str | None = None
    stdout_path: str | None = None
    stderr_path: str | None = None
    # Bytes kept of each of stdout and stderr; the wrapper drops the rest. None: no cap (or
    # a run recorded before runs were capped).
    output_cap_bytes: int | None = None
    # Which executor started it ("local", "ray") and where it runs (None: this machine).
    executor: str = "local"
    node: str | None = None
    # The run's view of the machine (None: recorded before runs were sandboxed).
    sandbox: SandboxView | None = None
    # The run's cgroup (arenad.runs.cgroups; its name under the home's parent) and, for a
    # run that asked for limits and got none, why (None: recorded before limits, or none
    # asked for).
    cgroup: str | None = None
    unlimited_reason: str | None = None


class RunAdopted(Event, tag="run.adopted", frozen=True, kw_only=True):
    """A restarted daemon took over a run whose process outlived its predecessor."""

    attempt: int
    pid: int
    daemon_pid: int


class RunOutputCapped(Event, tag="run.output-capped", frozen=True, kw_only=True):
    """One of the run's output files was cut (recorded once the run ended): with cause
    "cap", its first ``cap_bytes`` bytes are kept and the rest of the agent's output was
    dropped; otherwise the cause is the write error (disk full...) after which it was."""

    attempt: int
    path: str
    cap_bytes: int
    cause: str = "cap"
    # The bytes the file kept (None: unknown, in events written before this was recorded).
    kept_bytes: int | None = None


class RunCompleted(Event, tag="run.completed", frozen=True, kw_only=True):
    attempt: int
    rc: int
    wall_s: float


class RunTimedOut(Event, tag="run.timed_out", frozen=True, kw_only=True):
    attempt: int
    rc: int = 124
    wall_s: float


# How an outcome says which of the cell's limits ended its run (RunAborted.limit).
LIMIT_REASONS: dict[str, str] = {
    "memory": "out of memory",
    "pids": "pids limit",
    "disk": "disk limit",
}


class RunAborted(Event, tag="run.aborted", frozen=True, kw_only=True):
    attempt: int
    rc: int | None = 130
    wall_s: float | None = None
    reason: str
    # The cell's limit that ended the run: "memory", "pids" or "disk" (the reason then
    # says "out of memory", "pids limit", "disk limit"); None: no limit did.
    limit: str | None = None
    # None: recorded before causes were (arenad.cell.machine.interrupt_cause reads it).
    cause: AbortCause | None = None


class CellVerified(Event, tag="cell.verified", frozen=True, kw_only=True):
    attempt: int
    scored: bool
    # Why the result does not count (timed out, aborted, non-zero exit, ...).
    not_scored_reason: str | None = None
    patch_path: str | None = None
    patch_lines: int | None = None
    patch_sha256: str | None = None
    verify_rc: int | None = None
    verify_pass: bool | None = None
    verify_log: str | None = None
    # The cell's limit that ended the verify command ("memory", "pids"); None: none did.
    verify_limit: str | None = None
    # What the agent changed that it had no business changing (its ws/.git replaced, the
    # base rewritten): then the result is not scored. [] = checked, nothing found;
    # None = not checked (the workspace had no seal).
    tampered: list[str] | None = None
    # Nested repositories the agent left (gitlinks, new or moved): their files are in no
    # patch, a labelled gap. None = unknown.
    nested_repos: list[str] | None = None
    # Where verify ran (arenad.verdict.grade): "checkout" = a fresh checkout of base with
    # the stored patch applied; "workspace" = the agent's own ws (the campaign chose
    # verify_in = "workspace"): a self-reported verdict. None = recorded before grading
    # checkouts (then it was the workspace).
    verify_in: Literal["checkout", "workspace"] | None = None
    # Whether the stored patch applied to the grading checkout (False: it did not, and
    # verify did not run: unresolved); None = not applied by arenad (workspace, older logs).
    patch_applied: bool | None = None
    # One line: how the patch applied, or git's reason it did not.
    patch_apply_note: str | None = None
    # The patch's files not applied for grading (runner config, binary with no data).
    patch_left_out: list[str] | None = None
    # Paths the agent changed under the excludes or runner-steering config: evidence
    # (the grade took them from base), never a reason the result does not count.
    # [] = checked, nothing; None = unknown.
    tampered_paths: list[str] | None = None


class CellReverified(CellVerified, tag="cell.reverified", frozen=True, kw_only=True):
    """A new verdict on an attempt's stored patch (``arenad reverify``): verify (and the
    judge) re-run on a fresh grading checkout of base + the patch, the agent not re-run.

    A CellVerified (every fold that reads one reads this as the attempt's newest verdict:
    the newest wins), carrying over what the run decided (``scored``, the patch, the
    tampering found) and replacing what verify decided. The verdict it replaces stays in
    the log; ``previous_*`` name it, so ``history`` shows the lineage."""

    # The verify command that ran (the campaign's, or the operator's ``--verify-cmd``).
    verify_cmd: str
    reason: str = "operator reverify"
    # The verdict this one replaces: its log seq and its verify outcome.
    previous_seq: int | None = None
    previous_pass: bool | None = None
    previous_rc: int | None = None


class SoloUsage(msgspec.Struct, frozen=True, kw_only=True):
    """The reference's usage figures, summed over the opencode stream's token parts."""

    steps: int
    tokens_in: int
    tokens_out: int
    reasoning: int
    cache_w: int
    cache_r: int
    max_ctx: int
    oc_cost: float
    total_io: int


class SpendFigures(msgspec.Struct, frozen=True, kw_only=True):
    """Spend recovered for one attempt. ``None`` = unknown (a recorded gap), never 0."""

    sessions: int | None = None
    tokens_in: int | None = None
    tokens_out: int | None = None
    tokens_reasoning: int | None = None
    cache_read: int | None = None
    cache_write: int | None = None
    cost_usd: float | None = None
    # Supervisor arm (the reference's SupSpend).
    worker_tok_journal: int | None = None
    worker_cwds: list[str] | None = None
    worker_sessions: int | None = None
    worker_tok_sqlite: int | None = None
    worker_tok_in: int | None = None
    worker_tok_out: int | None = None
    spent_tokens: int | None = None
    spent_usd: float | None = None


class RejectedFigure(msgspec.Struct, frozen=True, kw_only=True):
    """A figure read from where the agent can write (its opencode store, its stream) that is
    out of bounds (``arenad.recovery.bounds``): evidence, never counted. The figure it would
    have fed is unknown (None)."""

    # "store" (a session row or its step-finish parts) or "stream" (the run's stdout).
    source: str
    # Which session ("session ses_1") or which step ("step 3").
    where: str
    # "cost", "tokens_input", ...
    field: str
    # The value as read, as text ("1e+300", "-1000.0", "inf").
    raw: str
    # "negative", "not a finite number", "over the ceiling of 1000".
    reason: str


class CellRecovered(Event, tag="cell.recovered", frozen=True, kw_only=True):
    # v2: ``spend_gap`` and ``rejected``; a v1 row's non-finite ``usage.oc_cost`` (JSON
    # null) is upcast to unknown usage with the evidence (events.codec).
    VERSION = 2
    v: int = 2
    attempt: int
    store_path: str | None = None
    store_available: bool
    gap: str | None = None
    spend: SpendFigures
    usage: SoloUsage | None = None
    # Why figures are unknown although the store was read: figures out of bounds, or a
    # store that is not spend of record (a command arm's: the agent writes it).
    spend_gap: str | None = None
    # The out-of-bounds figures, as read (evidence; never added by any fold).
    rejected: list[RejectedFigure] = msgspec.field(default_factory=list)


class CellFailed(Event, tag="cell.failed", frozen=True, kw_only=True):
    VERSION = 2
    v: int = 2
    attempt: int
    stage: str
    error: str
    classification: Classification
    retryable: bool = False


class CellRetried(Event, tag="cell.retried", frozen=True, kw_only=True):
    """Opens attempt ``attempt``; earlier attempts' events and directories stay."""

    attempt: int
    reason: str
    requested_by: Literal["operator", "policy", "resume"] = "operator"
    # A policy retry waits out its backoff: the new attempt starts no earlier than this.
    not_before_ms: int | None = None


class ProvenanceRecorded(Event, tag="cell.provenance", frozen=True, kw_only=True):
    attempt: int
    repo: str
    commit: str
    env_knobs: dict[str, str] = msgspec.field(default_factory=dict)


class SupervisorOutcome(Event, tag="cell.supervisor-outcome", frozen=True, kw_only=True):
    """state.json's summary at run end (the reference's parseSupervisorArtifacts)."""

    attempt: int
    sup_run_dir: str | None
    status: str | None
    verdict: str | None
    delivered: bool | None
    spent_tokens: int | None
    spent_usd: float | None
    # The journal's summary counts at run end (the reference's parseSupervisorArtifacts), so a
    # projection need not fold the whole ingest stream; None: not recorded (an older
    # arenad), then they are folded from the ingested journal. ``subtasks`` is also None
    # when a label is not valid Unicode (a lone surrogate cannot be stored): folded then.
    spawned: int | None = None
    workers: int | None = None
    settled: int | None = None
    subtasks: list[str] | None = None


class AbortRequested(Event, tag="cell.abort-requested", frozen=True, kw_only=True):
    reason: str = "operator request"


class CellPaused(Event, tag="cell.paused", frozen=True, kw_only=True):
    reason: str = "operator request"


class CellResumed(Event, tag="cell.resumed", frozen=True, kw_only=True):
    pass


class HangDetected(Event, tag="cell.hang-detected", frozen=True, kw_only=True):
    attempt: int
    silent_s: float
    action: Literal["none", "abort"] = "none"


class JudgeVerdictRecorded(Event, tag="cell.judge-verdict", frozen=True, kw_only=True):
    attempt: int
    judge: str
    # The verdict document verbatim (JSON text) plus the fields the ledger reads.
    verdict_json: str
    resolved: bool | None
    score: float | None
    source: Literal["command", "operator"] = "operator"
    # How many times the judge ran for this verdict and how long it took (the reference's
    # judgeAttempts / judgeWallS); None: not recorded.
    attempts: int | None = None
    wall_s: float | None = None
    # A container judge's test log (its tail, whole size and sha256), as the verify log's.
    test_log: TextExcerpt | None = None


class TextExcerpt(msgspec.Struct, frozen=True, kw_only=True):
    """A bounded piece of a file a cell produced, kept in the log so that what the agent
    left is still there after its run dir is deleted.

    ``text`` holds ``kept_bytes`` bytes of the file: all of it (``cut="none"``), its first
    bytes (``"head"``) or its last (``"tail"``), cut at a UTF-8 character boundary; base64
    when they are not UTF-8. ``size`` and ``sha256`` are the whole file's, so a copy of it
    can be checked against the log.
    """

    text: str
    encoding: Encoding = "utf-8"
    kept_bytes: int
    size: int
    sha256: str
    cut: Literal["none", "head", "tail"] = "none"


class PatchFile(msgspec.Struct, frozen=True, kw_only=True):
    """One file of a patch: its path (where it went, for a rename) and the bytes of its
    section in the patch."""

    path: str
    size: int


class PatchCaptured(Event, tag="cell.patch-captured", frozen=True, kw_only=True):
    """The attempt's patch (its CellVerified's ``patch_path``), bounded from its head;
    written with the CellVerified, in one transaction."""

    attempt: int
    patch: TextExcerpt
    # Every file of the whole patch, in patch order (arenad.verdict.patch_files), so the
    # head's cut can hide none; None: recorded before the list was kept.
    files: list[PatchFile] | None = None
    # Files past the list's bound, counted.
    files_omitted: int = 0


class VerifyLogCaptured(Event, tag="cell.verify-log-captured", frozen=True, kw_only=True):
    """The end of the attempt's verify log (its CellVerified's ``verify_log``), bounded
    from its tail, where a failing check says why; written with the CellVerified."""

    attempt: int
    log: TextExcerpt
