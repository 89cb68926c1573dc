"""Observation batches from a node to the head, and the head's rule for taking them.

A node reads a run's files with the same tailers as a local run
(:class:`~arenad.ingest.watcher.RunDirWatcher`) and hands the head one batch at a time: its
ingest events and, for every file the observation knows, the position that file starts at
and the one the batch leaves it at — ``(offset, sha256)`` as the fold of the ingest stream
says (:func:`arenad.ingest.offsets.advance`). The head appends a batch only if every
file's start is where the log's record of that file ends (:class:`BatchGate`): a batch
delivered twice, or one that overtook another, starts elsewhere and is dropped, so whatever
the network does, each byte is ingested once and in order. Every known file is in every
batch (not only those it touches), so a batch about one file cannot overtake one about
another, and the closing batch (``IngestionClosed``) fits only once everything before it
is in.

No Ray here: both sides import this module, and it is tested on its own.
"""

from __future__ import annotations

from collections.abc import Sequence

import msgspec

from arenad.ingest.offsets import START, FileKey, IngestPosition, Positions, advance
from events.base import Event
from events.ingest import (
    FileSnapshotted,
    FileTruncated,
    IngestionClosed,
    LineIngested,
    LineMalformed,
)

Token = tuple[int, str | None]
"""Where a file's record ends: (offset, sha256 of its last snapshot)."""

IngestEvent = LineIngested | LineMalformed | FileTruncated | FileSnapshotted | IngestionClosed
_FILE_EVENTS = (LineIngested, LineMalformed, FileTruncated, FileSnapshotted)


class Span(msgspec.Struct, frozen=True, kw_only=True):
    """One file's part of a batch: where its record starts and where the batch leaves it
    (the same, for a file the batch does not touch)."""

    source: str
    path: str
    start: int
    start_sha: str | None
    end: int
    end_sha: str | None

    @property
    def key(self) -> FileKey:
        return (self.source, self.path)


class Batch(msgspec.Struct, frozen=True, kw_only=True):
    """One delivery: ``seq`` counts a node's batches within one observation (its cue that
    the head has a batch); ``events`` is the msgpack of the ingest events."""

    seq: int
    spans: list[Span]
    events: bytes
    # Its last event is IngestionClosed: every file was drained, nothing follows.
    closes: bool = False


_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder(list[IngestEvent])


def token(position: IngestPosition) -> Token:
    return (position.offset, position.sha256)


def make_batch(
    seq: int, events: Sequence[Event], files: dict[FileKey, IngestPosition]
) -> tuple[Batch, dict[FileKey, IngestPosition]]:
    """The batch of ``events`` read on from ``files`` (the positions the head has), and
    the positions after it."""
    after = dict(files)
    for event in events:
        if isinstance(event, _FILE_EVENTS):
            key = (event.source, event.path)
            after[key] = advance(after.get(key), event)
    spans = []
    for key in sorted(after):
        start, end = files.get(key, START), after[key]
        spans.append(
            Span(
                source=key[0],
                path=key[1],
                start=start.offset,
                start_sha=start.sha256,
                end=end.offset,
                end_sha=end.sha256,
            )
        )
    closes = bool(events) and isinstance(events[-1], IngestionClosed)
    return Batch(seq=seq, spans=spans, events=_encoder.encode(list(events)), closes=closes), after


def batch_events(batch: Batch) -> list[Event]:
    return list(_decoder.decode(batch.events))


class BatchGate:
    """The head's record of where each file's ingestion ends, and the rule for a batch."""

    def __init__(self, positions: Positions) -> None:
        self.files: dict[FileKey, IngestPosition] = dict(positions.files)
        self.closed = positions.closed

    def admits(self, batch: Batch) -> bool:
        """Whether ``batch`` starts where the record ends, for every file (and ingestion is
        not closed yet). A file the head knows and the batch does not name is fine: the
        node has not come across it yet."""
        if self.closed:
            return False
        return all(
            token(self.files.get(span.key, START)) == (span.start, span.start_sha)
            for span in batch.spans
        )

    def record(self, events: Sequence[Event]) -> None:
        """``events`` (of an admitted batch) are in the log now."""
        for event in events:
            if isinstance(event, _FILE_EVENTS):
                key = (event.source, event.path)
                self.files[key] = advance(self.files.get(key), event)
            elif isinstance(event, IngestionClosed):
                self.closed = True

    @property
    def positions(self) -> Positions:
        return Positions(files=dict(self.files), closed=self.closed)
