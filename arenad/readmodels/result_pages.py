"""Reads of a campaign's results pages (:mod:`arenad.readmodels.results`).

:func:`sql_page` asks the ``cells`` read model: the filter, the order and the page in SQL;
only the page's rows are read whole, never every cell, and the counts come from the
tallies. :func:`campaign_results` is the page's one read: that, or, as the log stood after
an event (``?as_of=``) or on a store without the read model, the campaign's cell streams
folded (cut at that event) and paged by :func:`arenad.readmodels.results.select`.
"""

from __future__ import annotations

from typing import Any

import aiosqlite

from arenad.cell.machine import CellState, apply, fold
from arenad.readmodels.cells import status_reason
from arenad.readmodels.results import (
    RESULTS,
    ResultPage,
    ResultQuery,
    ResultRow,
    result_of,
    row_of,
    select,
    why_of,
)
from arenad.store.base import EventStore
from arenad.store.sqlite import SqliteEventStore
from events.streams import CELL

__all__ = ["campaign_results", "sql_page"]


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
# A cell's result (its index in RESULTS) for filters and the order, over every cell of a
# campaign: the rule above, with the stored state parsed only where the row's columns and
# two byte tests cannot decide, each exact. `interrupted` is CellState's last field, so a
# state whose encoding ends `"interrupted":null}` was not interrupted (else: parsed); a
# state with no `"verdict":{` anywhere has no verdict (else: parsed). Only a CellFailed
# sets `failed`, and the cell is then in state 'failed' (and any failure without a verdict
# is not scored); `verified` is in the `scored` column.
_NOT_INTERRUPTED = "substr(state_json, -19) = CAST('\"interrupted\":null}' AS BLOB)"
_NO_VERDICT = "instr(state_json, CAST('\"verdict\":{' AS BLOB)) = 0"
_RESULT = f"""CASE
    WHEN NOT {_NOT_INTERRUPTED} AND json_extract({_S}, '$.interrupted') IS NOT NULL THEN 2
    WHEN scored = 1 THEN
        CASE
            WHEN NOT {_NO_VERDICT}
                AND json_type({_S}, '$.verdict.resolved') IN ('true', 'false') THEN
                CASE WHEN json_extract({_S}, '$.verdict.resolved') = 1 THEN 0 ELSE 1 END
            WHEN verify_pass = 1 THEN 0
            ELSE 1
        END
    WHEN scored = 0 THEN 2
    WHEN state = 'failed' THEN 2
    WHEN state IN ('submitted', 'materialized') THEN 4
    ELSE 3
END"""
# What each result implies of a row's columns, read off _RESULT's branches (not scored,
# which an interruption can make of any row, implies none).
_IMPLIED = {
    0: "scored = 1",
    1: "scored = 1",
    3: "scored IS NULL AND state NOT IN ('submitted', 'materialized', 'failed')",
    4: "state IN ('submitted', 'materialized')",
}
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
    if q.instance is not None:
        where.append("instance_id = ?")
        params.append(q.instance)
    if q.text:
        where.append("instance_id LIKE ? ESCAPE '\\'")
        params.append(_like(q.text))
    if q.result is not None:
        index = RESULTS.index(q.result)
        # A condition on the row's columns that the result implies, first: the rows it
        # rules out are decided without reading their stored state.
        if index in _IMPLIED:
            where.append(_IMPLIED[index])
        where.append(f"{_RESULT} = ?")
        params.append(index)
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
    counts, cost_units, costed = await _counts(db, q.campaign)
    return ResultPage(
        rows=[found[i] for i in ids],
        matching=matching,
        counts=counts,
        arms=await _arms(db, q.campaign),
        cost_units=cost_units,
        costed=costed,
    )


async def _counts(db: aiosqlite.Connection, campaign: str) -> tuple[dict[str, int], int, int]:
    """(cells by result, known cost units, costed cells): from the tallies (a few rows
    per arm), not the cells."""
    counts: dict[str, int] = dict.fromkeys(RESULTS, 0)
    cost_units = costed = 0
    for state, outcome, cells, scored, known, units in await db.execute_fetchall(
        "SELECT state, outcome, SUM(cells), SUM(scored), SUM(costed), SUM(cost_units)"
        " FROM arm_tallies WHERE campaign = ? AND cells > 0 GROUP BY state, outcome",
        (campaign,),
    ):
        cost_units += int(units)
        costed += int(known)
        if outcome == "unresolved":
            counts["unresolved"] += int(scored)
            counts["not_scored"] += int(cells) - int(scored)
        else:
            counts[result_of(str(outcome), False, str(state))] += int(cells)
    return counts, cost_units, costed


async def _arms(db: aiosqlite.Connection, campaign: str) -> list[str]:
    rows = await db.execute_fetchall(
        "SELECT DISTINCT arm FROM arm_tallies WHERE campaign = ? AND cells > 0 ORDER BY 1",
        (campaign,),
    )
    return [str(a) for (a,) in rows]


# Events (or cells' streams) read per batch when folding (bounded memory for them).
BATCH = 2000


async def _folded_rows(store: EventStore, campaign: str, as_of: int | None) -> list[ResultRow]:
    # ':' never occurs in a campaign name, so the prefix selects exactly its cells.
    prefix = f"{CELL}{campaign}:"
    if as_of is not None:
        # The log's prefix in order, read up to the event and no further: an early moment
        # of a long log reads little.
        states: dict[str, CellState] = {}
        async for batch in store.read_batches(0, BATCH):
            for r in batch:
                if r.seq > as_of:
                    return [row_of(s) for s in states.values()]
                if r.stream.startswith(prefix):
                    states[r.stream] = apply(states.get(r.stream), r.event, r.recorded_at_ms)
        return [row_of(s) for s in states.values()]
    streams = await store.streams(prefix)
    rows = []
    for i in range(0, len(streams), BATCH):
        groups = await store.read_stream_groups(streams[i : i + BATCH])
        for records in groups.values():
            state = fold(records)
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
