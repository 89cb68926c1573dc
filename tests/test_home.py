"""The home's store door (arenad.home.open_store): how long an append waits for another
writer, against a real SQLite file held by a second connection."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from pathlib import Path

import pytest

from arenad.app.log import init_home
from arenad.errors import StoreError
from arenad.home import Home, open_store
from tests.store.contract import line


def _hold_the_write_lock(db: Path, taken: threading.Event, release: threading.Event) -> None:
    # What `arenad submit` does to a daemon: one long write transaction.
    con = sqlite3.connect(db, isolation_level=None)
    try:
        con.execute("BEGIN IMMEDIATE")
        taken.set()
        release.wait(60)
        con.execute("COMMIT")
    finally:
        con.close()


async def test_an_append_waits_for_another_writers_transaction_up_to_its_lock_wait(
    tmp_path: Path,
) -> None:
    home = Home(tmp_path / "h")
    await init_home(home)
    taken, release = threading.Event(), threading.Event()
    holder = threading.Thread(target=_hold_the_write_lock, args=(home.db_path, taken, release))
    holder.start()
    try:
        assert await asyncio.to_thread(taken.wait, 30)
        async with open_store(home, lock_wait_s=0.2) as impatient:
            with pytest.raises(StoreError, match="database is locked"):
                await impatient.append("s/1", 0, [line(1)])
        async with open_store(home, lock_wait_s=60) as patient:
            appended = asyncio.create_task(patient.append("s/1", 0, [line(1)]))
            await asyncio.sleep(0.5)  # still held: the append is waiting, not failed
            assert not appended.done()
            release.set()
            await asyncio.wait_for(appended, 30)
            assert [r.stream for r in await patient.read_stream("s/1")] == ["s/1"]
    finally:
        release.set()
        holder.join()
