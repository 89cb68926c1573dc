"""The interface every event store implements (the contract tests run against each)."""

from __future__ import annotations

import abc
import asyncio
from collections.abc import AsyncIterable, AsyncIterator, Callable, Collection, Sequence

import msgspec

from arenad.store.rows import StoredRow, stored_row
from events.base import Event, Recorded


class AppendRequest(msgspec.Struct, frozen=True):
    stream: str
    # The stream's version the writer last saw (0 for a new stream); None appends
    # unconditionally (for notification streams where order is all that matters).
    expected_version: int | None
    events: Sequence[Event]


class EventStore(abc.ABC):
    """Append-only streams. Every implementation must pass tests/store/contract.py."""

    # Called when a write finds the disk full: it frees room (the daemon's reserve,
    # arenad.daemon.diskfull) and returns the bytes freed; with some, the append is tried
    # once more. None: a full disk fails the append at once.
    on_disk_full: Callable[[], int] | None = None

    @abc.abstractmethod
    async def append_many(self, requests: Sequence[AppendRequest]) -> list[list[Recorded]]:
        """Append several streams' events in one atomic transaction (all or nothing).

        Raises ConcurrencyError when a stream is not at its expected version.
        """

    async def append_batches(self, batches: AsyncIterable[Sequence[AppendRequest]]) -> int:
        """Append every batch in one atomic transaction (all or nothing), drawing the batches
        one at a time: a writer of a very large set (a campaign's cells) never holds it all.
        An exception from ``batches`` rolls everything back. Returns the events appended.

        This default gathers the batches and makes one :meth:`append_many`; a store that can
        keep a transaction open across batches does so instead.
        """
        requests: list[AppendRequest] = []
        async for batch in batches:
            requests.extend(batch)
        done = await self.append_many(requests)
        return sum(len(d) for d in done)

    async def append(
        self, stream: str, expected_version: int | None, events: Sequence[Event]
    ) -> list[Recorded]:
        return (await self.append_many([AppendRequest(stream, expected_version, events)]))[0]

    @abc.abstractmethod
    async def read_stream(self, stream: str, after_version: int = 0) -> list[Recorded]: ...

    @abc.abstractmethod
    def read_all(
        self, after_seq: int = 0, batch_size: int = 2000, tags: Collection[str] | None = None
    ) -> AsyncIterator[Recorded]:
        """Every event after ``after_seq`` in order (only those tagged one of ``tags`` when
        given), fetched in bounded batches."""

    async def read_batches(
        self, after_seq: int = 0, batch_size: int = 2000, tags: Collection[str] | None = None
    ) -> AsyncIterator[list[Recorded]]:
        """read_all a batch at a time: what a replay iterates (one step per batch)."""
        batch: list[Recorded] = []
        async for recorded in self.read_all(after_seq, batch_size, tags):
            batch.append(recorded)
            if len(batch) == batch_size:
                yield batch
                batch = []
        if batch:
            yield batch

    async def read_streams(self, streams: Sequence[str]) -> list[Recorded]:
        """Several streams' events in global order."""
        out: list[Recorded] = []
        for stream in streams:
            out.extend(await self.read_stream(stream))
        return sorted(out, key=lambda r: r.seq)

    async def read_stream_groups(self, streams: Sequence[str]) -> dict[str, list[Recorded]]:
        """Each of ``streams`` (every one a key, in the order given) with its events in
        version order: ``read_stream`` of each, for a batch reader of many streams (a
        projection). A store that can answers in one round trip in its index order: no
        thread hop or future per stream, and no sort of the log's order."""
        return {stream: await self.read_stream(stream) for stream in dict.fromkeys(streams)}

    async def read_stream_rows(self, streams: Sequence[str]) -> dict[str, list[StoredRow]]:
        """``read_stream_groups`` with each payload still encoded (``arenad.store.rows``):
        for a reader that keeps many big streams at once and decodes each only when it
        folds it, so the decoded events are used while they are still in the CPU's cache
        (the ledger: a batch of transcripts). This default encodes what it reads."""
        return {
            stream: [stored_row(r) for r in records]
            for stream, records in (await self.read_stream_groups(streams)).items()
        }

    async def stream_versions(self, streams: Sequence[str]) -> dict[str, int]:
        """The current version of each of ``streams`` that has events (the others are
        absent): ``stream_version`` of each, in one round trip where the store can."""
        found: dict[str, int] = {}
        for stream in dict.fromkeys(streams):
            if version := await self.stream_version(stream):
                found[stream] = version
        return found

    @abc.abstractmethod
    async def stream_version(self, stream: str) -> int: ...

    @abc.abstractmethod
    async def last_seq(self) -> int: ...

    @abc.abstractmethod
    async def streams(self, prefix: str) -> list[str]:
        """Stream ids starting with ``prefix``, sorted."""

    async def follow(
        self,
        after_seq: int = 0,
        poll_s: float = 0.2,
        batch_size: int = 2000,
        tags: Collection[str] | None = None,
        wake_on_appends: bool = True,
    ) -> AsyncIterator[Recorded]:
        """Like read_all, but waits for new events forever (until cancelled).

        Each round reads up to the head it saw first, then waits past that head: with a
        ``tags`` filter the last event yielded may lie far behind the head, and waiting on
        it would wake at once, forever. ``wake_on_appends=False`` waits out ``poll_s``
        between rounds even when this process appended meanwhile: for a follower that only
        looks for what other processes write, and would otherwise read the log again after
        every append of its own.
        """
        position = after_seq
        while True:
            head = await self.last_seq()
            async for recorded in self.read_all(position, batch_size, tags):
                if recorded.seq > head:
                    break
                yield recorded
            position = max(position, head)
            if wake_on_appends:
                await self.wait_for_new(position, poll_s)
            else:
                await asyncio.sleep(poll_s)

    @abc.abstractmethod
    async def wait_for_new(self, after_seq: int, timeout_s: float) -> None:
        """Return when an event after ``after_seq`` may exist, or after the timeout."""

    @abc.abstractmethod
    async def close(self) -> None: ...
