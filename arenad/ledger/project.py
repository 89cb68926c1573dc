"""The rollout ledger as a pure projection of the event log.

``project_cell(records, run_id, stats)`` turns the recorded events of ONE cell (its
``cell/<id>`` stream plus its ``capture/<id>/<attempt>`` streams) into
``tangle.rollout.v1`` lines. It reads nothing else: no file, store, clock or random
source — times come from ``recorded_at_ms``, ids from ``rollout_id`` over stable keys.

Decisions (the backfill seed brought to the current schema):

- One attempt that *ended* (a ``CellRecovered``, or a ``CellFailed`` after a
  ``RunStarted`` of that attempt) gives lines; attempts that never ran give none.
- Solo/command cell → one ``agent`` line. Its messages are the captured sessions of
  purpose solo/command in this order: root sessions (no parent among the captured ones)
  by (time_created, id), then the child sessions by (time_created, id), each session's
  transcript concatenated. ``transcript_ref`` names the first root.
- Supervisor cell → one ``supervisor`` line (brain gap) + one ``worker`` line per
  captured worker session (deduplicated by session id, ordered by (directory,
  time_created, id)), then a gap line per ``WorkerCwdUnmatched`` cwd, then — when the
  store was unavailable — a gap line per recorded worker cwd not otherwise covered (or
  one line with ``worker_cwd: null`` when no cwd is known).
- Reward: the latest ``JudgeVerdictRecorded`` of the attempt (``score`` when a number,
  else ``resolved`` as 1/0), else null with ``reward_source`` null. Workers inherit it
  with ``<judge>/inherited``.
- ``captured_at`` = the recorded time of the attempt's ``CellRecovered`` (else its
  ``CellFailed``); ``capture`` = ``settle-time``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any

from arenad.ledger.js import iso_ms, js_round
from arenad.ledger.opencode_transcript import capture_chat_messages, opencode_session_info
from arenad.ledger.rollout import ROLLOUT_SCHEMA, assert_rollout_line, rollout_id
from events import capture as cap
from events import cell as ev
from events.base import Recorded
from events.specs import CellSpec, CommandArm, SoloArm, SupervisorArm

__all__ = ["BRAIN_GAP", "LedgerStats", "new_stats", "project_cell", "stats_json"]

BRAIN_GAP = "supervisor brain transcript not persisted (brain.jsonl carries per-request stats only)"

LedgerStats = dict[str, Any]


def new_stats() -> LedgerStats:
    """The seed's BackfillStats, zeroed (``opencodeDbAvailable`` until a store gap is seen)."""
    return {
        "lines": 0,
        "byRole": {},
        "fullTranscripts": 0,
        "gapLines": 0,
        "rewardLabeled": 0,
        "workerSessionsJoined": 0,
        "workerCwdsMissed": 0,
        "workerSessionsEmpty": 0,
        "proposerShotsJoined": 0,
        "proposerShotsMissed": 0,
        "opencodeDbAvailable": True,
    }


def stats_json(stats: LedgerStats) -> str:
    return json.dumps(stats, separators=(",", ":"), ensure_ascii=False)


class _Attempt:
    def __init__(self) -> None:
        self.materialized: ev.CellMaterialized | None = None
        self.started: ev.RunStarted | None = None
        self.ended: ev.RunCompleted | ev.RunTimedOut | ev.RunAborted | None = None
        self.verified: ev.CellVerified | None = None
        self.recovered: Recorded | None = None
        self.failed: Recorded | None = None
        self.verdict: ev.JudgeVerdictRecorded | None = None
        self.supervisor: ev.SupervisorOutcome | None = None
        self.provenance: ev.ProvenanceRecorded | None = None
        self.sessions: dict[str, cap.AgentSessionCaptured] = {}
        self.unavailable: cap.AgentStoreUnavailable | None = None
        self.unmatched: list[str] = []


def _split_model(ref: str | None) -> tuple[str | None, str | None]:
    """``provider/model`` → (provider, model); a bare name has no provider."""
    if not ref:
        return None, None
    provider, sep, model = ref.partition("/")
    return (provider, model) if sep else (None, ref)


def _num(v: object) -> int | float | None:
    if isinstance(v, bool) or not isinstance(v, int | float):
        return None
    return v


def _reward(verdict: ev.JudgeVerdictRecorded | None) -> tuple[int | float | None, str | None]:
    if verdict is None:
        return None, None
    if verdict.score is not None:
        return verdict.score, verdict.judge
    if verdict.resolved is not None:
        return (1 if verdict.resolved else 0), verdict.judge
    return None, None


def _verdict_value(verdict: ev.JudgeVerdictRecorded | None) -> Any:
    if verdict is None:
        return None
    try:
        return json.loads(verdict.verdict_json)
    except ValueError:
        return verdict.verdict_json


def _push(lines: list[dict[str, Any]], stats: LedgerStats, line: dict[str, Any], ctx: str) -> None:
    assert_rollout_line(line, ctx)
    lines.append(line)
    stats["lines"] += 1
    by_role: dict[str, int] = stats["byRole"]
    by_role[line["role"]] = by_role.get(line["role"], 0) + 1
    if line["messages"]:
        stats["fullTranscripts"] += 1
    else:
        stats["gapLines"] += 1
    if line["outcome"]["reward"] is not None:
        stats["rewardLabeled"] += 1


def _collect(records: Iterable[Recorded]) -> tuple[CellSpec | None, dict[int, _Attempt]]:
    spec: CellSpec | None = None
    attempts: dict[int, _Attempt] = {}

    def at(n: int) -> _Attempt:
        return attempts.setdefault(n, _Attempt())

    for rec in sorted(records, key=lambda r: r.seq):
        e = rec.event
        match e:
            case ev.CellSubmitted():
                spec = e.spec
            case ev.CellMaterialized():
                at(e.attempt).materialized = e
            case ev.RunStarted():
                at(e.attempt).started = e
            case ev.RunCompleted() | ev.RunTimedOut() | ev.RunAborted():
                at(e.attempt).ended = e
            case ev.CellVerified():
                at(e.attempt).verified = e
            case ev.CellRecovered():
                at(e.attempt).recovered = rec
            case ev.CellFailed():
                at(e.attempt).failed = rec
            case ev.JudgeVerdictRecorded():
                at(e.attempt).verdict = e
            case ev.SupervisorOutcome():
                at(e.attempt).supervisor = e
            case ev.ProvenanceRecorded():
                at(e.attempt).provenance = e
            case cap.AgentSessionCaptured():
                at(e.attempt).sessions.setdefault(e.session_id, e)
            case cap.AgentStoreUnavailable():
                at(e.attempt).unavailable = e
            case cap.WorkerCwdUnmatched():
                a = at(e.attempt)
                if e.cwd not in a.unmatched:
                    a.unmatched.append(e.cwd)
    return spec, attempts


def _time_key(s: cap.AgentSessionCaptured) -> tuple[float, str]:
    return (float(opencode_session_info(s.row).time_created), s.session_id)


def _task(spec: CellSpec) -> dict[str, Any]:
    return {
        "suite": spec.suite,
        "instance_id": spec.instance.instance_id,
        "split": spec.split,
        "seed": None,
        "rep": spec.rep,
    }


def _head(run_id: str, rid: str, parent: str | None, spec: CellSpec, role: str) -> dict[str, Any]:
    return {
        "schema": ROLLOUT_SCHEMA,
        "rollout_id": rid,
        "parent_rollout_id": parent,
        "run_id": run_id,
        "experiment_id": spec.experiment_id,
        "candidate_id": None,
        "generation": None,
        "candidate_index": None,
        "role": role,
        "task": _task(spec),
    }


def _provenance(captured_at: str, gap: str | None) -> dict[str, Any]:
    out: dict[str, Any] = {"captured_at": captured_at, "capture": "settle-time"}
    if gap is not None:
        out["gap"] = gap
    return out


def _common(a: _Attempt) -> tuple[bool, bool, str | None, float | None, int | None]:
    """(scored, timed_out, error, wall_s, rc) of an attempt."""
    scored = a.verified is not None and a.verified.scored
    timed_out = isinstance(a.ended, ev.RunTimedOut)
    error = a.failed.event.error if a.failed is not None else None  # type: ignore[attr-defined]
    wall_s = a.ended.wall_s if a.ended is not None else None
    rc = a.ended.rc if a.ended is not None else None
    return scored, timed_out, error, wall_s, rc


def _agent_line(
    run_id: str, cell_id: str, n: int, a: _Attempt, spec: CellSpec, captured_at: str
) -> dict[str, Any]:
    sessions = [s for s in a.sessions.values() if s.purpose in ("solo", "command")]
    ids = {s.session_id for s in sessions}
    roots = sorted((s for s in sessions if s.parent_id not in ids), key=_time_key)
    children = sorted((s for s in sessions if s.parent_id in ids), key=_time_key)
    messages: list[Any] = []
    for s in [*roots, *children]:
        messages.extend(capture_chat_messages(s))
    root_id = roots[0].session_id if roots else None
    gap: str | None = None
    if not messages:
        if a.unavailable is not None:
            gap = f"opencode store unavailable: {a.unavailable.error}"
        elif not sessions:
            gap = f"no opencode session captured for attempt {n}"
        else:
            gap = f"opencode session {root_id} has no readable message parts"
    scored, timed_out, error, wall_s, rc = _common(a)
    v = a.verified
    spend = a.recovered.event.spend if a.recovered is not None else None  # type: ignore[attr-defined]
    reward, source = _reward(a.verdict)
    arm = spec.arm
    model_ref = arm.model if isinstance(arm, SoloArm | CommandArm) else None
    provider, model = _split_model(model_ref)
    line = _head(run_id, rollout_id(run_id, cell_id, n, "agent", root_id), None, spec, "agent")
    line["policy"] = {
        "harness": "opencode" if isinstance(arm, SoloArm) else f"command:{arm.name}",
        "harness_version": None,
        "model": model,
        "provider": provider,
        "profile_commit": a.provenance.commit if a.provenance is not None else None,
        "sampling": None,
    }
    line["messages"] = messages
    line["tool_defs"] = []
    line["outcome"] = {
        "reward": reward,
        "realness_gated": False,
        "reward_source": source,
        "verdict": _verdict_value(a.verdict),
        "metrics": {
            "resolved": a.verdict.resolved if a.verdict is not None else None,
            "verify_pass": v.verify_pass if v is not None else None,
            "verify_rc": v.verify_rc if v is not None else None,
            "patch_lines": v.patch_lines if v is not None else None,
            "patch_sha256": v.patch_sha256 if v is not None else None,
            "scored": scored,
            "not_scored_reason": v.not_scored_reason if v is not None else None,
            "rc": rc,
            "attempt": n,
            "sessions": len(sessions),
        },
        "is_completed": scored,
        "is_truncated": timed_out,
        "error": error,
    }
    line["cost"] = {
        "usd": spend.cost_usd if spend is not None else None,
        "tokens_in": spend.tokens_in if spend is not None else None,
        "tokens_out": spend.tokens_out if spend is not None else None,
        "tokens_reasoning": spend.tokens_reasoning if spend is not None else None,
        "cache_read": spend.cache_read if spend is not None else None,
        "cache_write": spend.cache_write if spend is not None else None,
        "wall_s": wall_s,
    }
    line["artifacts"] = {
        "patch_path": v.patch_path if v is not None else None,
        "run_dir": a.materialized.run_dir if a.materialized is not None else None,
        "transcript_ref": f"opencode:{root_id}" if root_id is not None else None,
    }
    line["provenance"] = _provenance(captured_at, gap)
    return line


def _supervisor_line(
    run_id: str, cell_id: str, n: int, a: _Attempt, spec: CellSpec, captured_at: str
) -> dict[str, Any]:
    arm = spec.arm
    assert isinstance(arm, SupervisorArm)
    scored, timed_out, error, wall_s, rc = _common(a)
    v = a.verified
    so = a.supervisor
    spend = a.recovered.event.spend if a.recovered is not None else None  # type: ignore[attr-defined]
    reward, source = _reward(a.verdict)
    provider, model = _split_model(arm.driver_model)
    run_dir = a.materialized.run_dir if a.materialized is not None else None
    line = _head(
        run_id, rollout_id(run_id, cell_id, n, "supervisor", None), None, spec, "supervisor"
    )
    line["policy"] = {
        "harness": "pi-loops",
        "harness_version": None,
        "model": model,
        "provider": provider,
        "profile_commit": a.provenance.commit if a.provenance is not None else None,
        "sampling": None,
    }
    line["messages"] = []
    line["tool_defs"] = []
    spent_tokens = so.spent_tokens if so is not None else None
    spent_usd = so.spent_usd if so is not None else None
    if spend is not None:
        spent_tokens = spent_tokens if spent_tokens is not None else spend.spent_tokens
        spent_usd = spent_usd if spent_usd is not None else spend.spent_usd
    line["outcome"] = {
        "reward": reward,
        "realness_gated": False,
        "reward_source": source,
        "verdict": _verdict_value(a.verdict),
        "metrics": {
            "resolved": a.verdict.resolved if a.verdict is not None else None,
            "verify_pass": v.verify_pass if v is not None else None,
            "patch_lines": v.patch_lines if v is not None else None,
            "judge_attempts": None,
            "judge_wall_s": None,
            "spent_tokens": spent_tokens,
            "spent_usd": spent_usd,
            "recovered_tokens": spend.worker_tok_sqlite if spend is not None else None,
            "sup_status": so.status if so is not None else None,
            "sup_verdict": so.verdict if so is not None else None,
            "spawned": None,
            "workers": spend.worker_sessions if spend is not None else None,
            "settled": None,
            "subtasks": None,
            "cached": None,
            "scored": scored,
            "not_scored_reason": v.not_scored_reason if v is not None else None,
            "rc": rc,
            "attempt": n,
        },
        "is_completed": scored and error is None,
        "is_truncated": timed_out or (so is not None and so.status == "running"),
        "error": error,
    }
    line["cost"] = {
        "usd": spend.cost_usd if spend is not None else None,
        "tokens_in": None,
        "tokens_out": None,
        "tokens_reasoning": None,
        "cache_read": None,
        "cache_write": None,
        "wall_s": wall_s,
    }
    line["artifacts"] = {
        "patch_path": v.patch_path if v is not None else None,
        "run_dir": run_dir,
        "transcript_ref": f"{run_dir}/brain.jsonl" if run_dir is not None else None,
    }
    line["provenance"] = _provenance(captured_at, BRAIN_GAP)
    return line


def _worker_line(
    run_id: str,
    cell_id: str,
    n: int,
    a: _Attempt,
    spec: CellSpec,
    captured_at: str,
    parent: str,
    cwd: str | None,
    session: cap.AgentSessionCaptured | None,
    gap: str | None,
) -> tuple[dict[str, Any], int]:
    messages = capture_chat_messages(session) if session is not None else []
    info = opencode_session_info(session.row) if session is not None else None
    reward, source = _reward(a.verdict)
    key = session.session_id if session is not None else f"cwd:{cwd}"
    line = _head(run_id, rollout_id(run_id, cell_id, n, "worker", key), parent, spec, "worker")
    line["policy"] = {
        "harness": "opencode",
        "harness_version": None,
        "model": info.model_id if info is not None else None,
        "provider": info.provider_id if info is not None else None,
        "profile_commit": a.provenance.commit if a.provenance is not None else None,
        "sampling": None,
    }
    line["messages"] = messages
    line["tool_defs"] = []
    line["outcome"] = {
        "reward": reward,
        "realness_gated": False,
        "reward_source": None if source is None else f"{source}/inherited",
        "verdict": None,
        "metrics": {
            "worker_cwd": cwd,
            "session_agent": info.agent if info is not None else None,
            "session_parent_id": info.parent_id if info is not None else None,
            "has_session": session is not None,
            "unreadable": len(session.unreadable) if session is not None else None,
        },
        "is_completed": session is not None and len(messages) > 0,
        "is_truncated": False,
        "error": None,
    }
    row = session.row if session is not None else {}
    wall = (
        js_round((float(info.time_updated) - float(info.time_created)) / 1000)
        if info is not None
        else None
    )
    line["cost"] = {
        "usd": _num(row.get("cost")),
        "tokens_in": _num(row.get("tokens_input")),
        "tokens_out": _num(row.get("tokens_output")),
        "tokens_reasoning": _num(row.get("tokens_reasoning")),
        "cache_read": _num(row.get("tokens_cache_read")),
        "cache_write": _num(row.get("tokens_cache_write")),
        "wall_s": wall,
    }
    line["artifacts"] = {
        "patch_path": None,
        "run_dir": a.materialized.run_dir if a.materialized is not None else None,
        "transcript_ref": f"opencode:{session.session_id}" if session is not None else None,
    }
    if not messages and gap is None and session is not None:
        gap = f"opencode session {session.session_id} has no readable message parts"
    line["provenance"] = _provenance(captured_at, gap)
    return line, len(messages)


def project_cell(
    cell_id: str, records: Sequence[Recorded], run_id: str, stats: LedgerStats
) -> list[dict[str, Any]]:
    """The lines of one cell, each validated; ``stats`` is updated in place.

    Raises ``InvalidRolloutLine`` (naming the cell) if a line breaks the schema: a bug.
    """
    spec, attempts = _collect(records)
    lines: list[dict[str, Any]] = []
    if spec is None:
        return lines
    for n in sorted(attempts):
        a = attempts[n]
        if a.unavailable is not None:
            stats["opencodeDbAvailable"] = False
        ending = a.recovered or (a.failed if a.started is not None else None)
        if ending is None:
            continue
        captured_at = iso_ms(ending.recorded_at_ms)
        ctx = f"cell {cell_id} attempt {n}"
        if not isinstance(spec.arm, SupervisorArm):
            line = _agent_line(run_id, cell_id, n, a, spec, captured_at)
            _push(lines, stats, line, f"{ctx} agent line")
            continue
        sup = _supervisor_line(run_id, cell_id, n, a, spec, captured_at)
        _push(lines, stats, sup, f"{ctx} supervisor line")
        parent = sup["rollout_id"]
        workers = sorted(
            (s for s in a.sessions.values() if s.purpose == "worker"),
            key=lambda s: (s.directory, *_time_key(s)),
        )
        covered = {s.directory for s in workers}
        for s in workers:
            line, count = _worker_line(
                run_id, cell_id, n, a, spec, captured_at, parent, s.directory, s, None
            )
            stats["workerSessionsJoined" if count else "workerSessionsEmpty"] += 1
            _push(lines, stats, line, f"{ctx} worker line")
        for cwd in a.unmatched:
            covered.add(cwd)
            gap = f"no opencode session found for worker cwd {cwd}"
            line, _ = _worker_line(run_id, cell_id, n, a, spec, captured_at, parent, cwd, None, gap)
            stats["workerCwdsMissed"] += 1
            _push(lines, stats, line, f"{ctx} worker line")
        if a.unavailable is not None:
            spend = a.recovered.event.spend if a.recovered is not None else None  # type: ignore[attr-defined]
            known = list(dict.fromkeys(spend.worker_cwds or [])) if spend is not None else []
            missing: list[str | None] = [c for c in known if c not in covered]
            if not known:
                missing = [None]
            for gap_cwd in missing:
                gap = (
                    f"opencode store unavailable; worker cwd {gap_cwd} unrecoverable"
                    if gap_cwd is not None
                    else f"opencode store unavailable: {a.unavailable.error}"
                )
                line, _ = _worker_line(
                    run_id, cell_id, n, a, spec, captured_at, parent, gap_cwd, None, gap
                )
                stats["workerCwdsMissed"] += 1
                _push(lines, stats, line, f"{ctx} worker line")
    return lines
