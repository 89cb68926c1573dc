"""Bytes to line events: split newline-terminated lines and classify each one.

Pure: no I/O, no clock (``observed_at_ms`` is passed in by the caller).

Semantics, shared with :mod:`arenad.ingest.offsets`:

- A *line* is the bytes between two newlines (``b"\\n"``). ``offset`` is the byte
  offset of its first byte; ``length`` is its byte count **excluding** the newline
  (a ``b"\\r"`` before the newline is part of the line and counted). The next line
  starts at ``offset + length + 1``.
- A *partial* line is a trailing remainder without a newline, ingested only when
  its file is finished (:meth:`LineSplitter.drain`); the next offset is then
  ``offset + length``.
- A line that is valid UTF-8 and parses as one JSON **object** becomes
  :class:`~events.ingest.LineIngested`, ``kind`` = ``obj["kind"]`` if it is a
  string, else ``obj["type"]`` if that is a string, else ``None``.
- Anything else becomes :class:`~events.ingest.LineMalformed` with the raw bytes
  and the reason. Nothing is ever dropped:
  - a line that is not valid UTF-8 is stored base64 (``encoding="base64"``) and is
    malformed (JSON text is UTF-8 by definition), error ``"invalid UTF-8: …"``;
  - an empty or whitespace-only line (space, tab, CR) is malformed with error
    ``"empty line"``;
  - valid JSON that is not an object (array, number, …) is malformed with
    msgspec's message (``"Expected `object`, got `array`"``).
"""

from __future__ import annotations

import base64
from typing import Any

import msgspec

from events.ingest import Encoding, LineIngested, LineMalformed

LineEvent = LineIngested | LineMalformed

_NL = b"\n"
_BLANK = b" \t\r"


class _Head(msgspec.Struct):
    """Just the two fields that name a line's kind; the rest is validated and skipped."""

    kind: Any = None
    type: Any = None


_head_decoder = msgspec.json.Decoder(_Head)


def encode_raw(data: bytes) -> tuple[str, Encoding]:
    """``data`` as stored in an event: UTF-8 text, else base64."""
    try:
        return data.decode("utf-8"), "utf-8"
    except UnicodeDecodeError:
        return base64.b64encode(data).decode("ascii"), "base64"


def decode_raw(raw: str, encoding: Encoding) -> bytes:
    """The exact bytes an event's ``raw`` stands for (inverse of :func:`encode_raw`)."""
    return base64.b64decode(raw) if encoding == "base64" else raw.encode("utf-8")


def line_bytes(event: LineEvent) -> bytes:
    """The file bytes an event covers: the raw line plus its newline unless partial."""
    data = decode_raw(event.raw, event.encoding)
    return data if event.partial else data + _NL


def classify_line(
    source: str,
    path: str,
    line: bytes,
    offset: int,
    *,
    partial: bool = False,
    observed_at_ms: int | None = None,
) -> LineEvent:
    """One line (without its newline) as a LineIngested or LineMalformed event."""
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError as exc:
        return LineMalformed(
            source=source,
            path=path,
            offset=offset,
            length=len(line),
            raw=base64.b64encode(line).decode("ascii"),
            encoding="base64",
            error=f"invalid UTF-8: {exc.reason} at byte {exc.start}",
            partial=partial,
        )
    try:
        head = _head_decoder.decode(line)
    except msgspec.DecodeError as exc:
        return LineMalformed(
            source=source,
            path=path,
            offset=offset,
            length=len(line),
            raw=text,
            error="empty line" if not line.strip(_BLANK) else str(exc),
            partial=partial,
        )
    kind = head.kind
    if not isinstance(kind, str):
        kind = head.type if isinstance(head.type, str) else None
    return LineIngested(
        source=source,
        path=path,
        offset=offset,
        length=len(line),
        raw=text,
        kind=kind,
        partial=partial,
        observed_at_ms=observed_at_ms,
    )


def split_lines(data: bytes) -> tuple[list[bytes], int]:
    """The complete lines in ``data`` (without newlines) and the bytes they consume.

    ``data[consumed:]`` is the trailing incomplete remainder, left for later.
    """
    end = data.rfind(_NL) + 1
    if end == 0:
        return [], 0
    return data[: end - 1].split(_NL), end


def parse_lines(
    source: str,
    path: str,
    data: bytes,
    offset: int,
    *,
    observed_at_ms: int | None = None,
) -> tuple[list[LineEvent], int]:
    """Events for the complete lines of ``data`` read from ``offset``, and bytes consumed."""
    lines, consumed = split_lines(data)
    events: list[LineEvent] = []
    at = offset
    for line in lines:
        events.append(classify_line(source, path, line, at, observed_at_ms=observed_at_ms))
        at += len(line) + 1
    return events, consumed


class LineSplitter:
    """Incremental splitter for one file: feed bytes as they are read, take events.

    ``offset`` is the file offset of the first byte not yet turned into an event
    (always a line start). Bytes fed but not taken stay buffered: the trailing
    incomplete line until its newline arrives, and complete lines beyond a
    ``take`` limit.
    """

    __slots__ = ("_buf", "_start", "offset", "path", "source")

    def __init__(self, source: str, path: str, offset: int = 0) -> None:
        self.source = source
        self.path = path
        self.offset = offset
        self._buf = b""
        self._start = 0

    @property
    def buffered(self) -> int:
        """Bytes fed but not yet emitted."""
        return len(self._buf) - self._start

    @property
    def read_end(self) -> int:
        """File offset just past the last byte fed."""
        return self.offset + self.buffered

    def has_line(self) -> bool:
        """Whether a complete line is buffered (``take`` would return something)."""
        return self._buf.find(_NL, self._start) >= 0

    def feed(self, data: bytes) -> None:
        if not data:
            return
        if self._start >= len(self._buf):
            self._buf = data
        else:
            self._buf = self._buf[self._start :] + data
        self._start = 0

    def reset(self, offset: int) -> None:
        """Forget everything buffered; the next byte fed is at ``offset``."""
        self._buf = b""
        self._start = 0
        self.offset = offset

    def discard_remainder(self) -> None:
        """Drop buffered bytes (the incomplete tail); ``offset`` is unchanged."""
        self._buf = b""
        self._start = 0

    def take(
        self,
        max_events: int = -1,
        max_bytes: int = -1,
        *,
        observed_at_ms: int | None = None,
    ) -> tuple[list[LineEvent], int]:
        """Events for buffered complete lines, and the line bytes they cover.

        Stops after ``max_events`` events or once ``max_bytes`` line bytes are
        covered (negative: no limit); at least one line is taken if one is
        buffered and ``max_events`` is not 0, however long it is.
        """
        buf = self._buf
        find = buf.find
        pos = self._start
        off = self.offset
        source = self.source
        path = self.path
        events: list[LineEvent] = []
        append = events.append
        nbytes = 0
        count = 0
        while count != max_events:
            nl = find(_NL, pos)
            if nl < 0:
                break
            length = nl - pos
            append(classify_line(source, path, buf[pos:nl], off, observed_at_ms=observed_at_ms))
            count += 1
            nbytes += length
            off += length + 1
            pos = nl + 1
            if 0 <= max_bytes <= nbytes:
                break
        self._start = pos
        self.offset = off
        if pos >= len(buf):
            self._buf = b""
            self._start = 0
        return events, nbytes

    def drain(
        self, *, partial: bool = True, observed_at_ms: int | None = None
    ) -> tuple[list[LineEvent], int]:
        """All buffered complete lines, then (if ``partial``) the remainder flagged partial.

        With ``partial=False`` the incomplete remainder stays buffered.
        """
        events, nbytes = self.take(observed_at_ms=observed_at_ms)
        if partial and self.buffered:
            rest = self._buf[self._start :]
            events.append(
                classify_line(
                    self.source,
                    self.path,
                    rest,
                    self.offset,
                    partial=True,
                    observed_at_ms=observed_at_ms,
                )
            )
            nbytes += len(rest)
            self.offset += len(rest)
            self._buf = b""
            self._start = 0
        return events, nbytes
