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

from arenad.cell.machine import fold
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
    if q.instance is not None:
        where.append("instance_id = ?")
        params.append(q.instance)
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
