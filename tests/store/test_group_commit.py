"""Group commit over the real SQLite store: many writers, few transactions, each writer
its own outcome."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from arenad.errors import ConcurrencyError, StoreUnwritable
from arenad.store.base import AppendRequest
from arenad.store.group_commit import GroupCommit
from arenad.store.sqlite import SqliteEventStore
from tests.store.contract import lines, offsets


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SqliteEventStore]:
    s = await SqliteEventStore.open(tmp_path / "events.db")
    try:
        yield s
    finally:
        await s.close()


async def test_writers_that_arrive_together_share_transactions(store: SqliteEventStore) -> None:
    group = GroupCommit(store)

    async def writer(n: int) -> None:
        version = 0
        for round_ in range(5):
            request = AppendRequest(f"ingest/c{n}/1", version, lines(round_ * 2, round_ * 2 + 2))
            recorded = await group.append(request)
            assert [r.version for r in recorded] == [version + 1, version + 2]
            version = recorded[-1].version

    await asyncio.gather(*(writer(n) for n in range(100)))
    assert group.requests == 500
    # Far fewer transactions than requests (the first one goes alone, the rest queue).
    assert group.transactions < 100
    for n in range(100):
        recorded = await store.read_stream(f"ingest/c{n}/1")
        assert offsets(recorded) == [i * 10 for i in range(10)]
    assert (await store.verify_chain()).ok


async def test_a_lost_race_fails_only_its_own_writer(store: SqliteEventStore) -> None:
    await store.append("ingest/taken/1", 0, lines(0, 1))
    group = GroupCommit(store)
    # Queued behind a first request, so the three go into one transaction together.
    first = asyncio.ensure_future(group.append(AppendRequest("ingest/a/1", 0, lines(0, 1))))
    await asyncio.sleep(0)
    results = await asyncio.gather(
        group.append(AppendRequest("ingest/b/1", 0, lines(0, 2))),
        group.append(AppendRequest("ingest/taken/1", 0, lines(5, 6))),
        group.append(AppendRequest("ingest/c/1", 0, lines(0, 3))),
        return_exceptions=True,
    )
    await first
    assert isinstance(results[1], ConcurrencyError)
    assert [len(r) for r in (results[0], results[2]) if isinstance(r, list)] == [2, 3]
    assert offsets(await store.read_stream("ingest/taken/1")) == [0]
    assert offsets(await store.read_stream("ingest/c/1")) == [0, 10, 20]


async def test_an_unwritable_store_fails_every_writer_of_the_batch(
    store: SqliteEventStore,
) -> None:
    await store.connection.execute("PRAGMA query_only = ON")
    group = GroupCommit(store)
    results = await asyncio.gather(
        *(group.append(AppendRequest(f"ingest/{n}/1", 0, lines(0, 1))) for n in range(5)),
        return_exceptions=True,
    )
    assert all(isinstance(r, StoreUnwritable) for r in results), results
