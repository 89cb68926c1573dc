"""A moment of the log: the last event recorded at or before a time.

``?as_of=`` names the log as it stood after an event; a time names the last event whose
recorded time is at or before it (the times the writer recorded, never this machine's
clock now). The largest such event number, so a clock that stepped back cannot hide later
events recorded with an earlier time.
"""

from __future__ import annotations

from arenad.store.base import EventStore
from arenad.store.sqlite import SqliteEventStore

__all__ = ["event_at"]


async def event_at(store: EventStore, at_ms: int) -> int | None:
    """The last event recorded at or before ``at_ms`` (None: the log has none)."""
    if isinstance(store, SqliteEventStore):
        rows = await store.connection.execute_fetchall(
            "SELECT MAX(seq) FROM events WHERE recorded_at_ms <= ?", (at_ms,)
        )
        found = next(iter(rows))[0]
        return None if found is None else int(found)
    last: int | None = None
    async for batch in store.read_batches(0):
        for r in batch:
            if r.recorded_at_ms <= at_ms:
                last = r.seq
    return last
