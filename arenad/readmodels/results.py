"""A campaign's results table: one row per cell, its result first, filtered, sorted, paged.

What the view's campaign page asks. A cell's *result* is its outcome
(:func:`arenad.cell.outcome.outcome_of`, the report's rule) as a reader wants it first:
``resolved`` (✓), ``unresolved`` (✗, scored), ``not_scored`` (with why: not scored,
failed, interrupted), ``running`` (a run started, no outcome yet) or ``pending`` (no run
yet).

Pure: the rows, the result rule and :func:`select`, which pages rows folded from the log
(:func:`row_of`). Its SQL twin over the ``cells`` read model is
:func:`arenad.readmodels.result_pages.sql_page`; the two must agree
(tests/readmodels/test_results.py compares them).
"""

from __future__ import annotations

import math
import string
from collections.abc import Iterable
from typing import Any, Literal

import msgspec

from arenad.budget.spend import units, usd
from arenad.cell.machine import CellState, CellStatus
from arenad.cell.outcome import outcome_of
from arenad.readmodels.cells import status_reason
from arenad.recovery.bounds import attempt_usd

__all__ = [
    "PER_PAGE",
    "RESULTS",
    "SORTS",
    "ResultPage",
    "ResultQuery",
    "ResultRow",
    "result_of",
    "row_of",
    "select",
    "why_of",
]

Result = Literal["resolved", "unresolved", "not_scored", "running", "pending"]
RESULTS: tuple[str, ...] = ("resolved", "unresolved", "not_scored", "running", "pending")
# A page's rows at most: a page's size does not grow with the campaign's.
PER_PAGE = 100
# The columns a page sorts by (the query string's ``sort=``).
SORTS: tuple[str, ...] = (
    "result",
    "instance",
    "arm",
    "rep",
    "state",
    "cost",
    "wall",
    "attempts",
    "updated",
)
_NOT_STARTED = frozenset({str(CellStatus.SUBMITTED), str(CellStatus.MATERIALIZED)})
# SQL's LIKE folds the case of ASCII letters only; so does the fold's filter.
_ASCII_LOWER = str.maketrans(string.ascii_uppercase, string.ascii_lowercase)
_WHY = {
    "infra_failed": "infrastructure failure",
    "operator_failed": "operator failure",
    "interrupted": "interrupted",
}


class ResultQuery(msgspec.Struct, frozen=True, kw_only=True):
    """What the page asks: filters (None: any), the order, the page (1-based)."""

    campaign: str
    state: str | None = None
    result: str | None = None
    arm: str | None = None
    # One instance exactly (the report's links), and a part of the instance id
    # (case-insensitive for ASCII, as SQL's LIKE).
    instance: str | None = None
    text: str | None = None
    sort: str = "instance"
    desc: bool = False
    page: int = 1
    per_page: int = PER_PAGE


class ResultRow(msgspec.Struct, frozen=True, kw_only=True):
    cell_id: str
    instance_id: str
    arm: str
    rep: int
    attempt: int
    state: str
    paused: bool
    result: str
    # Why a result is not scored (or a retry's cause); None: nothing to say.
    why: str | None
    cost_usd: float | None
    wall_s: float | None
    updated_at_ms: int


class ResultPage(msgspec.Struct, frozen=True, kw_only=True):
    rows: list[ResultRow]
    # Cells matching the filters (all pages), and the campaign's cells by result.
    matching: int
    counts: dict[str, int]
    # The campaign's arms (for the arm filter).
    arms: list[str]
    # The known cost of the cells' current attempts (pico-USD, exact in any order), over
    # ``costed`` cells: the tallies' figure, not every run's (the overview's).
    cost_units: int = 0
    costed: int = 0

    @property
    def cost_usd(self) -> float:
        return usd(self.cost_units)

    @property
    def pages(self) -> int:
        return max(1, math.ceil(self.matching / PER_PAGE))


def result_of(outcome: str, scored: bool, state: str) -> Result:
    """The reader's result of an outcome (:func:`outcome_of`) in a state. Pure."""
    if outcome == "resolved":
        return "resolved"
    if outcome == "pending":
        return "pending" if state in _NOT_STARTED else "running"
    if outcome == "unresolved" and scored:
        return "unresolved"
    return "not_scored"


def why_of(outcome: str, reason: str | None) -> str | None:
    """Why a result is what it is, one line: the outcome's kind, then the cell's reason."""
    kind = _WHY.get(outcome)
    if kind is None:
        return reason
    return f"{kind}: {reason}" if reason else kind


def row_of(state: CellState) -> ResultRow:
    """A folded cell's row. Pure."""
    outcome, scored = outcome_of(state)
    spend = state.recovered.spend if state.recovered is not None else None
    reason = status_reason(
        state.attempt,
        state.failed.error if state.failed is not None else None,
        state.verified.not_scored_reason if state.verified is not None else None,
        state.previous_failure,
    )
    return ResultRow(
        cell_id=state.cell_id,
        instance_id=state.spec.instance.instance_id,
        arm=state.spec.arm.name,
        rep=state.spec.rep,
        attempt=state.attempt,
        state=str(state.status),
        paused=state.paused,
        result=result_of(outcome, scored, str(state.status)),
        why=why_of(outcome, reason),
        cost_usd=attempt_usd(spend.cost_usd) if spend is not None else None,
        wall_s=state.wall_s,
        updated_at_ms=state.updated_at_ms,
    )


def _key(sort: str, row: ResultRow) -> tuple[Any, ...]:
    # Unknown (None) sorts first ascending, as SQLite's NULLs do.
    value: Any = {
        "result": RESULTS.index(row.result),
        "instance": row.instance_id,
        "arm": row.arm,
        "rep": row.rep,
        "state": row.state,
        "cost": row.cost_usd,
        "wall": row.wall_s,
        "attempts": row.attempt,
        "updated": row.updated_at_ms,
    }[sort]
    return (value is not None, value if value is not None else 0)


def _matches(q: ResultQuery, row: ResultRow) -> bool:
    return (
        q.state in (None, row.state)
        and q.result in (None, row.result)
        and q.arm in (None, row.arm)
        and q.instance in (None, row.instance_id)
        and (
            not q.text or q.text.translate(_ASCII_LOWER) in row.instance_id.translate(_ASCII_LOWER)
        )
    )


def select(rows: Iterable[ResultRow], q: ResultQuery) -> ResultPage:
    """The page of ``rows`` (a campaign's folded cells) that ``q`` asks for. Pure."""
    every = list(rows)
    counts: dict[str, int] = dict.fromkeys(RESULTS, 0)
    for r in every:
        counts[r.result] += 1
    chosen = [r for r in every if _matches(q, r)]
    # The identity breaks ties, ascending whatever the order: a stable page.
    chosen.sort(key=lambda r: (r.instance_id, r.arm, r.rep, r.cell_id))
    chosen.sort(key=lambda r: _key(q.sort, r), reverse=q.desc)
    start = (q.page - 1) * q.per_page
    return ResultPage(
        rows=chosen[start : start + q.per_page],
        matching=len(chosen),
        counts=counts,
        arms=sorted({r.arm for r in every}),
        cost_units=sum(units(r.cost_usd) for r in every if r.cost_usd is not None),
        costed=sum(r.cost_usd is not None for r in every),
    )
