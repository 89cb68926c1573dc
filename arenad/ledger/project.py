"""The rollout ledger as a pure projection of the event log: the lines of the cells.

``project_cell(cell_id, records, run_id, stats)`` turns the recorded events of ONE cell
(its ``cell/<id>`` stream, its ``capture/<id>/<attempt>`` streams and, for a supervisor
cell, its ``ingest/<id>/<attempt>`` streams) into ``tangle.rollout.v1`` lines. It reads
nothing else: no file, store, clock or random source — times come from
``recorded_at_ms``, ids from ``rollout_id`` over stable keys. Every line kind is built
from the same section builders (``arenad.ledger.lines``).

A cell's attempts are folded once, by :mod:`arenad.cell.attempts` (the report and the
export read the same fold); this module only turns each attempt into lines.

The reference is the swe-arena backfill (``shared/seeds/003``, facts rollout-v1 §5),
brought to the current schema; where it reads a run-dir file, the same fact is read from
the event that recorded it:

- One attempt that *ended* (a ``CellRecovered``, or a ``CellFailed`` after a
  ``RunStarted`` of that attempt) gives lines; attempts that never ran give none.
- Identity: ``candidate_id`` / ``generation`` / ``candidate_index`` of the campaign's
  candidate (``arenad.ledger.candidate``: its ``[candidate]`` keys, else its name), on
  every line of the cell.
- Reward: the attempt's latest ``JudgeVerdictRecorded`` (``score`` when a number, else
  ``resolved`` as 1/0) — only when the attempt is *scored*: the reference judges only a
  run that completed (its arm throws on a timeout, an abort or a failed exit, and the
  cell then has no artifact and no reward). A verdict on an unscored run is kept as the
  line's ``verdict`` but gives no reward (null, ``reward_source`` null) and no
  ``resolved``. Workers inherit the reward with ``<judge>/inherited``.
- ``cost.wall_s`` of the agent and supervisor lines is the run's wall time rounded as
  JS ``Math.round`` does (the reference's ``wall_s = Math.round(ms / 1000)``).
- Solo/command cell → one ``agent`` line. Its messages are the captured sessions of
  purpose solo/command in this order: root sessions (no parent among the captured ones)
  by (time_created, id), then the child sessions by (time_created, id), each session's
  transcript concatenated (the fold its capture kept, as the bytes the line holds, or
  its rows folded here: ``arenad.recovery.opencode_transcript``). ``transcript_ref``
  names the first root.
- Supervisor cell → one ``supervisor`` line (brain gap), then its ``worker`` lines as
  the reference joins them: per worker cwd (the recovered ``worker_cwds``, deduplicated,
  first seen first), one line per captured session of that directory by
  (time_created, id), or one gap line for a cwd with none (the store unavailable, or no
  session for it). Captured worker sessions of no listed cwd, and unmatched cwds not
  listed, follow (by directory). No cwd known, no worker line: never a phantom one.
- Supervisor figures, from the events that hold them (the reference reads them from
  result.json and the cell record): ``sup_status``/``sup_verdict``/``spent_*`` from
  ``SupervisorOutcome`` (else the recovery's figures); ``spawned``, ``workers``
  (spawned non-root), ``settled`` and ``subtasks`` as ``SupervisorOutcome`` recorded them
  at run end, else folded over the ingested journal (``arenad.cell.supervisor_figures``;
  null when nothing was ingested for the attempt);
  ``recovered_tokens`` = spent tokens + the workers' store tokens (null unless both are
  known); ``cost.usd`` = the episode's own receipt, the driver's ``spentUsd`` (null when
  unknown; the worker lines carry the workers' costs); ``judge_attempts`` /
  ``judge_wall_s`` from the verdict event, else the verdict document's ``attempts`` /
  ``wallS``; ``cached`` false (arenad serves no result from a cache: every line is an
  attempt that ran).
- An agent line of an attempt with model gateway records (source ``gateway``) carries
  ``steps`` (one per call) and, in ``cost``, the gateway's own sums beside the agent
  store's: ``llm_call_count``, ``gateway`` (usd, token buckets, calls answered / refused /
  failed) and ``mismatch``, the fields where both are known and differ beyond rounding
  (``[]`` when they agree). Neither source overrides the other.
- ``captured_at`` = the recorded time of the attempt's ``CellRecovered`` (else its
  ``CellFailed``); ``capture`` = ``settle-time``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, Literal, NamedTuple

import msgspec

from arenad.cell import supervisor_figures as figures
from arenad.cell.attempts import Attempt, attempts
from arenad.cell.kinds import AGENT_SESSION_PURPOSES, harness_of, kind_of_arm, run_model
from arenad.chat import has_messages, join_messages
from arenad.gateway.reconcile import answered, gateway_calls, gateway_figures, mismatch
from arenad.js import iso_ms, js_parse, js_round
from arenad.ledger.candidate import cell_candidate
from arenad.ledger.lines import (
    Artifacts,
    Cost,
    LedgerStats,
    LineHead,
    Number,
    Outcome,
    Policy,
    Provenance,
    Task,
    count_line,
    new_stats,
    number_or_none,
    rollout_line,
    stats_json,
)
from arenad.ledger.rollout import rollout_id
from arenad.recovery.opencode_transcript import (
    OpencodeSessionInfo,
    ledger_transcript,
    opencode_session_info,
    session_time_created,
)
from events import capture as cap
from events import cell as ev
from events.base import Recorded
from events.specs import CandidateSpec, CellSpec

__all__ = [
    "BRAIN_GAP",
    "CellProjection",
    "CellResolution",
    "LedgerStats",
    "cell_projection",
    "cell_resolution",
    "new_stats",
    "project_cell",
    "stats_json",
]

BRAIN_GAP = "supervisor brain transcript not persisted (brain.jsonl carries per-request stats only)"


def _split_model(ref: str | None) -> tuple[str | None, str | None]:
    """``provider/model`` → (provider, model); a bare name has no provider."""
    if not ref:
        return None, None
    provider, sep, model = ref.partition("/")
    return (provider, model) if sep else (None, ref)


def _reward(a: Attempt) -> tuple[Number | None, str | None]:
    """The attempt's reward and its source: none for an unscored attempt (see above)."""
    verdict = a.verdict
    if verdict is None or not a.scored:
        return None, None
    if verdict.score is not None:
        return verdict.score, verdict.judge
    if verdict.resolved is not None:
        return (1 if verdict.resolved else 0), verdict.judge
    return None, None


def _verdict_value(verdict: ev.JudgeVerdictRecorded | None) -> Any:
    """The verdict document as JSON.parse reads it; kept as its text when it is not JSON."""
    if verdict is None:
        return None
    try:
        return js_parse(verdict.verdict_json)
    except ValueError:
        return verdict.verdict_json


def _collect(records: Sequence[Recorded]) -> tuple[CellSpec | None, tuple[Attempt, ...]]:
    spec = next((r.event.spec for r in records if isinstance(r.event, ev.CellSubmitted)), None)
    return spec, attempts(records)


def _time_key(s: cap.AgentSessionCaptured) -> tuple[float, str]:
    return (float(session_time_created(s.row)), s.session_id)


# --------------------------------------------------------------------------- sections


def _task(spec: CellSpec) -> Task:
    return Task(
        suite=spec.suite,
        instance_id=spec.instance.instance_id,
        split=spec.split,
        seed=None,
        rep=spec.rep,
    )


def _head(
    run_id: str,
    rid: str,
    parent: str | None,
    spec: CellSpec,
    candidate: CandidateSpec | None,
    role: str,
) -> LineHead:
    return LineHead(
        rollout_id=rid,
        parent_rollout_id=parent,
        run_id=run_id,
        experiment_id=spec.experiment_id,
        candidate_id=candidate.id if candidate is not None else None,
        generation=candidate.generation if candidate is not None else None,
        candidate_index=candidate.index if candidate is not None else None,
        role=role,
    )


def _timed_out(a: Attempt) -> bool:
    return isinstance(a.ended, ev.RunTimedOut)


def _wall_s(a: Attempt) -> int | None:
    # The reference's wall_s = Math.round((Date.now() - t0) / 1000): whole seconds, .5 up.
    wall_s = a.ended.wall_s if a.ended is not None else None
    return js_round(wall_s) if wall_s is not None and math.isfinite(wall_s) else None


def _verified_metrics(a: Attempt, *keys: str) -> dict[str, Any]:
    """``resolved`` (a scored attempt's verdict only) then the named CellVerified fields
    (null when unverified)."""
    v = a.verified
    verdict = a.verdict
    resolved = verdict.resolved if verdict is not None and a.scored else None
    out: dict[str, Any] = {"resolved": resolved}
    for key in keys:
        out[key] = getattr(v, key) if v is not None else None
    return out


def _run_metrics(a: Attempt, n: int) -> dict[str, Any]:
    v = a.verified
    out: dict[str, Any] = {
        "scored": a.scored,
        "not_scored_reason": v.not_scored_reason if v is not None else None,
        "rc": a.ended.rc if a.ended is not None else None,
        "attempt": n,
    }
    if v is not None and v.verify_in is not None:
        # Where the verdict was made (a "workspace" one is self-reported), whether the
        # patch applied to the grading checkout, and what the agent changed that it had no
        # business changing (absent from verdicts recorded before grading checkouts).
        out["verify_in"] = v.verify_in
        out["self_reported"] = v.verify_in == "workspace"
        out["patch_applied"] = v.patch_applied
        out["tampered_paths"] = v.tampered_paths
    return out


def _judged_outcome(
    a: Attempt, metrics: dict[str, Any], is_completed: bool, is_truncated: bool
) -> Outcome:
    """The outcome of a line the attempt's own verdict labels (agent, supervisor)."""
    reward, source = _reward(a)
    return Outcome(
        reward=reward,
        reward_source=source,
        verdict=_verdict_value(a.verdict),
        metrics=metrics,
        is_completed=is_completed,
        is_truncated=is_truncated,
        error=a.error,
    )


def _spend_cost(spend: ev.SpendFigures | None, wall_s: Number | None) -> Cost:
    if spend is None:
        return Cost(wall_s=wall_s)
    return Cost(
        usd=spend.cost_usd,
        tokens_in=spend.tokens_in,
        tokens_out=spend.tokens_out,
        tokens_reasoning=spend.tokens_reasoning,
        cache_read=spend.cache_read,
        cache_write=spend.cache_write,
        wall_s=wall_s,
    )


def _session_cost(session: cap.AgentSessionCaptured, info: OpencodeSessionInfo) -> Cost:
    row = session.row
    # Math.round((timeUpdated - timeCreated) / 1000); NaN (unreadable times) is null.
    wall_ms = float(info.time_updated) - float(info.time_created)
    return Cost(
        usd=number_or_none(row.get("cost")),
        tokens_in=number_or_none(row.get("tokens_input")),
        tokens_out=number_or_none(row.get("tokens_output")),
        tokens_reasoning=number_or_none(row.get("tokens_reasoning")),
        cache_read=number_or_none(row.get("tokens_cache_read")),
        cache_write=number_or_none(row.get("tokens_cache_write")),
        wall_s=js_round(wall_ms / 1000) if math.isfinite(wall_ms) else None,
    )


# --------------------------------------------------------------------------- lines


def _agent_line(
    run_id: str,
    cell_id: str,
    n: int,
    a: Attempt,
    spec: CellSpec,
    candidate: CandidateSpec | None,
    captured_at: str,
) -> dict[str, Any]:
    sessions = [s for s in a.sessions if s.purpose in AGENT_SESSION_PURPOSES]
    ids = {s.session_id for s in sessions}
    roots = sorted((s for s in sessions if s.parent_id not in ids), key=_time_key)
    children = sorted((s for s in sessions if s.parent_id in ids), key=_time_key)
    transcripts = [ledger_transcript(s) for s in [*roots, *children]]
    # A session that cannot be a line's transcript (a hostile tool name) makes the whole
    # line a labeled gap: a transcript with a session cut out would pass for the run's.
    gap = next((g for _, g in transcripts if g is not None), None)
    messages = join_messages(m for m, _ in transcripts) if gap is None else []
    root_id = roots[0].session_id if roots else None
    if not has_messages(messages) and gap is None:
        if a.unavailable is not None:
            gap = f"opencode store unavailable: {a.unavailable.error}"
        elif not sessions:
            gap = f"no opencode session captured for attempt {n}"
        else:
            gap = f"opencode session {root_id} has no readable message parts"
    arm = spec.arm
    provider, model = _split_model(run_model(arm))
    metrics = _verified_metrics(a, "verify_pass", "verify_rc", "patch_lines", "patch_sha256")
    metrics.update(_run_metrics(a, n))
    metrics["sessions"] = len(sessions)
    rid = rollout_id(run_id, cell_id, n, "agent", root_id)
    calls = gateway_calls(a.ingested or [])
    line = rollout_line(
        _head(run_id, rid, None, spec, candidate, "agent"),
        _task(spec),
        Policy(
            harness=harness_of(arm),
            model=model,
            provider=provider,
            profile_commit=a.profile_commit,
        ),
        messages,
        _judged_outcome(a, metrics, is_completed=a.scored, is_truncated=_timed_out(a)),
        _spend_cost(a.spend, _wall_s(a)),
        Artifacts(
            patch_path=a.verified.patch_path if a.verified is not None else None,
            run_dir=a.run_dir,
            transcript_ref=f"opencode:{root_id}" if root_id is not None else None,
        ),
        Provenance(captured_at=captured_at, gap=gap),
        _gateway_steps(calls),
    )
    _reconcile(line, calls)
    return line


def _object(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _int_list(value: Any) -> list[int] | None:
    if isinstance(value, list) and all(
        isinstance(i, int) and not isinstance(i, bool) for i in value
    ):
        return value
    return None


def _gateway_steps(calls: list[dict[str, Any]]) -> list[dict[str, Any]] | None:
    """One step per model call the gateway recorded for the attempt (None: no records),
    with the token IDs and chosen-token logprobs when the upstream returned them. Only the
    declared step keys; a malformed field is left out, never guessed."""
    steps: list[dict[str, Any]] = []
    for call in calls:
        request = _object(call.get("request"))
        step: dict[str, Any] = {
            "kind": "llm",
            "name": request.get("model") if isinstance(request.get("model"), str) else "model",
            "status": "ok" if answered(call) else "error",
            "llm_call_count": 1,
        }
        latency = number_or_none(call.get("latency_ms"))
        if latency is not None and math.isfinite(latency):
            step["durationMs"] = latency
        ids = _object(call.get("token_ids"))
        prompt, completion = _int_list(ids.get("prompt")), _int_list(ids.get("completion"))
        if prompt is not None:
            step["prompt_token_ids"] = prompt
        if completion is not None:
            step["completion_token_ids"] = completion
        entries = call.get("logprobs")
        if isinstance(entries, list):
            values = [number_or_none(_object(x).get("logprob")) for x in entries]
            finite = [v for v in values if v is not None and math.isfinite(v)]
            if len(finite) == len(values):
                step["logprobs"] = finite
        steps.append(step)
    return steps or None


def _reconcile(line: dict[str, Any], calls: list[dict[str, Any]]) -> None:
    """Put the gateway's figures beside the agent store's in the line's ``cost`` (keys the
    schema leaves open): ``llm_call_count``, ``gateway`` and ``mismatch``, the fields that
    disagree ([] when they agree). A line without gateway records is left as it was."""
    if not calls:
        return
    cost: dict[str, Any] = line["cost"]
    gateway = gateway_figures(calls)
    cost["llm_call_count"] = len(calls)
    cost["gateway"] = gateway
    cost["mismatch"] = mismatch(cost, gateway)


def _judge_figures(verdict: ev.JudgeVerdictRecorded | None) -> tuple[Any, Any]:
    """(judge_attempts, judge_wall_s): the verdict event's, else its document's
    ``attempts`` / ``wallS`` (the reference's judge.json keys), else null."""
    if verdict is None:
        return None, None
    attempts: Any = verdict.attempts
    wall_s: Any = verdict.wall_s
    if attempts is None or wall_s is None:
        doc = _verdict_value(verdict)
        if isinstance(doc, dict):
            if attempts is None:
                attempts = number_or_none(doc.get("attempts"))
            if wall_s is None:
                wall_s = number_or_none(doc.get("wallS"))
    return attempts, wall_s


def _supervisor_line(
    run_id: str,
    cell_id: str,
    n: int,
    a: Attempt,
    spec: CellSpec,
    candidate: CandidateSpec | None,
    captured_at: str,
) -> dict[str, Any]:
    arm = spec.arm
    so = a.supervisor
    spend = a.spend
    # The reference's ``resolvedModel`` of a supervisor cell is the model its work ran on:
    # the worker model (issue 29, finding 9), not the driver that plans it.
    provider, model = _split_model(run_model(arm))
    run_dir = a.run_dir
    spent_tokens = so.spent_tokens if so is not None else None
    spent_usd = so.spent_usd if so is not None else None
    if spend is not None:
        spent_tokens = spent_tokens if spent_tokens is not None else spend.spent_tokens
        spent_usd = spent_usd if spent_usd is not None else spend.spent_usd
    worker_tokens = spend.worker_tok_sqlite if spend is not None else None
    # The counts the run's end recorded, else folded over the ingested journal (older
    # logs); null when neither is known.
    journal = figures.recorded_counts(so) or (
        figures.summarize(a.ingested) if a.ingested is not None else None
    )
    judge_attempts, judge_wall_s = _judge_figures(a.verdict)
    metrics = _verified_metrics(a, "verify_pass", "patch_lines")
    metrics.update(
        {
            "judge_attempts": judge_attempts,
            "judge_wall_s": judge_wall_s,
            "spent_tokens": spent_tokens,
            "spent_usd": spent_usd,
            # The episode total, spent (brain and spend tree) + the workers' store tokens.
            "recovered_tokens": (
                spent_tokens + worker_tokens
                if spent_tokens is not None and worker_tokens is not None
                else None
            ),
            "sup_status": so.status if so is not None else None,
            "sup_verdict": so.verdict if so is not None else None,
            "spawned": journal.spawned if journal is not None else None,
            "workers": journal.workers if journal is not None else None,
            "settled": journal.settled if journal is not None else None,
            "subtasks": list(journal.subtasks) if journal is not None else None,
            "cached": False,
        }
    )
    metrics.update(_run_metrics(a, n))
    error = a.error
    rid = rollout_id(run_id, cell_id, n, "supervisor", None)
    return rollout_line(
        _head(run_id, rid, None, spec, candidate, "supervisor"),
        _task(spec),
        Policy(
            harness=harness_of(arm), model=model, provider=provider, profile_commit=a.profile_commit
        ),
        [],
        _judged_outcome(
            a,
            metrics,
            is_completed=a.scored and error is None,
            is_truncated=_timed_out(a) or (so is not None and so.status == "running"),
        ),
        # The episode's own receipt (the driver's spentUsd); the brain's token split is
        # not recorded, and the workers' costs are on their own lines.
        Cost(usd=spent_usd, wall_s=_wall_s(a)),
        Artifacts(
            patch_path=a.verified.patch_path if a.verified is not None else None,
            run_dir=run_dir,
            transcript_ref=f"{run_dir}/brain.jsonl" if run_dir is not None else None,
        ),
        Provenance(captured_at=captured_at, gap=BRAIN_GAP),
    )


def _worker_line(
    run_id: str,
    cell_id: str,
    n: int,
    a: Attempt,
    spec: CellSpec,
    candidate: CandidateSpec | None,
    captured_at: str,
    parent: str,
    cwd: str | None,
    session: cap.AgentSessionCaptured | None,
    gap: str | None,
) -> tuple[dict[str, Any], bool]:
    """The worker's line, and whether it carries a transcript."""
    messages, hostile = ledger_transcript(session) if session is not None else ([], None)
    full = has_messages(messages)
    gap = hostile if hostile is not None else gap
    info = opencode_session_info(session.row) if session is not None else None
    reward, source = _reward(a)
    key = session.session_id if session is not None else f"cwd:{cwd}"
    if not full and gap is None and session is not None:
        gap = f"opencode session {session.session_id} has no readable message parts"
    rid = rollout_id(run_id, cell_id, n, "worker", key)
    line = rollout_line(
        _head(run_id, rid, parent, spec, candidate, "worker"),
        _task(spec),
        Policy(
            harness="opencode",
            model=info.model_id if info is not None else None,
            provider=info.provider_id if info is not None else None,
            profile_commit=a.profile_commit,
        ),
        messages,
        # Episode-level credit: the worker has no verdict of its own.
        Outcome(
            reward=reward,
            reward_source=None if source is None else f"{source}/inherited",
            verdict=None,
            metrics={
                "worker_cwd": cwd,
                "session_agent": info.agent if info is not None else None,
                "session_parent_id": info.parent_id if info is not None else None,
                "has_session": session is not None,
                "unreadable": len(session.unreadable) if session is not None else None,
            },
            is_completed=session is not None and full,
            is_truncated=False,
            error=None,
        ),
        _session_cost(session, info) if session is not None and info is not None else Cost(),
        Artifacts(
            patch_path=None,
            run_dir=a.run_dir,
            transcript_ref=f"opencode:{session.session_id}" if session is not None else None,
        ),
        Provenance(captured_at=captured_at, gap=gap),
    )
    return line, full


def _worker_entries(a: Attempt) -> list[tuple[str | None, cap.AgentSessionCaptured | None, str]]:
    """(cwd, session, gap) of each worker line, in the reference's order (see above)."""
    by_dir: dict[str, list[cap.AgentSessionCaptured]] = {}
    for s in sorted((s for s in a.sessions if s.purpose == "worker"), key=_time_key):
        by_dir.setdefault(s.directory, []).append(s)
    spend = a.spend
    cwds = spend.worker_cwds if spend is not None else None
    if cwds is None and a.ingested is not None:
        cwds = figures.worker_cwds(a.ingested)
    listed = list(dict.fromkeys(cwds or ()))
    entries: list[tuple[str | None, cap.AgentSessionCaptured | None, str]] = []
    for cwd in listed:
        sessions = by_dir.pop(cwd, None)
        if sessions:
            entries.extend((cwd, s, "") for s in sessions)
        elif a.unavailable is not None and cwd not in a.unmatched:
            entries.append(
                (cwd, None, f"opencode store unavailable; worker cwd {cwd} unrecoverable")
            )
        else:
            entries.append((cwd, None, f"no opencode session found for worker cwd {cwd}"))
    # What was recorded beyond the listed cwds is kept, never dropped.
    for directory in sorted(by_dir):
        entries.extend((directory, s, "") for s in by_dir[directory])
    for cwd in a.unmatched:
        if cwd not in listed:
            entries.append((cwd, None, f"no opencode session found for worker cwd {cwd}"))
    return entries


class CellResolution(msgspec.Struct, frozen=True, kw_only=True):
    """Where a cell's current attempt stands for its candidate's resolved count."""

    campaign: str
    candidate: CandidateSpec | None
    instance_id: str
    rep: int
    # resolved/unresolved: a scored attempt's verdict said so; an attempt that failed or
    # does not count is unresolved (the reference counts a cell with no result so);
    # pending: not known yet.
    status: Literal["resolved", "unresolved", "pending"]
    judge: str | None
    profile_commit: str | None


class CellProjection(NamedTuple):
    lines: list[dict[str, Any]]
    resolution: CellResolution | None


def _resolution(spec: CellSpec, done: tuple[Attempt, ...]) -> CellResolution:
    a = done[-1] if done else None  # the current (highest) attempt; None: none opened
    verdict = a.verdict if a is not None else None
    status: Literal["resolved", "unresolved", "pending"] = "pending"
    if a is None:
        pass
    elif a.failed is not None or (a.recovered is not None and not a.scored):
        status = "unresolved"
    elif a.recovered is not None and verdict is not None and verdict.resolved is not None:
        status = "resolved" if verdict.resolved else "unresolved"
    return CellResolution(
        campaign=spec.campaign,
        candidate=cell_candidate(spec),
        instance_id=spec.instance.instance_id,
        rep=spec.rep,
        status=status,
        judge=verdict.judge if verdict is not None and status != "pending" else None,
        profile_commit=a.profile_commit if a is not None else None,
    )


def cell_projection(
    cell_id: str, records: Sequence[Recorded], run_id: str, stats: LedgerStats
) -> CellProjection:
    """The lines of one cell, each validated (``stats`` updated in place), and where its
    current attempt stands for its candidate (None for a cell never submitted).

    Raises ``InvalidRolloutLine`` (naming the cell) if a line breaks the schema: a bug.
    """
    spec, done = _collect(records)
    lines: list[dict[str, Any]] = []
    if spec is None:
        return CellProjection(lines, None)
    candidate = cell_candidate(spec)
    for a in done:
        n = a.n
        if a.unavailable is not None:
            stats["opencodeDbAvailable"] = False
        captured_at_ms = a.captured_at_ms
        if captured_at_ms is None:
            continue
        captured_at = iso_ms(captured_at_ms)
        ctx = f"cell {cell_id} attempt {n}"
        if kind_of_arm(spec.arm).ledger == "agent":
            line = _agent_line(run_id, cell_id, n, a, spec, candidate, captured_at)
            count_line(lines, stats, line, f"{ctx} agent line")
            continue
        sup = _supervisor_line(run_id, cell_id, n, a, spec, candidate, captured_at)
        count_line(lines, stats, sup, f"{ctx} supervisor line")
        parent = sup["rollout_id"]
        for cwd, session, gap in _worker_entries(a):
            line, full = _worker_line(
                run_id,
                cell_id,
                n,
                a,
                spec,
                candidate,
                captured_at,
                parent,
                cwd,
                session,
                gap or None,
            )
            if session is None:
                stats["workerCwdsMissed"] += 1
            else:
                stats["workerSessionsJoined" if full else "workerSessionsEmpty"] += 1
            count_line(lines, stats, line, f"{ctx} worker line")
    return CellProjection(lines, _resolution(spec, done))


def project_cell(
    cell_id: str, records: Sequence[Recorded], run_id: str, stats: LedgerStats
) -> list[dict[str, Any]]:
    """``cell_projection(...).lines``."""
    return cell_projection(cell_id, records, run_id, stats).lines


def cell_resolution(records: Sequence[Recorded]) -> CellResolution | None:
    """The cell's current (highest) attempt: resolved, unresolved or still pending."""
    spec, done = _collect(records)
    return _resolution(spec, done) if spec is not None else None
