"""A campaign's results table: one row per cell, its result first, filtered, sorted, paged.

What the view's campaign page asks. A cell's *result* is its outcome
(:func:`arenad.cell.outcome.outcome_of`, the report's rule) as a reader wants it first:
``resolved`` (✓), ``unresolved`` (✗, scored), ``not_scored`` (with why: not scored,
failed, interrupted), ``running`` (a run started, no outcome yet) or ``pending`` (no run
yet).

Two answers that must agree (tests/readmodels/test_results.py compares them):
:func:`sql_page` asks the ``cells`` read model (the filter, the order and the page in
SQL: only the page's rows are read whole, never every cell), and :func:`select` pages
rows folded from the log (:func:`row_of`): the log's prefix for ``?as_of=``, or a store
without the read model. :func:`campaign_results` chooses (the page's one read); the rest is
pure but for ``sql_page``.
"""

from __future__ import annotations

import math
import string
from collections.abc import Iterable
from typing import Any, Literal

import aiosqlite
import msgspec

from arenad.cell.machine import CellState, CellStatus, fold
from arenad.cell.outcome import outcome_of
from arenad.readmodels.cells import status_reason
from arenad.recovery.bounds import attempt_usd
from arenad.store.base import EventStore
from arenad.store.sqlite import SqliteEventStore
from events.streams import CELL

__all__ = [
    "PER_PAGE",
    "RESULTS",
    "SORTS",
    "ResultPage",
    "ResultQuery",
    "ResultRow",
    "campaign_results",
    "result_of",
    "row_of",
    "select",
    "sql_page",
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
    # A part of the instance id (case-insensitive for ASCII, as SQL's LIKE).
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
    )


# --------------------------------------------------------------------------- SQL

_S = "CAST(state_json AS TEXT)"
# The outcome rule of arenad/cell/outcome.py in SQL (as migrations/0006 backfills it),
# over a row's columns where they say it (state, scored, verify_pass): the stored state is
# read only for what no column holds.
_OUTCOME = f"""CASE
    WHEN state IN ('submitted', 'materialized', 'running') THEN
        CASE WHEN json_extract({_S}, '$.interrupted') IS NOT NULL
            THEN 'interrupted' ELSE 'pending' END
    WHEN json_extract({_S}, '$.interrupted') IS NOT NULL THEN 'interrupted'
    WHEN scored IS NOT NULL THEN
        CASE
            WHEN scored = 0 THEN 'unresolved'
            WHEN json_type({_S}, '$.verdict.resolved') IN ('true', 'false') THEN
                CASE WHEN json_extract({_S}, '$.verdict.resolved') = 1
                    THEN 'resolved' ELSE 'unresolved' END
            WHEN verify_pass = 1 THEN 'resolved'
            ELSE 'unresolved'
        END
    WHEN json_extract({_S}, '$.failed.classification') = 'infrastructure' THEN 'infra_failed'
    WHEN json_extract({_S}, '$.failed.classification') = 'operator' THEN 'operator_failed'
    WHEN json_extract({_S}, '$.failed.classification') = 'agent' THEN 'unresolved'
    ELSE 'pending'
END"""
_RESULT = f"""CASE {_OUTCOME}
    WHEN 'resolved' THEN 0
    WHEN 'unresolved' THEN CASE WHEN scored = 1 THEN 1 ELSE 2 END
    WHEN 'pending' THEN CASE WHEN state IN ('submitted', 'materialized') THEN 4 ELSE 3 END
    ELSE 2
END"""
_ORDER = {
    "result": _RESULT,
    "instance": "instance_id",
    "arm": "arm",
    "rep": "rep",
    "state": "state",
    "cost": "cost_usd",
    "wall": "wall_s",
    "attempts": "attempt",
    "updated": "updated_at_ms",
}
_ROW = (
    "cell_id, instance_id, arm, rep, attempt, state, paused, cost_usd, wall_s, updated_at_ms,"
    f" {_OUTCOME}, scored,"
    f" json_extract({_S}, '$.failed.error'),"
    f" json_extract({_S}, '$.verified.not_scored_reason'),"
    f" json_extract({_S}, '$.previous_failure')"
)


def _like(text: str) -> str:
    escaped = text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"


async def sql_page(db: aiosqlite.Connection, q: ResultQuery) -> ResultPage:
    """The page ``q`` asks for, from the ``cells`` read model: the matching cells' ids in
    order (an index or the row's own columns; the stored state only where a filter or the
    order needs the result), then the page's rows whole."""
    where = ["campaign = ?"]
    params: list[Any] = [q.campaign]
    if q.state is not None:
        where.append("state = ?")
        params.append(q.state)
    if q.arm is not None:
        where.append("arm = ?")
        params.append(q.arm)
    if q.text:
        where.append("instance_id LIKE ? ESCAPE '\\'")
        params.append(_like(q.text))
    if q.result is not None:
        where.append(f"{_RESULT} = ?")
        params.append(RESULTS.index(q.result))
    clause = " AND ".join(where)
    direction = "DESC" if q.desc else "ASC"
    rows = await db.execute_fetchall(f"SELECT COUNT(*) FROM cells WHERE {clause}", params)
    matching = int(next(iter(rows))[0])
    ids = [
        str(r[0])
        for r in await db.execute_fetchall(
            f"SELECT cell_id FROM cells WHERE {clause}"
            f" ORDER BY {_ORDER[q.sort]} {direction}, instance_id, arm, rep, cell_id"
            " LIMIT ? OFFSET ?",
            [*params, q.per_page, (q.page - 1) * q.per_page],
        )
    ]
    found: dict[str, ResultRow] = {}
    if ids:
        marks = ",".join("?" * len(ids))
        for r in await db.execute_fetchall(
            f"SELECT {_ROW} FROM cells WHERE cell_id IN ({marks})", ids
        ):
            cell_id, instance, arm, rep, attempt, state, paused, cost, wall, updated = r[:10]
            outcome, scored, failed, not_scored, previous = r[10:]
            found[str(cell_id)] = ResultRow(
                cell_id=str(cell_id),
                instance_id=str(instance),
                arm=str(arm),
                rep=int(rep),
                attempt=int(attempt),
                state=str(state),
                paused=bool(paused),
                result=result_of(str(outcome), scored == 1, str(state)),
                why=why_of(str(outcome), status_reason(int(attempt), failed, not_scored, previous)),
                cost_usd=cost,
                wall_s=wall,
                updated_at_ms=int(updated),
            )
    return ResultPage(
        rows=[found[i] for i in ids],
        matching=matching,
        counts=await _counts(db, q.campaign),
        arms=await _arms(db, q.campaign),
    )


async def _counts(db: aiosqlite.Connection, campaign: str) -> dict[str, int]:
    # From the tallies (a few rows per arm), not the cells.
    counts: dict[str, int] = dict.fromkeys(RESULTS, 0)
    for state, outcome, cells, scored in await db.execute_fetchall(
        "SELECT state, outcome, SUM(cells), SUM(scored) FROM arm_tallies"
        " WHERE campaign = ? AND cells > 0 GROUP BY state, outcome",
        (campaign,),
    ):
        if outcome == "unresolved":
            counts["unresolved"] += int(scored)
            counts["not_scored"] += int(cells) - int(scored)
        else:
            counts[result_of(str(outcome), False, str(state))] += int(cells)
    return counts


async def _arms(db: aiosqlite.Connection, campaign: str) -> list[str]:
    rows = await db.execute_fetchall(
        "SELECT DISTINCT arm FROM arm_tallies WHERE campaign = ? AND cells > 0 ORDER BY 1",
        (campaign,),
    )
    return [str(a) for (a,) in rows]


# Cells' streams read per batch when folding (bounded memory for their events).
BATCH = 2000


async def _folded_rows(store: EventStore, campaign: str, as_of: int | None) -> list[ResultRow]:
    # ':' never occurs in a campaign name, so the prefix selects exactly its cells.
    streams = await store.streams(f"{CELL}{campaign}:")
    rows = []
    for i in range(0, len(streams), BATCH):
        groups = await store.read_stream_groups(streams[i : i + BATCH])
        for records in groups.values():
            state = fold([r for r in records if as_of is None or r.seq <= as_of])
            if state is not None:
                rows.append(row_of(state))
        del groups
    return rows


async def campaign_results(
    store: EventStore, q: ResultQuery, as_of: int | None = None
) -> ResultPage | None:
    """The page ``q`` asks for (None: the campaign had no cell then)."""
    if as_of is None and isinstance(store, SqliteEventStore):
        found = await sql_page(store.connection, q)
    else:
        found = select(await _folded_rows(store, q.campaign, as_of), q)
    return found if found.arms else None
