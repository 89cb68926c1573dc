"""Where ingested lines go: the cell attempt's ingest stream, with optimistic
concurrency, so two ingesters can never both record the same bytes."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence

from arenad.errors import LogTampered, StoreError, StoreUnwritable
from arenad.store.base import AppendRequest, EventStore
from arenad.store.group_commit import GroupCommit
from events.base import Event
from events.ingest import IngestionClosed


class IngestSink:
    """Appends what the watcher ingests. With ``hold_close``, the watcher's last batch (the
    one that ends in IngestionClosed) is held for the caller to append together with the
    run's end, in one transaction (:meth:`take_held`): a crash cannot separate the two,
    and a restart that finds neither ingests from the recorded offsets again.

    With ``group``, appends go through it: the batches of many cells' sinks that arrive
    together share one transaction (:mod:`arenad.store.group_commit`)."""

    def __init__(
        self,
        store: EventStore,
        stream: str,
        *,
        hold_close: bool = False,
        observer: Callable[[str, Sequence[Event]], None] | None = None,
        group: GroupCommit | None = None,
    ) -> None:
        self.store = store
        self.group = group
        self.stream = stream
        self.version = 0
        self.appended = 0
        self.hold_close = hold_close
        self._held: list[Event] | None = None
        # Sees every batch as it is recorded (or held): the daemon folds live spend from
        # it, so nothing re-reads the ingest stream to learn what a run has cost so far.
        self.observer = observer
        # A store failure after which nothing more can be written (full, read-only, a
        # log that fails its chain check): the run's follower stops at once on it, not
        # when the run ends (the watcher that got it has stopped ingesting).
        self.fatal: StoreError | None = None
        self.fatal_seen = asyncio.Event()

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
        else:
            try:
                request = AppendRequest(self.stream, self.version, list(events))
                if self.group is not None:
                    recorded = await self.group.append(request)
                else:
                    recorded = (await self.store.append_many([request]))[0]
            except (StoreUnwritable, LogTampered) as exc:
                self.fatal = exc
                self.fatal_seen.set()
                raise
            self.version = recorded[-1].version
            self.appended += len(recorded)
        if self.observer is not None:
            self.observer(self.stream, events)

    @property
    def held_events(self) -> list[Event]:
        """The held closing batch (not yet in the log)."""
        return list(self._held or [])

    def take_held(self) -> list[AppendRequest]:
        """The held closing batch as an append request (none if nothing is held)."""
        held, self._held = self._held, None
        return [] if held is None else [AppendRequest(self.stream, self.version, held)]
