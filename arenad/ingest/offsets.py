"""Where each ingested file resumes: a pure fold over recorded ingest events.

A restarted ingester folds the events already in the log
(``ingest/<cell>/<attempt>``) and starts every tailer from the result, so no line
is ingested twice and none is skipped.

Per file, keyed by ``(source, path)``:

- :class:`~events.ingest.LineIngested` / :class:`~events.ingest.LineMalformed` /
  :class:`~events.ingest.LineOversized` set ``offset`` to
  ``event.offset + event.length + 1`` (``+ 0`` when ``partial``: a partial line has no
  newline) and remember the event as ``last_line``; ``length`` never includes the newline.
- :class:`~events.ingest.FileTruncated` resets ``offset`` to 0 and forgets
  ``last_line``.
- :class:`~events.ingest.FileSnapshotted` sets ``sha256`` and ``offset`` to the
  snapshot's size.
- :class:`~events.ingest.IngestionClosed` marks the whole set closed.

Every step sets the file's state from the event alone (offsets are absolute, not
increments), so folding any split of a sequence piecewise (``initial=`` the fold
of the prefix) equals folding the whole.

``last_line`` stands in for the file identity the events do not carry
(``st_dev``/``st_ino``): a restarted tailer re-reads those bytes at their offset,
and if they differ the file was replaced while nobody watched.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import msgspec

from events.base import Event, Recorded
from events.ingest import (
    FileSnapshotted,
    FileTruncated,
    IngestionClosed,
    LineIngested,
    LineMalformed,
    LineOversized,
)

FileKey = tuple[str, str]
"""``(source, path)``: a watched file, ``path`` relative to its source root."""


class IngestPosition(msgspec.Struct, frozen=True, kw_only=True):
    """Where one file resumes.

    ``offset``: the next byte to read (a line start) for line files; the size of
    the last snapshot for snapshot files. ``sha256``: the last snapshot's digest.
    ``last_line``: the last line event recorded since the last truncation.
    """

    offset: int = 0
    sha256: str | None = None
    last_line: LineIngested | LineMalformed | LineOversized | None = None


START = IngestPosition()


class Positions(msgspec.Struct, frozen=True, kw_only=True):
    """Every file's position, and whether ingestion was closed."""

    files: dict[FileKey, IngestPosition] = {}
    closed: bool = False

    def get(self, source: str, path: str) -> IngestPosition:
        return self.files.get((source, path), START)


def file_key(source: str, path: str) -> str:
    """The key of a file in :class:`~events.ingest.IngestionClosed` ``files``: ``source:path``."""
    return f"{source}:{path}"


def split_file_key(key: str) -> FileKey:
    """Inverse of :func:`file_key` (source names never contain ``:``)."""
    source, _, path = key.partition(":")
    return source, path


def line_end(event: LineIngested | LineMalformed | LineOversized) -> int:
    """The offset just past a line event's bytes (its newline included unless partial)."""
    return event.offset + event.length + (0 if event.partial else 1)


def advance(position: IngestPosition | None, event: Event) -> IngestPosition:
    """One file's position after ``event`` (which must concern that file)."""
    if isinstance(event, LineIngested | LineMalformed | LineOversized):
        sha = position.sha256 if position is not None else None
        return IngestPosition(offset=line_end(event), sha256=sha, last_line=event)
    if isinstance(event, FileTruncated):
        return START
    if isinstance(event, FileSnapshotted):
        return IngestPosition(offset=event.size, sha256=event.sha256)
    return position if position is not None else START


_FILE_EVENTS = (LineIngested, LineMalformed, LineOversized, FileTruncated, FileSnapshotted)


def fold_positions(
    events: Iterable[Event | Recorded], initial: Positions | None = None
) -> Positions:
    """Fold recorded ingest events (bare or in their envelope) into positions.

    Events of other types are ignored, so a whole stream can be passed.
    """
    files: dict[FileKey, IngestPosition] = dict(initial.files) if initial is not None else {}
    closed = initial.closed if initial is not None else False
    for item in events:
        event = item.event if isinstance(item, Recorded) else item
        if isinstance(event, _FILE_EVENTS):
            key = (event.source, event.path)
            files[key] = advance(files.get(key), event)
        elif isinstance(event, IngestionClosed):
            closed = True
    return Positions(files=files, closed=closed)


def closed_files(positions: Positions | Mapping[FileKey, IngestPosition]) -> dict[str, int]:
    """``IngestionClosed.files`` for a set of positions: ``{"source:path": offset}``."""
    files = positions.files if isinstance(positions, Positions) else positions
    return {file_key(s, p): pos.offset for (s, p), pos in sorted(files.items())}
