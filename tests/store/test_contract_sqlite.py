"""The SQLite store against the contract (its specifics are in test_sqlite.py)."""

from __future__ import annotations

from pathlib import Path

from arenad.store.base import EventStore
from arenad.store.sqlite import SqliteEventStore
from tests.store.contract import EventStoreContract, FakeClock


class TestSqliteContract(EventStoreContract):
    async def make_store(self, path: Path, clock: FakeClock) -> EventStore:
        return await SqliteEventStore.open(path / "events.db", clock=clock)
