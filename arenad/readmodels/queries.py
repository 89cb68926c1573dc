"""Reads of the read models (SQL lives here, not in views or the machine)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import aiosqlite

from arenad.cell.machine import CellState
from arenad.readmodels.cells import (
    EXTRA_PATHS,
    STATUS_COLUMNS,
    decode_state,
    spend_extras,
    status_reason,
)
from arenad.readmodels.tallies import ArmTally, InstanceTally, Tallies

_STATUS_COLUMNS = ", ".join(STATUS_COLUMNS)
# What the reason is made of, read out of the state (no column of its own: no migration).
_STATE_TEXT = "CAST(state_json AS TEXT)"
_REASON_PARTS = (
    f"json_extract({_STATE_TEXT}, '$.failed.error'),"
    f" json_extract({_STATE_TEXT}, '$.verified.not_scored_reason'),"
    f" json_extract({_STATE_TEXT}, '$.previous_failure')"
)

# The spend extras of a row (cache tokens, a supervisor's two costs), likewise.
_EXTRA_PARTS = ", ".join(f"json_extract({_STATE_TEXT}, '{p}')" for p in EXTRA_PATHS)


async def state_counts(db: aiosqlite.Connection) -> list[tuple[str, int]]:
    # From the tallies (a few rows per campaign and arm), not a scan of every cell.
    rows = await db.execute_fetchall(
        "SELECT state, SUM(cells) FROM arm_tallies GROUP BY state HAVING SUM(cells) > 0 ORDER BY 1"
    )
    return [(str(s), int(n)) for s, n in rows]


async def tallies(db: aiosqlite.Connection) -> Tallies:
    arms = await db.execute_fetchall(
        "SELECT campaign, arm, state, outcome, cells, paused, scored, costed, cost_units,"
        " last_update_ms FROM arm_tallies WHERE cells > 0 ORDER BY 1, 2, 3, 4"
    )
    instances = await db.execute_fetchall(
        "SELECT campaign, instance_id, arm, outcome, cells FROM instance_tallies"
        " WHERE cells > 0 ORDER BY 1, 2, 3, 4"
    )
    return Tallies(
        arms=[
            ArmTally(
                campaign=c,
                arm=a,
                state=s,
                outcome=o,
                cells=n,
                paused=p,
                scored=sc,
                costed=k,
                cost_units=u,
                last_update_ms=t,
            )
            for c, a, s, o, n, p, sc, k, u, t in arms
        ],
        instances=[
            InstanceTally(campaign=c, instance_id=i, arm=a, outcome=o, cells=n)
            for c, i, a, o, n in instances
        ],
    )


async def cell_rows(
    db: aiosqlite.Connection,
    campaign: str | None = None,
    limit: int | None = None,
    state: str | None = None,
) -> list[dict[str, Any]]:
    sql = f"SELECT {_STATUS_COLUMNS}, {_REASON_PARTS}, {_EXTRA_PARTS} FROM cells"
    where: list[str] = []
    params: list[Any] = []
    if campaign is not None:
        where.append("campaign = ?")
        params.append(campaign)
    if state is not None:
        where.append("state = ?")
        params.append(state)
    if where:
        sql += " WHERE " + " AND ".join(where)
    sql += " ORDER BY campaign, instance_id, arm, rep"
    if limit is not None:
        sql += " LIMIT ?"
        params.append(limit)
    cursor = await db.execute(sql, params)
    rows = await cursor.fetchall()
    await cursor.close()
    out = []
    for row in rows:
        named = dict(zip(STATUS_COLUMNS, row[: len(STATUS_COLUMNS)], strict=True))
        failed, not_scored, previous = row[len(STATUS_COLUMNS) : len(STATUS_COLUMNS) + 3]
        named["reason"] = status_reason(int(named["attempt"]), failed, not_scored, previous)
        named.update(
            spend_extras(str(named["arm_kind"]), named["cost_usd"], *row[len(STATUS_COLUMNS) + 3 :])
        )
        out.append(named)
    return out


async def cell_state(db: aiosqlite.Connection, cell_id: str) -> CellState | None:
    rows = list(
        await db.execute_fetchall("SELECT state_json FROM cells WHERE cell_id = ?", (cell_id,))
    )
    return decode_state(rows[0][0]) if rows else None


async def cell_states(db: aiosqlite.Connection, cell_ids: Sequence[str]) -> dict[str, CellState]:
    found: dict[str, CellState] = {}
    for i in range(0, len(cell_ids), 500):
        chunk = list(cell_ids[i : i + 500])
        marks = ",".join("?" * len(chunk))
        for cell_id, blob in await db.execute_fetchall(
            f"SELECT cell_id, state_json FROM cells WHERE cell_id IN ({marks})", chunk
        ):
            found[str(cell_id)] = decode_state(blob)
    return found


async def campaign_state_counts(
    db: aiosqlite.Connection,
) -> list[tuple[str, str, int, int]]:
    # The latest update is the campaign's (a max over all its keys, states left included):
    # a tally's maximum can only grow, and a cell leaving a key moves to a later time.
    rows = await db.execute_fetchall(
        "SELECT t.campaign, t.state, SUM(t.cells), c.last FROM arm_tallies AS t"
        " JOIN (SELECT campaign, MAX(last_update_ms) AS last FROM arm_tallies"
        " GROUP BY campaign) AS c ON c.campaign = t.campaign"
        " GROUP BY t.campaign, t.state HAVING SUM(t.cells) > 0 ORDER BY 1, 2"
    )
    return [(str(c), str(s), int(n), int(u)) for c, s, n, u in rows]


# Literal, not bound parameters: SQLite uses the partial index cells_runnable
# (migrations/0003) only when the query repeats its WHERE clause term for term.
RUNNABLE_WHERE = "state NOT IN ('failed', 'recovered') AND paused = 0"


async def runnable_cells(
    db: aiosqlite.Connection,
    *,
    exclude: Sequence[str] = (),
    limit: int | None = None,
    hold_campaigns: Sequence[str] = (),
    only_campaigns: Sequence[str] = (),
) -> list[tuple[str, str]]:
    """(cell_id, campaign) of cells a daemon could move on (not terminal, not paused),
    oldest first, but those in ``exclude`` (already running), at most ``limit``; of the
    ``hold_campaigns``, only cells whose run started; only of ``only_campaigns`` if any."""
    sql = f"SELECT cell_id, campaign FROM cells WHERE {RUNNABLE_WHERE}"
    params: list[object] = []
    if only_campaigns:
        sql += f" AND campaign IN ({','.join('?' * len(only_campaigns))})"
        params += list(only_campaigns)
    if exclude:
        sql += f" AND cell_id NOT IN ({','.join('?' * len(exclude))})"
        params += list(exclude)
    if hold_campaigns:
        sql += (
            f" AND NOT (campaign IN ({','.join('?' * len(hold_campaigns))})"
            " AND state IN ('submitted', 'materialized'))"
        )
        params += list(hold_campaigns)
    sql += " ORDER BY submitted_at_ms, cell_id"
    if limit is not None:
        sql += " LIMIT ?"
        params.append(limit)
    rows = await db.execute_fetchall(sql, params)
    return [(str(c), str(k)) for c, k in rows]
