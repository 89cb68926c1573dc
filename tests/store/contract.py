"""The event-store contract: every EventStore implementation passes these tests.

A backend's test module subclasses ``EventStoreContract`` and implements
``make_store``; pytest collects the subclass (its name starts with ``Test``), never
this base class.
"""

from __future__ import annotations

import abc
import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from arenad.errors import ConcurrencyError, StoreError
from arenad.store.base import AppendRequest, EventStore
from arenad.store.rows import decode_rows
from events.base import Event, Recorded
from events.cell import CellPaused, RunCompleted
from events.control import MaxParallelChanged
from events.ingest import LineIngested


class FakeClock:
    """A clock the test moves; the store stamps events with it."""

    def __init__(self, start_ms: int = 1_700_000_000_000) -> None:
        self.now = start_ms

    def __call__(self) -> int:
        return self.now


def line(n: int) -> LineIngested:
    return LineIngested(
        source="stdout", path="out.jsonl", offset=n * 10, length=9, raw=f'{{"n":{n}}}'
    )


def lines(a: int, b: int) -> list[Event]:
    return [line(n) for n in range(a, b)]


def offsets(recorded: list[Recorded]) -> list[int]:
    return [r.event.offset for r in recorded if isinstance(r.event, LineIngested)]


async def collect(source: AsyncIterator[Recorded]) -> list[Recorded]:
    return [r async for r in source]


class EventStoreContract(abc.ABC):
    @abc.abstractmethod
    async def make_store(self, path: Path, clock: FakeClock) -> EventStore:
        """A fresh, empty store (``path`` is a directory it may use)."""

    @pytest.fixture
    def clock(self) -> FakeClock:
        return FakeClock()

    @pytest.fixture
    async def store(self, tmp_path: Path, clock: FakeClock) -> AsyncIterator[EventStore]:
        store = await self.make_store(tmp_path, clock)
        try:
            yield store
        finally:
            await store.close()

    # -- appending ---------------------------------------------------------------

    async def test_append_assigns_seq_version_and_envelope(
        self, store: EventStore, clock: FakeClock
    ) -> None:
        first = await store.append("ingest/a/1", 0, lines(0, 2))
        clock.now += 1000
        second = await store.append("ingest/b/1", 0, lines(2, 3))
        assert [(r.seq, r.stream, r.version) for r in first + second] == [
            (1, "ingest/a/1", 1),
            (2, "ingest/a/1", 2),
            (3, "ingest/b/1", 1),
        ]
        assert {r.tag for r in first + second} == {"ingest.line"}
        assert {r.schema_version for r in first + second} == {1}
        assert [r.recorded_at_ms for r in first + second] == [
            1_700_000_000_000,
            1_700_000_000_000,
            1_700_000_001_000,
        ]
        assert [r.event for r in first + second] == lines(0, 3)
        assert await store.last_seq() == 3
        assert await store.stream_version("ingest/a/1") == 2
        assert await store.stream_version("ingest/none") == 0

    async def test_read_stream_in_version_order_and_after_version(self, store: EventStore) -> None:
        await store.append("s/a", 0, lines(0, 3))
        await store.append("s/b", 0, lines(100, 102))
        await store.append("s/a", 3, lines(3, 5))
        recorded = await store.read_stream("s/a")
        assert [r.version for r in recorded] == [1, 2, 3, 4, 5]
        assert offsets(recorded) == [0, 10, 20, 30, 40]
        assert [r.version for r in await store.read_stream("s/a", after_version=3)] == [4, 5]
        assert await store.read_stream("s/a", after_version=5) == []
        assert await store.read_stream("s/missing") == []

    async def test_read_stream_groups_each_stream_in_version_order(self, store: EventStore) -> None:
        await store.append("s/b", 0, lines(100, 102))
        await store.append("s/a", 0, lines(0, 3))
        await store.append("s/b", 2, lines(102, 103))
        await store.append("s/a", 3, lines(3, 5))
        groups = await store.read_stream_groups(["s/b", "s/missing", "s/a", "s/b"])
        # Every stream asked is a key, in the order asked, duplicates once.
        assert list(groups) == ["s/b", "s/missing", "s/a"]
        assert groups == {s: await store.read_stream(s) for s in ("s/b", "s/missing", "s/a")}
        assert [r.version for r in groups["s/a"]] == [1, 2, 3, 4, 5]
        assert await store.read_stream_groups([]) == {}

    async def test_read_stream_rows_are_the_groups_not_yet_decoded(self, store: EventStore) -> None:
        await store.append("s/b", 0, lines(100, 102))
        await store.append("s/a", 0, lines(0, 3))
        rows = await store.read_stream_rows(["s/b", "s/missing", "s/a", "s/b"])
        assert list(rows) == ["s/b", "s/missing", "s/a"]
        assert all(type(row[6]) is bytes for group in rows.values() for row in group)
        groups = await store.read_stream_groups(["s/b", "s/missing", "s/a"])
        assert {s: decode_rows(group) for s, group in rows.items()} == groups
        assert await store.read_stream_rows([]) == {}

    async def test_stream_versions_names_the_streams_with_events(self, store: EventStore) -> None:
        await store.append("s/a", 0, lines(0, 3))
        await store.append("s/b", 0, lines(3, 4))
        assert await store.stream_versions(["s/b", "s/missing", "s/a"]) == {"s/a": 3, "s/b": 1}
        assert await store.stream_versions([]) == {}

    async def test_read_all_in_global_order_across_streams(self, store: EventStore) -> None:
        await store.append("s/a", 0, lines(0, 2))
        await store.append("s/b", 0, lines(2, 4))
        await store.append("s/a", 2, lines(4, 5))
        everything = await collect(store.read_all())
        assert [r.seq for r in everything] == [1, 2, 3, 4, 5]
        assert [r.stream for r in everything] == ["s/a", "s/a", "s/b", "s/b", "s/a"]
        assert offsets(everything) == [0, 10, 20, 30, 40]
        assert [r.seq for r in await collect(store.read_all(after_seq=3))] == [4, 5]
        assert await collect(store.read_all(after_seq=5)) == []

    @pytest.mark.parametrize("batch_size", [1, 3, 10, 11, 1000])
    async def test_read_all_batches_return_everything_once(
        self, store: EventStore, batch_size: int
    ) -> None:
        for i in range(10):
            await store.append(f"s/{i % 3}", None, lines(i, i + 1))
        got = await collect(store.read_all(after_seq=0, batch_size=batch_size))
        assert [r.seq for r in got] == list(range(1, 11))
        got = await collect(store.read_all(after_seq=4, batch_size=batch_size))
        assert [r.seq for r in got] == list(range(5, 11))

    @pytest.mark.parametrize("batch_size", [1, 3, 10, 1000])
    async def test_read_batches_are_read_all_in_bounded_lists(
        self, store: EventStore, batch_size: int
    ) -> None:
        for i in range(10):
            await store.append(f"s/{i % 3}", None, lines(i, i + 1))
        batches = [b async for b in store.read_batches(2, batch_size)]
        assert all(0 < len(b) <= batch_size for b in batches)
        assert [r.seq for b in batches for r in b] == list(range(3, 11))

    @pytest.mark.parametrize("batch_size", [1, 2, 1000])
    async def test_read_all_filters_by_tag(self, store: EventStore, batch_size: int) -> None:
        for i in range(6):
            events = [CellPaused()] if i % 3 == 0 else lines(i, i + 1)
            await store.append(f"s/{i}", None, events)
        paused = await collect(store.read_all(0, batch_size, tags={"cell.paused"}))
        assert [r.seq for r in paused] == [1, 4]
        assert await collect(store.read_all(4, batch_size, tags={"cell.paused"})) == []
        assert await collect(store.read_all(0, batch_size, tags=set())) == []

    async def test_stale_expected_version_is_a_concurrency_error(self, store: EventStore) -> None:
        await store.append("s/a", 0, lines(0, 2))
        with pytest.raises(ConcurrencyError) as caught:
            await store.append("s/a", 1, lines(2, 3))
        assert (caught.value.stream, caught.value.expected, caught.value.actual) == ("s/a", 1, 2)
        with pytest.raises(ConcurrencyError):
            await store.append("s/a", 0, lines(2, 3))
        with pytest.raises(ConcurrencyError):
            await store.append("s/a", 3, lines(2, 3))  # ahead of the stream
        with pytest.raises(ConcurrencyError):
            await store.append("s/new", 1, lines(2, 3))  # a new stream is at 0
        assert await store.last_seq() == 2
        assert await store.stream_version("s/a") == 2
        assert await store.stream_version("s/new") == 0

    async def test_expected_version_none_appends_at_the_end(self, store: EventStore) -> None:
        await store.append("daemon", None, [MaxParallelChanged(max_parallel=1)])
        await store.append("daemon", None, [MaxParallelChanged(max_parallel=2)])
        recorded = await store.append("daemon", None, [MaxParallelChanged(max_parallel=3)])
        assert [(r.seq, r.version) for r in recorded] == [(3, 3)]
        assert [r.version for r in await store.read_stream("daemon")] == [1, 2, 3]

    async def test_append_many_is_atomic(self, store: EventStore) -> None:
        await store.append("s/b", 0, lines(0, 1))
        with pytest.raises(ConcurrencyError) as caught:
            await store.append_many(
                [
                    AppendRequest("s/a", 0, lines(1, 4)),
                    AppendRequest("s/b", 0, lines(4, 5)),  # s/b is at 1: the batch fails
                    AppendRequest("s/c", None, lines(5, 6)),
                ]
            )
        assert caught.value.stream == "s/b"
        assert await store.last_seq() == 1
        assert await store.stream_version("s/a") == 0
        assert await store.stream_version("s/c") == 0
        assert await store.streams("s/") == ["s/b"]
        assert [r.seq for r in await collect(store.read_all())] == [1]

    async def test_append_batches_is_one_transaction_across_batches(
        self, store: EventStore
    ) -> None:
        async def batches() -> AsyncIterator[list[AppendRequest]]:
            yield [AppendRequest("s/a", 0, lines(0, 2))]
            yield []
            yield [AppendRequest("s/a", 2, lines(2, 3)), AppendRequest("s/b", 0, lines(3, 4))]

        assert await store.append_batches(batches()) == 4
        assert [(r.seq, r.stream, r.version) for r in await collect(store.read_all())] == [
            (1, "s/a", 1),
            (2, "s/a", 2),
            (3, "s/a", 3),
            (4, "s/b", 1),
        ]

    async def test_append_batches_is_all_or_nothing(self, store: EventStore) -> None:
        await store.append("s/b", 0, lines(0, 1))

        async def failing() -> AsyncIterator[list[AppendRequest]]:
            yield [AppendRequest("s/a", 0, lines(1, 3))]
            raise ValueError("the writer's own failure, after a batch went in")

        with pytest.raises(ValueError, match="the writer's own failure"):
            await store.append_batches(failing())

        async def conflicting() -> AsyncIterator[list[AppendRequest]]:
            yield [AppendRequest("s/a", 0, lines(1, 3))]
            yield [AppendRequest("s/b", 0, lines(3, 4))]  # s/b is at 1

        with pytest.raises(ConcurrencyError):
            await store.append_batches(conflicting())
        assert await store.last_seq() == 1
        assert await store.streams("s/") == ["s/b"]
        assert await store.append("s/a", 0, lines(5, 6))  # and the store still appends

    async def test_append_many_returns_one_list_per_request_in_order(
        self, store: EventStore
    ) -> None:
        result = await store.append_many(
            [
                AppendRequest("s/a", 0, lines(0, 2)),
                AppendRequest("s/empty", 0, []),
                AppendRequest("s/b", None, lines(2, 3)),
                AppendRequest("s/a", 2, lines(3, 4)),  # the same stream again, later
            ]
        )
        assert [[(r.seq, r.stream, r.version) for r in part] for part in result] == [
            [(1, "s/a", 1), (2, "s/a", 2)],
            [],
            [(3, "s/b", 1)],
            [(4, "s/a", 3)],
        ]
        assert await store.stream_version("s/empty") == 0

    async def test_appending_nothing_writes_nothing(self, store: EventStore) -> None:
        assert await store.append("s/a", 0, []) == []
        assert await store.append_many([]) == []
        assert await store.last_seq() == 0

    async def test_events_read_back_in_their_decoded_form(self, store: EventStore) -> None:
        # An int given for a float field is stored as JSON 5 and reads back as 5.0:
        # the store hands back what a replay will see, not the caller's object.
        recorded = await store.append("cell/x", None, [RunCompleted(attempt=1, rc=0, wall_s=5)])
        assert isinstance(recorded[0].event, RunCompleted)
        assert type(recorded[0].event.wall_s) is float
        (read,) = await store.read_stream("cell/x")
        assert read == recorded[0]

    async def test_an_event_that_would_not_read_back_is_refused(self, store: EventStore) -> None:
        bad = RunCompleted(attempt=1, rc="zero", wall_s=1.0)  # type: ignore[arg-type]
        with pytest.raises(StoreError, match=r"refused to append.*rc"):
            await store.append_many(
                [AppendRequest("s/ok", 0, lines(0, 1)), AppendRequest("s/bad", 0, [bad])]
            )
        assert await store.last_seq() == 0

    # -- streams, follow ---------------------------------------------------------

    async def test_streams_by_prefix(self, store: EventStore) -> None:
        for stream in ["cell/b", "cell/a", "cell/ab", "ingest/a/1", "campaign/x", "cellar"]:
            await store.append(stream, None, [CellPaused()])
        await store.append("cell/a", None, [CellPaused()])
        assert await store.streams("cell/") == ["cell/a", "cell/ab", "cell/b"]
        assert await store.streams("cell/a") == ["cell/a", "cell/ab"]
        assert await store.streams("cell") == ["cell/a", "cell/ab", "cell/b", "cellar"]
        assert await store.streams("nothing/") == []
        assert await store.streams("") == sorted(
            ["cell/b", "cell/a", "cell/ab", "ingest/a/1", "campaign/x", "cellar"]
        )

    async def test_follow_sees_events_appended_after_it_started(self, store: EventStore) -> None:
        await store.append("s/a", 0, lines(0, 2))
        seen: list[Recorded] = []
        caught_up = asyncio.Event()
        got_all = asyncio.Event()

        async def consume() -> None:
            async for r in store.follow(after_seq=1, poll_s=0.05):
                seen.append(r)
                if r.seq == 2:
                    caught_up.set()
                if r.seq == 5:
                    got_all.set()

        task = asyncio.create_task(consume())
        try:
            await asyncio.wait_for(caught_up.wait(), 10)
            await store.append("s/b", 0, lines(2, 4))
            await store.append("s/a", 2, lines(4, 5))
            await asyncio.wait_for(got_all.wait(), 10)
        finally:
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
        assert [r.seq for r in seen] == [2, 3, 4, 5]

    async def test_follow_with_tags_yields_only_those(self, store: EventStore) -> None:
        await store.append("s/a", 0, [CellPaused(), *lines(0, 3)])
        seen: list[Recorded] = []
        got = asyncio.Event()

        async def consume() -> None:
            async for r in store.follow(0, poll_s=0.05, tags={"cell.paused"}):
                seen.append(r)
                if len(seen) == 2:
                    got.set()

        task = asyncio.create_task(consume())
        try:
            await asyncio.sleep(0)  # the follower starts (a yield, not a wait)
            await store.append("s/b", 0, [*lines(3, 5), CellPaused()])
            await asyncio.wait_for(got.wait(), 10)
        finally:
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
        assert [r.seq for r in seen] == [1, 7]

    async def test_follow_without_waking_on_appends_reads_once_per_poll(
        self, store: EventStore, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        rounds = 0
        last_seq = store.last_seq

        async def counted() -> int:
            nonlocal rounds
            rounds += 1
            return await last_seq()

        monkeypatch.setattr(store, "last_seq", counted)
        seen: list[Recorded] = []
        got_all = asyncio.Event()
        poll_s = 0.3

        async def consume() -> None:
            async for r in store.follow(0, poll_s=poll_s, wake_on_appends=False):
                seen.append(r)
                if len(seen) == 20:
                    got_all.set()

        task = asyncio.create_task(consume())
        try:
            started = asyncio.get_running_loop().time()
            for i in range(20):
                await store.append(f"s/{i}", 0, lines(i, i + 1))
            elapsed = asyncio.get_running_loop().time() - started
            await asyncio.wait_for(got_all.wait(), 10)
        finally:
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
        assert [r.seq for r in seen] == list(range(1, 21))
        # One round per poll while the appends ran (not one per append), and the one that
        # saw the last of them.
        assert rounds <= 2 + elapsed / poll_s + 1

    async def test_wait_for_new_returns_at_once_when_behind(self, store: EventStore) -> None:
        await store.append("s/a", 0, lines(0, 1))
        # A long timeout that must not be waited out: an event after 0 exists.
        await asyncio.wait_for(store.wait_for_new(0, timeout_s=60), 10)

    async def test_wait_for_new_wakes_on_append(self, store: EventStore) -> None:
        waiter = asyncio.create_task(store.wait_for_new(0, timeout_s=60))
        await asyncio.sleep(0)  # let the waiter start waiting (a yield, not a wait)
        await store.append("s/a", 0, lines(0, 1))
        await asyncio.wait_for(waiter, 10)
