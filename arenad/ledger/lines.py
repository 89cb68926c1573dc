"""The sections of a ``tangle.rollout.v1`` line, one builder each, shared by every line kind.

Agent, supervisor, worker and proposer lines differ in *values*, never in the shape of a
section: each section is a frozen Struct whose field order is the schema's key order (fact
sheet §1, as agent-eval's mint writes it), and ``rollout_line`` assembles them in the
declaration order. Ledgers are compared byte for byte, so the order here is the contract.

``new_stats``/``count_line`` keep the reference's BackfillStats for every kind alike. Pure.
"""

from __future__ import annotations

import json
from typing import Any, Literal

import msgspec

from arenad.chat import ChatMessages, has_messages
from arenad.ledger.rollout import ROLLOUT_SCHEMA, assert_rollout_line

__all__ = [
    "Artifacts",
    "Cost",
    "LedgerStats",
    "LineHead",
    "Number",
    "Outcome",
    "Policy",
    "Provenance",
    "Task",
    "add_stats",
    "count_line",
    "new_stats",
    "number_or_none",
    "rollout_line",
    "stats_json",
    "tally_line",
]

Number = int | float
LedgerStats = dict[str, Any]
Capture = Literal["mint", "settle-time", "backfill"]


class LineHead(msgspec.Struct, frozen=True, kw_only=True):
    """Identity: the keys before ``task`` (``schema`` is constant)."""

    rollout_id: str
    parent_rollout_id: str | None = None
    run_id: str
    experiment_id: str | None = None
    candidate_id: str | None = None
    generation: int | None = None
    candidate_index: int | None = None
    role: str


class Task(msgspec.Struct, frozen=True, kw_only=True):
    suite: str
    instance_id: str
    split: str
    seed: Number | None = None
    rep: int


class Policy(msgspec.Struct, frozen=True, kw_only=True):
    # arenad knows no harness version or sampling parameters: null, never a guess.
    harness: str | None
    harness_version: None = None
    model: str | None
    provider: str | None
    profile_commit: str | None
    sampling: None = None


class Outcome(msgspec.Struct, frozen=True, kw_only=True):
    reward: Number | None
    # No realness screen runs in arenad, so no line is gated.
    realness_gated: bool = False
    reward_source: str | None
    verdict: Any
    metrics: dict[str, Any]
    is_completed: bool
    is_truncated: bool
    error: str | None


class Cost(msgspec.Struct, frozen=True, kw_only=True):
    """None = not captured (a labeled gap), never a fake 0."""

    usd: Number | None = None
    tokens_in: Number | None = None
    tokens_out: Number | None = None
    tokens_reasoning: Number | None = None
    cache_read: Number | None = None
    cache_write: Number | None = None
    wall_s: Number | None = None


class Artifacts(msgspec.Struct, frozen=True, kw_only=True):
    patch_path: str | None
    run_dir: str | None
    transcript_ref: str | None


class Provenance(msgspec.Struct, frozen=True, kw_only=True):
    captured_at: str
    # arenad captures what it projects while it happens (or when it settles).
    capture: Capture = "settle-time"
    gap: str | None = None

    def section(self) -> dict[str, Any]:
        out: dict[str, Any] = {"captured_at": self.captured_at, "capture": self.capture}
        if self.gap is not None:
            out["gap"] = self.gap
        return out


def _section(part: msgspec.Struct) -> dict[str, Any]:
    # Shallow, in field order: the schema's key order.
    return msgspec.structs.asdict(part)


def rollout_line(
    head: LineHead,
    task: Task,
    policy: Policy,
    messages: ChatMessages,
    outcome: Outcome,
    cost: Cost,
    artifacts: Artifacts,
    provenance: Provenance,
    steps: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """One line, keys in the declaration order; ``steps`` only when given (the model
    gateway's calls: arenad.ledger.project)."""
    line: dict[str, Any] = {"schema": ROLLOUT_SCHEMA, **_section(head)}
    line["task"] = _section(task)
    line["policy"] = _section(policy)
    line["messages"] = messages
    line["tool_defs"] = []
    if steps is not None:
        line["steps"] = steps
    line["outcome"] = _section(outcome)
    line["cost"] = _section(cost)
    line["artifacts"] = _section(artifacts)
    line["provenance"] = provenance.section()
    return line


def number_or_none(v: object) -> Number | None:
    """A JSON number as JS ``typeof v === 'number'`` sees it (a bool is not one)."""
    if isinstance(v, bool) or not isinstance(v, int | float):
        return None
    return v


def new_stats() -> LedgerStats:
    """The reference's BackfillStats, zeroed (``opencodeDbAvailable`` until a store gap is seen)."""
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


def add_stats(total: LedgerStats, part: LedgerStats) -> None:
    """Add the counts of a later part of the ledger (a batch of cells) to ``total``:
    sums, roles in the order first seen, and the store available only while every part
    found it so."""
    for key, value in part.items():
        if key == "byRole":
            by_role: dict[str, int] = total["byRole"]
            for role, count in value.items():
                by_role[role] = by_role.get(role, 0) + count
        elif key == "opencodeDbAvailable":
            total[key] = total[key] and value
        else:
            total[key] += value


def stats_json(stats: LedgerStats) -> str:
    return json.dumps(stats, separators=(",", ":"), ensure_ascii=False)


def count_line(
    lines: list[dict[str, Any]], stats: LedgerStats, line: dict[str, Any], ctx: str
) -> None:
    """Validate ``line`` (``InvalidRolloutLine`` naming ``ctx``), keep it, count it."""
    tally_line(stats, line, ctx)
    lines.append(line)


def tally_line(stats: LedgerStats, line: dict[str, Any], ctx: str) -> None:
    """Validate ``line`` (``InvalidRolloutLine`` naming ``ctx``) and count it."""
    assert_rollout_line(line, ctx)
    stats["lines"] += 1
    by_role: dict[str, int] = stats["byRole"]
    by_role[line["role"]] = by_role.get(line["role"], 0) + 1
    if has_messages(line["messages"]):
        stats["fullTranscripts"] += 1
    else:
        stats["gapLines"] += 1
    if line["outcome"]["reward"] is not None:
        stats["rewardLabeled"] += 1
