"""Spend figures from captured opencode sessions. Pure: no I/O.

A session's spend is its own row's usage columns (``cost``, ``tokens_input``,
``tokens_output``, ``tokens_reasoning``, ``tokens_cache_read``, ``tokens_cache_write``)
when the row has them — they arrived with opencode 1.15.0 (migration
``20260510033149_session_usage``) — and otherwise the sum over the session's
``step-finish`` parts of ``$.cost`` and ``$.tokens.input|output|reasoning|cache.read|
cache.write``, which is exactly how that migration backfilled the columns. A NULL
column or a non-numeric JSON value counts 0.

opencode does not roll a subagent's spend into its parent's row, so a session *tree*'s
spend sums the root and every descendant (``tree_spend``).

``sup_spend`` gives the seed's ``recoveredSpend`` figures. Decision on which sessions
count: exactly the seed's SQL, ``WHERE directory IN (<worker cwds>)``. Subagent
(child) sessions inherit their parent's directory in opencode, so they *are* counted
and their tokens summed, as the seed's query does; a child session in some other
directory is captured (see ``capture_sessions_by_directory``) but not counted, to keep
the figures equal to the seed's. ``workerTokJournal`` comes from the supervisor
journal, not from the store, and is not computed here.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

from events.capture import AgentSessionCaptured, PartRow

__all__ = [
    "USAGE_COLUMNS",
    "Spend",
    "SpendSource",
    "SupSpend",
    "session_spend",
    "sup_spend",
    "tree_spend",
]

USAGE_COLUMNS = (
    "cost",
    "tokens_input",
    "tokens_output",
    "tokens_reasoning",
    "tokens_cache_read",
    "tokens_cache_write",
)

SpendSource = Literal["columns", "step-finish", "mixed", "none"]


@dataclass(frozen=True, slots=True)
class Spend:
    usd: float
    tokens_input: int
    tokens_output: int
    tokens_reasoning: int
    tokens_cache_read: int
    tokens_cache_write: int
    # Where the figures came from; "mixed" when a tree used both; "none" for no session.
    source: SpendSource

    def __add__(self, other: Spend) -> Spend:
        if self.source == "none":
            source = other.source
        elif other.source in ("none", self.source):
            source = self.source
        else:
            source = "mixed"
        return Spend(
            usd=self.usd + other.usd,
            tokens_input=self.tokens_input + other.tokens_input,
            tokens_output=self.tokens_output + other.tokens_output,
            tokens_reasoning=self.tokens_reasoning + other.tokens_reasoning,
            tokens_cache_read=self.tokens_cache_read + other.tokens_cache_read,
            tokens_cache_write=self.tokens_cache_write + other.tokens_cache_write,
            source=source,
        )


ZERO = Spend(0.0, 0, 0, 0, 0, 0, "none")


def _num(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return 0.0
    return float(value) if math.isfinite(value) else 0.0


def _tokens(value: object) -> int:
    # Token counts are integers; a float one is truncated toward zero.
    if isinstance(value, bool) or not isinstance(value, int | float):
        return 0
    if isinstance(value, float):
        return int(value) if math.isfinite(value) else 0
    return value


def _path(obj: object, *keys: str) -> object:
    for key in keys:
        if not isinstance(obj, dict):
            return None
        obj = obj.get(key)
    return obj


def _step_finish_spend(parts: Iterable[PartRow]) -> Spend:
    usd = 0.0
    t_in = t_out = t_reason = t_read = t_write = 0
    for part in parts:
        try:
            data = json.loads(part.data)
        except (ValueError, RecursionError):
            continue
        if not isinstance(data, dict) or data.get("type") != "step-finish":
            continue
        usd += _num(data.get("cost"))
        t_in += _tokens(_path(data, "tokens", "input"))
        t_out += _tokens(_path(data, "tokens", "output"))
        t_reason += _tokens(_path(data, "tokens", "reasoning"))
        t_read += _tokens(_path(data, "tokens", "cache", "read"))
        t_write += _tokens(_path(data, "tokens", "cache", "write"))
    return Spend(usd, t_in, t_out, t_reason, t_read, t_write, "step-finish")


def session_spend(capture: AgentSessionCaptured) -> Spend:
    """One session's own spend: the usage columns if the row has them, else step-finish."""
    row = capture.row
    if all(column in row for column in USAGE_COLUMNS):
        return Spend(
            usd=_num(row["cost"]),
            tokens_input=_tokens(row["tokens_input"]),
            tokens_output=_tokens(row["tokens_output"]),
            tokens_reasoning=_tokens(row["tokens_reasoning"]),
            tokens_cache_read=_tokens(row["tokens_cache_read"]),
            tokens_cache_write=_tokens(row["tokens_cache_write"]),
            source="columns",
        )
    return _step_finish_spend(capture.parts)


def tree_spend(captures: Sequence[AgentSessionCaptured], root_session_id: str) -> Spend:
    """The spend of ``root_session_id`` and every descendant among ``captures``."""
    children: dict[str | None, list[AgentSessionCaptured]] = {}
    by_id: dict[str, AgentSessionCaptured] = {}
    for capture in captures:
        by_id.setdefault(capture.session_id, capture)
        children.setdefault(capture.parent_id, []).append(capture)
    total = ZERO
    seen: set[str] = set()
    stack = [by_id[root_session_id]] if root_session_id in by_id else []
    while stack:
        capture = stack.pop()
        if capture.session_id in seen:
            continue
        seen.add(capture.session_id)
        total = total + session_spend(capture)
        stack.extend(children.get(capture.session_id, ()))
    return total


@dataclass(frozen=True, slots=True)
class SupSpend:
    """The seed's ``recoveredSpend`` store figures (None = the store was unavailable).

    ``worker_cwds`` → ``workerCwds`` (deduplicated, first-seen order),
    ``worker_sessions`` → ``workerSessions``, ``worker_tok_in`` → ``workerTokIn``
    (Σ tokens_input), ``worker_tok_out`` → ``workerTokOut`` (Σ tokens_output +
    tokens_reasoning), ``worker_tok_sqlite`` → ``workerTokSqlite`` (in + out).
    """

    worker_cwds: list[str]
    worker_sessions: int | None
    worker_tok_in: int | None
    worker_tok_out: int | None
    worker_tok_sqlite: int | None


def sup_spend(
    captures: Sequence[AgentSessionCaptured] | None, worker_cwds: Iterable[str]
) -> SupSpend:
    """Figures over the captured sessions whose ``directory`` is one of ``worker_cwds``.

    Pass ``None`` when the store was unavailable: the figures are then ``None``, never 0.
    """
    cwds = list(dict.fromkeys(worker_cwds))
    if captures is None:
        return SupSpend(cwds, None, None, None, None)
    wanted = set(cwds)
    seen: set[str] = set()
    sessions = tok_in = tok_out = 0
    for capture in captures:
        if capture.directory not in wanted or capture.session_id in seen:
            continue
        seen.add(capture.session_id)
        spend = session_spend(capture)
        sessions += 1
        tok_in += spend.tokens_input
        tok_out += spend.tokens_output + spend.tokens_reasoning
    return SupSpend(cwds, sessions, tok_in, tok_out, tok_in + tok_out)
