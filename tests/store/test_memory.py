"""The in-memory store against the contract."""

from __future__ import annotations

from pathlib import Path

from arenad.store.base import EventStore
from arenad.store.memory import InMemoryEventStore
from tests.store.contract import EventStoreContract, FakeClock


class TestInMemoryContract(EventStoreContract):
    async def make_store(self, path: Path, clock: FakeClock) -> EventStore:
        return InMemoryEventStore(clock=clock)
