"""One watched file turned into ingest events, read in bounded chunks.

A :class:`FileTailer` separates what it has *read* from what is *committed*:
:meth:`FileTailer.poll` reads ahead and returns events without moving the
committed position; the caller hands the events to its sink and calls
:meth:`FileTailer.commit` only once the sink returned (or
:meth:`FileTailer.rollback` if it raised). A crash between read and commit
therefore re-reads the same bytes from the committed position, which the log's
events determine (:func:`arenad.ingest.offsets.fold_positions`).

Two modes:

``"lines"`` (journal.jsonl, workers/*.ndjson, …)
    Complete lines become LineIngested/LineMalformed/LineOversized
    (:mod:`arenad.ingest.lines`; a line past the limit is streamed, never held whole).
    An incomplete trailing line stays unread until its newline arrives, or until
    the file is finished (:meth:`FileTailer.drain`, or the path is replaced),
    when it is ingested flagged ``partial``.

    - *Shrunk*: the file (same inode) is now shorter than the committed line
      boundary → ``FileTruncated(reason="shrunk")``, then re-ingest from 0. If only
      a not-yet-ingested incomplete tail was cut off, the tail is forgotten and
      reading continues: nothing ingested was lost, so nothing is reported. (An
      incomplete tail of up to ``chunk_size`` bytes is re-read by every poll rather
      than kept, so a tail cut off and written over is never spliced.)
    - *Replaced*: the path now names another inode. The old file is read to its
      end first (its unterminated tail flagged ``partial``), then
      ``FileTruncated(reason="replaced")``, then the new file from 0.
    - *On open* (first poll, restart, rollback) the committed position is checked
      against the file: shorter → ``shrunk``; the bytes of the position's
      ``last_line`` differ from the file's → ``replaced`` (the events carry no
      inode, so a restart recognises a replaced file by content).

``"snapshot"`` (state.json)
    The whole file is read on every poll; when its sha256 differs from the last
    snapshot and it parses as JSON, one FileSnapshotted(content, sha256, size).
    Content that does not parse is a torn write (the writer truncates, then
    writes): nothing is recorded and the next poll looks again. At
    :meth:`FileTailer.drain` (the run is over, the writer will not finish) a
    final content that still does not parse is recorded verbatim as
    ``LineMalformed(offset=0, length=size, partial=True, error="torn snapshot: …")``
    so it is never silently lost.
"""

from __future__ import annotations

import hashlib
import os
import stat
from typing import Literal

import msgspec

from arenad.ingest.lines import (
    MAX_LINE_BYTES,
    LineEvent,
    LineSplitter,
    decode_raw,
    encode_raw,
    line_bytes,
)
from arenad.ingest.offsets import START, IngestPosition
from events.base import Event
from events.ingest import (
    FileRefused,
    FileSnapshotted,
    FileTruncated,
    LineMalformed,
    LineOversized,
)

# "text": as "lines", each line plain text rather than JSON (a command arm's output).
Mode = Literal["lines", "snapshot", "text"]

DEFAULT_CHUNK_SIZE = 1 << 20
"""Bytes read per ``pread`` (1 MiB)."""

# Non-blocking: opening a FIFO an agent put where a file was expected must not wait for a
# writer (it is then refused as not a regular file); reads of regular files never block.
_OPEN_FLAGS = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
_GONE = (FileNotFoundError, NotADirectoryError)


class FileTailer:
    """Reads one file from its committed position; see the module docstring."""

    def __init__(
        self,
        source: str,
        path: str,
        file: str | os.PathLike[str],
        mode: Mode = "lines",
        position: IngestPosition | None = None,
        *,
        chunk_size: int = DEFAULT_CHUNK_SIZE,
        max_line: int = MAX_LINE_BYTES,
        confine: str | os.PathLike[str] | None = None,
    ) -> None:
        """``confine``: the directory the file must really be inside, symbolic links
        resolved (None: not checked); a file that leads elsewhere is never read, and its
        refusal is returned once as a FileRefused event."""
        if chunk_size <= 0:
            raise ValueError("chunk_size must be positive")
        self.source = source
        self.path = path
        self.file = os.fspath(file)
        self.mode: Mode = mode
        self.chunk_size = chunk_size
        self._committed = position if position is not None else START
        self._pending = self._committed
        self._last: LineEvent | None = self._committed.last_line
        self._fd: int | None = None
        self._ident: tuple[int, int] | None = None
        self._splitter = LineSplitter(
            source, path, self._committed.offset, max_line=max_line, text=mode == "text"
        )
        self._confine = None if confine is None else os.path.realpath(confine)
        # Whether the refusal was returned (pending) and is in the log (committed).
        self._refused = self._refused_committed = False

    # -- state -------------------------------------------------------------------

    @property
    def committed(self) -> IngestPosition:
        """The position as of the last :meth:`commit` (what the log holds)."""
        return self._committed

    @property
    def pending(self) -> IngestPosition:
        """The position after every event returned so far (committed or not)."""
        return self._pending

    def commit(self) -> None:
        """The events returned since the last commit are durable."""
        self._committed = self._pending
        self._refused_committed = self._refused

    def rollback(self) -> None:
        """Forget everything read since the last commit; the next poll re-reads it."""
        self._close_fd()
        self._pending = self._committed
        self._refused = self._refused_committed
        self._last = self._committed.last_line
        self._splitter.reset(self._committed.offset)

    def close(self) -> None:
        """Release the file descriptor; a later poll reopens at the pending position."""
        self._close_fd()
        self._splitter.discard_remainder()

    # -- reading -----------------------------------------------------------------

    def poll(
        self,
        max_events: int = -1,
        max_bytes: int = -1,
        *,
        observed_at_ms: int | None = None,
    ) -> tuple[list[Event], int]:
        """New events since the last poll, and the file bytes they cover.

        Bounded by ``max_events`` events and (roughly: at least one whole line)
        ``max_bytes`` bytes; negative means unbounded. Call again while it returns
        events to read on.
        """
        if self.mode == "snapshot":
            return self._poll_snapshot(final=False)
        return self._poll_lines(max_events, max_bytes, observed_at_ms)

    def drain(self, *, observed_at_ms: int | None = None) -> tuple[list[Event], int]:
        """Everything left, to end of file, the unterminated tail flagged partial.

        For the end of a run: afterwards the pending position is final.
        """
        if self.mode == "snapshot":
            return self._poll_snapshot(final=True)
        events, nbytes = self._poll_lines(-1, -1, observed_at_ms)
        tail, more = self._splitter.drain(partial=True, observed_at_ms=observed_at_ms)
        if tail:
            events.extend(tail)
            self._last = tail[-1]
            self._pending = IngestPosition(offset=self._splitter.offset, last_line=self._last)
        return events, nbytes + more

    def _poll_lines(
        self, max_events: int, max_bytes: int, observed_at_ms: int | None
    ) -> tuple[list[Event], int]:
        events: list[Event] = []
        nbytes = 0
        if self._fd is None and not self._open(events):
            self._settle()
            return events, nbytes
        sp = self._splitter
        if 0 < sp.buffered <= self.chunk_size and not sp.has_line():
            # Re-read an unterminated tail rather than trust it: the writer may have
            # cut it off and written on since (no shrink is visible then).
            sp.discard_remainder()
        while True:
            want = room = -1
            if max_events >= 0:
                want = max_events - len(events)
                if want <= 0:
                    break
            if max_bytes >= 0:
                room = max_bytes - nbytes
                if room <= 0:
                    break
            got, n = sp.take(want, room, observed_at_ms=observed_at_ms)
            if got:
                events.extend(got)
                nbytes += n
                self._last = got[-1]
                continue
            fd = self._fd
            assert fd is not None
            data = os.pread(fd, self.chunk_size, sp.read_end)
            if data:
                sp.feed(data)
                continue
            more, tail_bytes = self._at_eof(events, observed_at_ms)
            nbytes += tail_bytes
            if not more:
                break
        self._settle()
        return events, nbytes

    def _settle(self) -> None:
        self._pending = IngestPosition(offset=self._splitter.offset, last_line=self._last)

    def _open(self, events: list[Event]) -> bool:
        """Open the path; check the pending position against it (maybe truncating)."""
        fd = self._open_confined(events)
        if fd is None:
            return False
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            os.close(fd)
            return False
        start = self._splitter.offset
        if start > 0:
            reason: Literal["shrunk", "replaced"] | None = None
            if st.st_size < start:
                reason = "shrunk"
            elif not _tail_matches(fd, self._last):
                reason = "replaced"
            if reason is not None:
                events.append(self._truncated(start, st.st_size, reason))
        self._fd = fd
        self._ident = (st.st_dev, st.st_ino)
        return True

    def _at_eof(self, events: list[Event], observed_at_ms: int | None) -> tuple[bool, int]:
        """At the end of the open file: did it shrink or get replaced? (continue?, bytes)"""
        sp = self._splitter
        fd = self._fd
        assert fd is not None
        try:
            st = os.stat(self.file)
        except _GONE:
            st = None  # unlinked: keep reading the open file, it may still grow
        if st is not None and (st.st_dev, st.st_ino) != self._ident:
            tail, nbytes = sp.drain(partial=True, observed_at_ms=observed_at_ms)
            events.extend(tail)
            self._close_fd()
            events.append(self._truncated(sp.offset, st.st_size, "replaced"))
            return self._open(events), nbytes
        size = os.fstat(fd).st_size if st is None else st.st_size
        if size < sp.offset:
            events.append(self._truncated(sp.offset, size, "shrunk"))
            return True, 0
        if size < sp.read_end:
            sp.discard_remainder()
            return True, 0
        return False, 0

    def _truncated(
        self, previous: int, size: int, reason: Literal["shrunk", "replaced"]
    ) -> FileTruncated:
        self._splitter.reset(0)
        self._last = None
        return FileTruncated(
            source=self.source,
            path=self.path,
            previous_offset=previous,
            new_size=size,
            reason=reason,
        )

    def _close_fd(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
            self._ident = None

    def _open_confined(self, events: list[Event]) -> int | None:
        """A descriptor of the file, or None: not there, or outside the confinement
        (checked before opening, and on what was opened: a link swapped in between)."""
        if not self._inside(os.path.realpath(self.file)):
            self._refuse(events)
            return None
        try:
            fd = os.open(self.file, _OPEN_FLAGS)
        except _GONE:
            return None
        try:
            opened = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            opened = None
        if opened is not None and not self._inside(opened):
            os.close(fd)
            self._refuse(events)
            return None
        return fd

    def _inside(self, real: str) -> bool:
        top = self._confine
        return top is None or real == top or real.startswith(top.rstrip(os.sep) + os.sep)

    def _refuse(self, events: list[Event]) -> None:
        """Record the refusal once (again after a rollback dropped it)."""
        if not self._refused:
            self._refused = True
            reason = f"leads outside {self._confine} (a symbolic link?): not read"
            events.append(FileRefused(source=self.source, path=self.path, reason=reason))
        return None

    def _poll_snapshot(self, *, final: bool) -> tuple[list[Event], int]:
        refused: list[Event] = []
        fd = self._open_confined(refused)
        if fd is None:
            return refused, 0
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                return [], 0
            with os.fdopen(fd, "rb", closefd=False) as f:
                data = f.read()
        finally:
            os.close(fd)
        sha = hashlib.sha256(data).hexdigest()
        if sha == self._pending.sha256:
            return [], 0
        try:
            content = data.decode("utf-8")
            msgspec.json.decode(data)
        except (UnicodeDecodeError, msgspec.DecodeError) as exc:
            last = self._pending.last_line
            if not final or (last is not None and _is_same(last, data)):
                return [], 0
            raw, encoding = encode_raw(data)
            malformed = LineMalformed(
                source=self.source,
                path=self.path,
                offset=0,
                length=len(data),
                raw=raw,
                encoding=encoding,
                error=f"torn snapshot: {exc}",
                partial=True,
            )
            self._pending = IngestPosition(
                offset=len(data), sha256=self._pending.sha256, last_line=malformed
            )
            return [malformed], len(data)
        snapshot = FileSnapshotted(
            source=self.source, path=self.path, content=content, sha256=sha, size=len(data)
        )
        self._pending = IngestPosition(offset=len(data), sha256=sha)
        return [snapshot], len(data)


def _tail_matches(fd: int, last: LineEvent | None) -> bool:
    """Whether the file still holds the last recorded line's bytes at its offset (of an
    oversized line: its first bytes, and its newline where the length says)."""
    if last is None:
        return True
    if isinstance(last, LineOversized):
        head = decode_raw(last.head, last.encoding)
        if os.pread(fd, len(head), last.offset) != head:
            return False
        return last.partial or os.pread(fd, 1, last.offset + last.length) == b"\n"
    expected = line_bytes(last)
    return os.pread(fd, len(expected), last.offset) == expected


def _is_same(last: LineEvent, data: bytes) -> bool:
    return not isinstance(last, LineOversized) and last.offset == 0 and line_bytes(last) == data
