"""Application services behind the CLI: one async function per command.

They open the store, do one thing, and return data; cli.py prints it.
"""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncGenerator
from pathlib import Path
from typing import Any

import aiosqlite
import msgspec

from arenad.app.campaigns import campaign_figures
from arenad.cell.machine import CellStatus
from arenad.cell.overdue import Overdue, overdue
from arenad.errors import StoreError, UserError
from arenad.home import Home, open_store, require_initialized
from arenad.readmodels.tallies import ArmOutcomes, arm_outcomes
from arenad.readmodels.view import cells_view
from arenad.store.anchor import read_anchor, write_anchor
from arenad.store.chain import GENESIS, ChainReport
from arenad.store.migrations import MigrationStatus, apply_migrations, migration_status
from events.base import Recorded
from events.streams import attempt_prefixes, cell_stream


async def init_home(home: Home) -> list[str]:
    """Create the home and the store; apply migrations. Returns the names applied."""
    home.root.mkdir(parents=True, exist_ok=True)
    db = await aiosqlite.connect(home.db_path, isolation_level=None)
    try:
        await db.execute("PRAGMA journal_mode = WAL")
        return await apply_migrations(db)
    except sqlite3.DatabaseError as exc:
        raise StoreError(f"cannot use {home.db_path} as an event store: {exc}") from exc
    finally:
        await db.close()


async def list_migrations(home: Home) -> list[MigrationStatus]:
    require_initialized(home)
    # Opened read-only: `migrate --list` must not write, not even the bookkeeping table.
    # as_uri() percent-encodes the path: a raw '?' or '#' in it would otherwise end the
    # path early and open (and create) some other file.
    db = await aiosqlite.connect(f"{home.db_path.as_uri()}?mode=ro", uri=True)
    try:
        return await migration_status(db)
    except sqlite3.DatabaseError as exc:
        raise StoreError(f"cannot read {home.db_path} as an event store: {exc}") from exc
    finally:
        await db.close()


async def migrate(home: Home) -> list[str]:
    require_initialized(home)
    return await init_home(home)


# The states a cell passes through while a daemon works on it (submitted waits for a slot).
_TRANSIENT = frozenset({"materialized", "running", "completed", "timedOut", "aborted", "verified"})


# What `status --state` takes: the cell machine's states.
STATE_NAMES: tuple[str, ...] = tuple(s.value for s in CellStatus)


async def status(
    home: Home,
    campaign: str | None = None,
    now_ms: int | None = None,
    *,
    state: str | None = None,
    limit: int | None = None,
    summary: bool = False,
) -> dict[str, Any]:
    """Counts and rows; with ``now_ms`` (the caller's time, taken at the edge) also the
    cells overdue in a transient state at that time (:func:`arenad.cell.overdue.overdue`).
    ``state`` and ``limit`` narrow the rows (``more``: rows past the limit exist);
    ``summary``: no rows at all, only the counts per state and per campaign (one GROUP BY,
    fast at any size)."""
    if state is not None and state not in STATE_NAMES:
        raise UserError(f"--state must be one of {', '.join(STATE_NAMES)}, not {state!r}")
    if limit is not None and limit < 1:
        raise UserError(f"--limit must be at least 1, not {limit}")
    late: list[Overdue] = []
    async with open_store(home) as store:
        cells = cells_view(store)
        counts = await cells.counts()
        rows: list[dict[str, Any]] = []
        if not summary:
            rows = await cells.rows(campaign, None if limit is None else limit + 1, state)
        more = limit is not None and len(rows) > limit
        rows = rows[:limit] if limit is not None else rows
        if now_ms is not None:
            for row in rows:
                if row["state"] not in _TRANSIENT or row["paused"]:
                    continue
                folded = await cells.state(row["cell_id"])
                found = overdue(folded, now_ms) if folded is not None else None
                if found is not None:
                    late.append(found)
        # Each campaign's spend against its cap (the spend and budget folds): a fold over
        # the log's spend events, which --summary skips (`arenad campaigns` has it).
        figures = [] if summary else await campaign_figures(store, campaign)
        by_campaign: dict[str, dict[str, int]] = {}
        by_arm: list[ArmOutcomes] = []
        if summary:
            for name, cell_state, count, _ in await cells.campaign_counts():
                if campaign in (None, name):
                    by_campaign.setdefault(name, {})[cell_state] = count
            # Each arm's outcomes, from the tallies (a few rows per arm, at any size).
            by_arm = [
                a for a in arm_outcomes(await cells.tallies()) if campaign in (None, a.campaign)
            ]
    return {
        "by_campaign": by_campaign,
        "by_arm": by_arm,
        "counts": dict(counts),
        "count_list": counts,
        "cells": rows,
        "campaigns": figures,
        "overdue": late,
        "more": more,
    }


async def history(home: Home, cell_id: str) -> list[Recorded]:
    async with open_store(home) as store:
        recorded = await store.read_stream(cell_stream(cell_id))
        if not recorded:
            raise UserError(f"no cell {cell_id!r} in {home.db_path} (see `arenad status`)")
        # The cell's other streams (ingestion, captures) belong to its audit trail too.
        ingest, capture = attempt_prefixes(cell_id)
        others = await store.streams(ingest) + await store.streams(capture)
        recorded += await store.read_streams(others)
    recorded.sort(key=lambda r: r.seq)
    return recorded


async def events(home: Home, after: int, follow: bool) -> AsyncGenerator[Recorded, None]:
    """Every event after ``after`` (then new ones, when following). It holds the store
    open: a caller that stops early closes it (``contextlib.aclosing``)."""
    async with open_store(home) as store:
        source = store.follow(after) if follow else store.read_all(after)
        async for recorded in source:
            yield recorded


class LogVerification(msgspec.Struct, frozen=True, kw_only=True):
    report: ChainReport
    # What the anchor file said or became (None without --anchor, or when the walk failed).
    anchor: str | None = None


async def verify_log(home: Home, anchor_path: Path | None = None) -> LogVerification:
    """Walk the whole chain; with an anchor file, check the log still holds the head the
    file records (truncation plus a rewritten head), then set the file to today's head."""
    anchor = read_anchor(anchor_path) if anchor_path is not None else None
    async with open_store(home) as store:
        report = await store.verify_chain()
        if anchor_path is None or not report.ok:
            return LogVerification(report=report)
        head_seq, head_hash = report.head_seq or 0, report.head_hash or GENESIS
        if anchor is not None:
            if head_seq < anchor.seq:
                return LogVerification(
                    report=ChainReport(
                        ok=False,
                        rows=report.rows,
                        first_bad_seq=head_seq + 1,
                        problem=f"the log ends at row {head_seq} but the anchor {anchor_path}"
                        f" records row {anchor.seq} (rows were deleted from the end and the"
                        " head rewritten)",
                    )
                )
            if anchor.seq > 0 and await store.hash_at(anchor.seq) != anchor.digest:
                return LogVerification(
                    report=ChainReport(
                        ok=False,
                        rows=report.rows,
                        first_bad_seq=anchor.seq,
                        problem=f"row {anchor.seq} is not the row the anchor {anchor_path}"
                        " records (the log was rewritten up to there)",
                    )
                )
    write_anchor(anchor_path, head_seq, head_hash)
    if anchor is None:
        note = f"head (row {head_seq}) recorded in {anchor_path}"
    else:
        note = f"matches the anchor at row {anchor.seq}; {anchor_path} now at row {head_seq}"
    return LogVerification(report=report, anchor=note)


async def rebuild(home: Home) -> int:
    async with open_store(home) as store:
        return await store.rebuild()
