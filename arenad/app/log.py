"""Application services behind the CLI: one async function per command.

They open the store, do one thing, and return data; cli.py prints it.
"""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncGenerator
from typing import Any

import aiosqlite

from arenad.cell.overdue import Overdue, overdue
from arenad.errors import StoreError, UserError
from arenad.home import Home, open_store, require_initialized
from arenad.readmodels.view import cells_view
from arenad.store.chain import ChainReport
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


async def status(
    home: Home, campaign: str | None = None, now_ms: int | None = None
) -> dict[str, Any]:
    """Counts and rows; with ``now_ms`` (the caller's time, taken at the edge) also the
    cells overdue in a transient state at that time (:func:`arenad.cell.overdue.overdue`)."""
    late: list[Overdue] = []
    async with open_store(home) as store:
        cells = cells_view(store)
        counts = await cells.counts()
        rows = await cells.rows(campaign)
        if now_ms is not None:
            for row in rows:
                if row["state"] not in _TRANSIENT or row["paused"]:
                    continue
                state = await cells.state(row["cell_id"])
                found = overdue(state, now_ms) if state is not None else None
                if found is not None:
                    late.append(found)
    return {"counts": dict(counts), "count_list": counts, "cells": rows, "overdue": late}


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


async def verify_log(home: Home) -> ChainReport:
    async with open_store(home) as store:
        return await store.verify_chain()


async def rebuild(home: Home) -> int:
    async with open_store(home) as store:
        return await store.rebuild()
