"""An in-memory event store: the second backend of the contract suite (and handy in
pure unit tests). Not for daemon tests: those use real SQLite files.

It runs no projectors; like the SQLite store it encodes and decodes every event
before accepting it, so both backends hand back the same thing."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Collection, Sequence

from arenad.clock import Clock, system_clock, wait_for_event
from arenad.errors import ConcurrencyError, StoreError
from arenad.store.base import AppendRequest, EventStore
from events.base import Recorded
from events.codec import decode_event, encode_event, event_tag, event_version


class InMemoryEventStore(EventStore):
    def __init__(self, clock: Clock = system_clock) -> None:
        self._clock = clock
        self._log: list[Recorded] = []
        self._by_stream: dict[str, list[Recorded]] = {}
        self._appended = asyncio.Event()

    async def append_many(self, requests: Sequence[AppendRequest]) -> list[list[Recorded]]:
        work = [r for r in requests if r.events]
        versions = {r.stream: len(self._by_stream.get(r.stream, ())) for r in work}
        for r in work:
            current = versions[r.stream]
            if r.expected_version is not None and r.expected_version != current:
                raise ConcurrencyError(r.stream, r.expected_version, current)
            versions[r.stream] = current + len(r.events)
        now = int(self._clock())
        seq = len(self._log)
        staged: list[list[Recorded]] = []
        versions = {r.stream: len(self._by_stream.get(r.stream, ())) for r in work}
        for r in work:
            version = versions[r.stream]
            recorded: list[Recorded] = []
            for event in r.events:
                seq += 1
                version += 1
                tag = event_tag(event)
                schema_version = event_version(event)
                # Round-trip through the codec so both backends store the same thing.
                try:
                    decoded = decode_event(encode_event(event), tag, schema_version)
                except ValueError as exc:
                    raise StoreError(f"refused to append: {tag!r} on {r.stream!r}: {exc}") from exc
                recorded.append(
                    Recorded(
                        seq=seq,
                        stream=r.stream,
                        version=version,
                        tag=tag,
                        schema_version=schema_version,
                        recorded_at_ms=now,
                        event=decoded,
                    )
                )
            versions[r.stream] = version
            staged.append(recorded)
        # Nothing above mutated the log: a refusal anywhere leaves it untouched.
        for recorded in staged:
            self._log.extend(recorded)
            self._by_stream.setdefault(recorded[0].stream, []).extend(recorded)
        if staged:
            self._appended.set()
            self._appended = asyncio.Event()
        by_request = iter(staged)
        return [next(by_request) if r.events else [] for r in requests]

    async def read_stream(self, stream: str, after_version: int = 0) -> list[Recorded]:
        return list(self._by_stream.get(stream, [])[max(after_version, 0) :])

    async def read_all(
        self, after_seq: int = 0, batch_size: int = 2000, tags: Collection[str] | None = None
    ) -> AsyncIterator[Recorded]:
        position = max(after_seq, 0)
        while position < len(self._log):
            batch = self._log[position : position + batch_size]
            for recorded in batch:
                if tags is None or recorded.tag in tags:
                    yield recorded
            position += len(batch)

    async def stream_version(self, stream: str) -> int:
        return len(self._by_stream.get(stream, ()))

    async def last_seq(self) -> int:
        return len(self._log)

    async def streams(self, prefix: str) -> list[str]:
        return sorted(s for s in self._by_stream if s.startswith(prefix))

    async def wait_for_new(self, after_seq: int, timeout_s: float) -> None:
        if len(self._log) > after_seq:
            return
        await wait_for_event(self._appended, timeout_s)

    async def close(self) -> None:
        return None
