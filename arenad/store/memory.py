"""An in-memory event store: the second backend of the contract suite (and handy in
pure unit tests). Not for daemon tests: those use real SQLite files."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence

from arenad.clock import Clock, system_clock
from arenad.errors import ConcurrencyError
from arenad.store.base import AppendRequest, EventStore
from events.base import Recorded
from events.codec import decode_event, encode_event, event_tag, event_version


class InMemoryEventStore(EventStore):
    def __init__(self, clock: Clock = system_clock) -> None:
        self._clock = clock
        self._log: list[Recorded] = []
        self._versions: dict[str, int] = {}
        self._appended = asyncio.Event()

    async def append_many(self, requests: Sequence[AppendRequest]) -> list[list[Recorded]]:
        requests = [r for r in requests if r.events]
        versions = dict(self._versions)
        for r in requests:
            current = versions.get(r.stream, 0)
            if r.expected_version is not None and r.expected_version != current:
                raise ConcurrencyError(r.stream, r.expected_version, current)
            versions[r.stream] = current + len(r.events)
        now = self._clock()
        seq = len(self._log)
        out: list[list[Recorded]] = []
        for r in requests:
            version = self._versions.get(r.stream, 0)
            recorded: list[Recorded] = []
            for event in r.events:
                seq += 1
                version += 1
                tag = event_tag(event)
                # Round-trip through the codec so both backends store the same thing.
                schema_version = event_version(event)
                decoded = decode_event(encode_event(event), tag, schema_version)
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
            self._versions[r.stream] = version
            out.append(recorded)
        for recorded in out:
            self._log.extend(recorded)
        if out:
            self._appended.set()
            self._appended = asyncio.Event()
        return out

    async def read_stream(self, stream: str, after_version: int = 0) -> list[Recorded]:
        return [r for r in self._log if r.stream == stream and r.version > after_version]

    async def read_all(self, after_seq: int = 0, batch_size: int = 2000) -> AsyncIterator[Recorded]:
        for recorded in self._log[after_seq:]:
            yield recorded

    async def stream_version(self, stream: str) -> int:
        return self._versions.get(stream, 0)

    async def last_seq(self) -> int:
        return len(self._log)

    async def streams(self, prefix: str) -> list[str]:
        return sorted(s for s in self._versions if s.startswith(prefix))

    async def wait_for_new(self, after_seq: int, timeout_s: float) -> None:
        if len(self._log) > after_seq:
            return
        try:
            await asyncio.wait_for(self._appended.wait(), timeout_s)
        except TimeoutError:
            pass

    async def close(self) -> None:
        return None
