"""Events of live file ingestion (stream ``ingest/<cell_id>/<attempt>``).

Offsets live here, in the log: a restarted ingester folds these events to learn
where each file resumes, so a restart neither re-ingests nor skips a line.
"""

from __future__ import annotations

from typing import Literal

from events.base import Event

Encoding = Literal["utf-8", "base64"]


class LineIngested(Event, tag="ingest.line", frozen=True, kw_only=True):
    # Which watched source: 'supervisor' (the run dir), 'brain', 'stdout' (solo arm).
    source: str
    # Path relative to the source root.
    path: str
    offset: int
    length: int
    # The raw line without its newline; base64 when it is not valid UTF-8.
    raw: str
    encoding: Encoding = "utf-8"
    # The JSON object's "kind" (journal, workers) or "type" (opencode stream).
    kind: str | None = None
    # A trailing line ingested at run end without its newline.
    partial: bool = False
    observed_at_ms: int | None = None


class LineMalformed(Event, tag="ingest.malformed", frozen=True, kw_only=True):
    source: str
    path: str
    offset: int
    length: int
    # The raw line: base64 when it is not valid UTF-8, or holds control characters (JSON
    # would escape each one to six bytes: a line of NULs would grow sixfold in the log).
    raw: str
    encoding: Encoding = "utf-8"
    error: str
    partial: bool = False


class LineOversized(Event, tag="ingest.oversized", frozen=True, kw_only=True):
    """A line longer than the ingester's limit (``limit_bytes``; 1 MiB by default): the
    file keeps it whole, the log its full length, its sha256 and its first bytes."""

    source: str
    path: str
    offset: int
    # The whole line's byte count, without its newline.
    length: int
    # sha256 (hex) of the whole line's bytes, without its newline.
    sha256: str
    # The line's first bytes (as for LineMalformed.raw: text, else base64).
    head: str
    encoding: Encoding = "utf-8"
    limit_bytes: int
    partial: bool = False
    observed_at_ms: int | None = None


class FileTruncated(Event, tag="ingest.truncated", frozen=True, kw_only=True):
    source: str
    path: str
    previous_offset: int
    new_size: int
    reason: Literal["shrunk", "replaced"]


class FileSnapshotted(Event, tag="ingest.snapshot", frozen=True, kw_only=True):
    """A whole-file capture (state.json) whenever its content changes."""

    source: str
    path: str
    content: str
    sha256: str
    size: int


class FileRefused(Event, tag="ingest.refused", frozen=True, kw_only=True):
    """A selected path the daemon will not read, recorded once: it leads outside the
    directory its source is confined to (a symbolic link the agent made, say)."""

    source: str
    path: str
    reason: str


class IngestionClosed(Event, tag="ingest.closed", frozen=True, kw_only=True):
    """The run ended and every watched file was drained to its end."""

    files: dict[str, int]


class InotifyEventsLost(Event, tag="ingest.events-lost", frozen=True, kw_only=True):
    """The kernel's inotify queue overflowed (``fs.inotify.max_queued_events``) and
    notifications were dropped: every watcher on the instance rescanned its roots at once.
    Ingestion resumes from offsets, so a rescan neither loses nor repeats a line. Recorded
    on the ``daemon`` stream for the daemon's shared instance, else on the watcher's own
    ingest stream."""

    # Watchers (one per run) told to rescan.
    watchers: int


class InotifyWatchFailed(Event, tag="ingest.watch-failed", frozen=True, kw_only=True):
    """A watcher's notification callback raised. Its watches were removed and it reads its
    files by periodic rescans from then on; the instance's reader went on for the others."""

    # The watched root directory.
    path: str
    error: str
