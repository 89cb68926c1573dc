"""Spend figures from captured opencode sessions. Pure: no I/O.

A session's spend is its own row's usage columns (``cost``, ``tokens_input``,
``tokens_output``, ``tokens_reasoning``, ``tokens_cache_read``, ``tokens_cache_write``)
when the row has them — they arrived with opencode 1.15.0 (migration
``20260510033149_session_usage``) — and otherwise the sum over the session's
``step-finish`` parts of ``$.cost`` and ``$.tokens.input|output|reasoning|cache.read|
cache.write``, which is exactly how that migration backfilled the columns. A NULL
column or a non-numeric JSON value counts 0. A number out of bounds (not finite, negative,
past the per-session ceiling of :mod:`arenad.recovery.bounds`) is never added: its figure
is unknown (``Spend.unknown``), and the value is kept as evidence (``Spend.rejected``).

opencode does not roll a subagent's spend into its parent's row, so a session *tree*'s
spend sums the root and every descendant (``tree_spend``).

``sup_spend`` gives the reference's ``recoveredSpend`` figures. Decision on which sessions
count: exactly the reference's SQL, ``WHERE directory IN (<worker cwds>)``. Subagent
(child) sessions inherit their parent's directory in opencode, so they *are* counted
and their tokens summed, as the reference's query does; a child session in some other
directory is captured (see ``capture_sessions_by_directory``) but not counted, to keep
the figures equal to the reference's. ``workerTokJournal`` comes from the supervisor
journal, not from the store, and is not computed here.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Literal

from arenad.recovery.bounds import MAX_SESSION_TOKENS, MAX_SESSION_USD, out_of_bounds, rejected
from events.capture import AgentSessionCaptured, PartRow
from events.cell import RejectedFigure

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
    # The figures (attribute names) some session holds out of bounds: unknown, not the sum.
    unknown: frozenset[str] = frozenset()
    # Those values as read, the evidence (arenad.recovery.bounds).
    rejected: tuple[RejectedFigure, ...] = ()

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
            unknown=self.unknown | other.unknown,
            rejected=self.rejected + other.rejected,
        )


ZERO = Spend(0.0, 0, 0, 0, 0, 0, "none")

# Spend attribute -> (session column, step-finish path, ceiling).
_FIGURES: dict[str, tuple[str, tuple[str, ...], float]] = {
    "usd": ("cost", ("cost",), MAX_SESSION_USD),
    "tokens_input": ("tokens_input", ("tokens", "input"), MAX_SESSION_TOKENS),
    "tokens_output": ("tokens_output", ("tokens", "output"), MAX_SESSION_TOKENS),
    "tokens_reasoning": ("tokens_reasoning", ("tokens", "reasoning"), MAX_SESSION_TOKENS),
    "tokens_cache_read": ("tokens_cache_read", ("tokens", "cache", "read"), MAX_SESSION_TOKENS),
    "tokens_cache_write": (
        "tokens_cache_write",
        ("tokens", "cache", "write"),
        MAX_SESSION_TOKENS,
    ),
}


def _path(obj: object, *keys: str) -> object:
    for key in keys:
        if not isinstance(obj, dict):
            return None
        obj = obj.get(key)
    return obj


class _Figures:
    """One session's figures as they are read: each value checked against its bound."""

    def __init__(self, session: str) -> None:
        self.session = session
        self.values: dict[str, float | int] = dict.fromkeys(_FIGURES, 0)
        self.unknown: set[str] = set()
        self.rejected: list[RejectedFigure] = []

    def add(self, attr: str, value: object, where: str, field: str) -> None:
        # A NULL column or a value that is not a number counts 0 (opencode's backfill).
        if isinstance(value, bool) or not isinstance(value, int | float):
            return
        reason = out_of_bounds(value, _FIGURES[attr][2])
        if reason is not None:
            self.reject(attr, value, where, field, reason)
            return
        if attr != "usd" and isinstance(value, float):
            value = int(value)  # token counts are integers; a float one is truncated
        self.values[attr] += value

    def reject(self, attr: str, value: object, where: str, field: str, reason: str) -> None:
        self.unknown.add(attr)
        self.rejected.append(rejected(where, field, value, reason, "store"))

    def spend(self, source: SpendSource) -> Spend:
        # A sum of steps within their bounds can still pass the session's.
        for attr, (column, _, ceiling) in _FIGURES.items():
            total = self.values[attr]
            if attr not in self.unknown and total > ceiling:
                self.reject(
                    attr,
                    total,
                    self.session,
                    f"{column} (sum of its steps)",
                    f"over the ceiling of {ceiling:g}",
                )
        v = {a: 0 if a in self.unknown else self.values[a] for a in _FIGURES}
        return Spend(
            usd=float(v["usd"]),
            tokens_input=int(v["tokens_input"]),
            tokens_output=int(v["tokens_output"]),
            tokens_reasoning=int(v["tokens_reasoning"]),
            tokens_cache_read=int(v["tokens_cache_read"]),
            tokens_cache_write=int(v["tokens_cache_write"]),
            source=source,
            unknown=frozenset(self.unknown),
            rejected=tuple(self.rejected),
        )


def _step_finish_spend(parts: Iterable[PartRow], session: str) -> Spend:
    figures = _Figures(f"session {session}")
    for part in parts:
        try:
            data = json.loads(part.data)
        except (ValueError, RecursionError):
            continue
        if not isinstance(data, dict) or data.get("type") != "step-finish":
            continue
        where = f"session {session} part {part.id}"
        for attr, (_, path, _) in _FIGURES.items():
            figures.add(attr, _path(data, *path), where, ".".join(path))
    return figures.spend("step-finish")


def session_spend(capture: AgentSessionCaptured) -> Spend:
    """One session's own spend: the usage columns if the row has them, else step-finish.
    A value out of bounds makes its figure unknown (``Spend.unknown``), kept as evidence."""
    row = capture.row
    if all(column in row for column in USAGE_COLUMNS):
        figures = _Figures(f"session {capture.session_id}")
        for attr, (column, _, _) in _FIGURES.items():
            figures.add(attr, row[column], figures.session, column)
        return figures.spend("columns")
    spend = _step_finish_spend(capture.parts, capture.session_id)
    if capture.omitted_parts:
        # Parts past the capture's bound may be steps: the sums over the kept ones are not
        # the session's.
        gap = rejected(
            f"session {capture.session_id}",
            "step-finish parts",
            f"{capture.omitted_parts} parts not kept",
            "past the capture's bound: the session's sums are unknown",
            "store",
        )
        return replace(spend, unknown=frozenset(_FIGURES), rejected=(*spend.rejected, gap))
    return spend


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
    """The reference's ``recoveredSpend`` store figures (None = the store was unavailable).

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

    Pass ``None`` when the store was unavailable: the figures are then ``None``, never 0
    (unless there are no worker cwds: then there is nothing to count, and they are 0).
    """
    cwds = list(dict.fromkeys(worker_cwds))
    if not cwds:
        # No worker ever started: nothing to recover, known to be nothing. The reference
        # returns zeros here without opening the store (finding 9), whatever the store is.
        return SupSpend(cwds, 0, 0, 0, 0)
    if captures is None:
        return SupSpend(cwds, None, None, None, None)
    wanted = set(cwds)
    seen: set[str] = set()
    sessions = 0
    total = ZERO
    for capture in captures:
        if capture.directory not in wanted or capture.session_id in seen:
            continue
        seen.add(capture.session_id)
        total = total + session_spend(capture)
        sessions += 1
    # A figure out of bounds in any counted session leaves the sums it feeds unknown.
    tok_in = None if "tokens_input" in total.unknown else total.tokens_input
    tok_out = (
        None
        if {"tokens_output", "tokens_reasoning"} & total.unknown
        else total.tokens_output + total.tokens_reasoning
    )
    both = None if tok_in is None or tok_out is None else tok_in + tok_out
    return SupSpend(cwds, sessions, tok_in, tok_out, both)
