"""Where ingested lines go: the cell attempt's ingest stream, with optimistic
concurrency, so two ingesters can never both record the same bytes."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from arenad.recovery.usage import fold_oc_usage
from arenad.store.base import AppendRequest, EventStore
from events.base import Event
from events.cell import SoloUsage
from events.ingest import IngestionClosed, LineIngested


class IngestSink:
    """Appends what the watcher ingests. With ``hold_close``, the watcher's last batch (the
    one that ends in IngestionClosed) is held for the caller to append together with the
    run's end, in one transaction (:meth:`take_held`): a crash cannot separate the two,
    and a restart that finds neither ingests from the recorded offsets again."""

    def __init__(self, store: EventStore, stream: str, *, hold_close: bool = False) -> None:
        self.store = store
        self.stream = stream
        self.version = 0
        self.appended = 0
        self.hold_close = hold_close
        self._held: list[Event] | None = None

    async def open(self, *, new: bool = False) -> int:
        """Read the stream's version; ``new``: the caller knows it has no events yet."""
        if not new:
            self.version = await self.store.stream_version(self.stream)
        return self.version

    async def append(self, events: Sequence[Event]) -> None:
        if not events:
            return
        if self.hold_close and isinstance(events[-1], IngestionClosed):
            self._held = list(events)
            self.appended += len(events)
            return
        recorded = await self.store.append(self.stream, self.version, list(events))
        self.version = recorded[-1].version
        self.appended += len(recorded)

    def take_held(self) -> list[AppendRequest]:
        """The held closing batch as an append request (none if nothing is held)."""
        held, self._held = self._held, None
        return [] if held is None else [AppendRequest(self.stream, self.version, held)]


def stdout_objects(events: Sequence[Event]) -> list[dict[str, Any]]:
    """The JSON objects of the ingested stdout stream, in order (a pure fold)."""
    out: list[dict[str, Any]] = []
    for e in events:
        if isinstance(e, LineIngested) and e.source == "stdout" and e.encoding == "utf-8":
            try:
                obj = json.loads(e.raw)
            except ValueError:
                continue
            if isinstance(obj, dict):
                out.append(obj)
    return out


async def usage_from_stream(store: EventStore, stream: str) -> SoloUsage | None:
    """The seed's usage figures, derived from the ingested stream events."""
    events = [r.event for r in await store.read_stream(stream)]
    if not any(isinstance(e, LineIngested) and e.source == "stdout" for e in events):
        return None
    return fold_oc_usage(stdout_objects(events))
