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
  - a malformed line holding control characters (other than tab and CR) is stored
    base64 too: the log's JSON would escape each one to six bytes (``\u0000``), where
    base64 costs four bytes per three;
  - an empty or whitespace-only line (space, tab, CR) is malformed with error
    ``"empty line"``;
  - valid JSON that is not an object (array, number, …) is malformed with
    msgspec's message (``"Expected `object`, got `array`"``).
- **The line limit.** A line longer than ``max_line`` bytes (:data:`MAX_LINE_BYTES`,
  1 MiB, unless the caller says otherwise) becomes :class:`~events.ingest.LineOversized`:
  its full length, its sha256 and its first :data:`HEAD_BYTES` bytes; the file keeps the
  whole line. The splitter never holds more of such a line than the limit plus one read
  (it hashes the rest as it streams by), so a 50 MB line costs what a 1 MiB one does.
"""

from __future__ import annotations

import base64
import hashlib
import re
from typing import Any

import msgspec

from events.ingest import Encoding, LineIngested, LineMalformed, LineOversized

LineEvent = LineIngested | LineMalformed | LineOversized

MAX_LINE_BYTES = 1 << 20
"""The longest line recorded whole (1 MiB); a longer one is a LineOversized."""
HEAD_BYTES = 4096
"""The bytes of an oversized line kept in its event."""

_NL = b"\n"
_BLANK = b" \t\r"
# Characters JSON escapes to six bytes (``\u0000``); tab and CR stay as text.
_CONTROL = re.compile(rb"[\x00-\x08\x0a-\x0c\x0e-\x1f]")


class _Head(msgspec.Struct):
    """Just the two fields that name a line's kind; the rest is validated and skipped."""

    kind: Any = None
    type: Any = None


_head_decoder = msgspec.json.Decoder(_Head)


def encode_raw(data: bytes) -> tuple[str, Encoding]:
    """``data`` as stored in an event: UTF-8 text, else (invalid UTF-8, or control
    characters that JSON would blow up sixfold) base64."""
    if _CONTROL.search(data) is None:
        try:
            return data.decode("utf-8"), "utf-8"
        except UnicodeDecodeError:
            pass
    return _b64(data), "base64"


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _head(head: bytes) -> tuple[str, Encoding]:
    """An oversized line's first bytes as stored: text if they are text but for a
    character cut in two at the end (its up to three bytes are dropped), else base64."""
    whole = encode_raw(head)
    if whole[1] == "utf-8":
        return whole
    for cut in (1, 2, 3):
        text, encoding = encode_raw(head[:-cut])
        if encoding == "utf-8":
            return text, encoding
    return whole


class _Oversized:
    """A line past the limit, streamed: its first bytes, a running sha256, its length."""

    __slots__ = ("digest", "head", "length")

    def __init__(self, first: bytes) -> None:
        self.head = first[:HEAD_BYTES]
        self.digest = hashlib.sha256(first)
        self.length = len(first)

    def add(self, data: bytes) -> None:
        self.digest.update(data)
        self.length += len(data)

    def event(
        self,
        source: str,
        path: str,
        offset: int,
        limit: int,
        *,
        partial: bool,
        observed_at_ms: int | None,
    ) -> LineOversized:
        head, encoding = _head(self.head)
        return LineOversized(
            source=source,
            path=path,
            offset=offset,
            length=self.length,
            sha256=self.digest.hexdigest(),
            head=head,
            encoding=encoding,
            limit_bytes=limit,
            partial=partial,
            observed_at_ms=observed_at_ms,
        )


def decode_raw(raw: str, encoding: Encoding) -> bytes:
    """The exact bytes an event's ``raw`` stands for (inverse of :func:`encode_raw`)."""
    return base64.b64decode(raw) if encoding == "base64" else raw.encode("utf-8")


def line_bytes(event: LineIngested | LineMalformed) -> bytes:
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
    max_line: int = MAX_LINE_BYTES,
    plain_text: bool = False,
) -> LineEvent:
    """One line (without its newline) as a LineIngested, LineMalformed or (longer than
    ``max_line``) LineOversized event. ``plain_text``: the file is plain text (a command arm's
    ``output = "text"``), not JSON lines: a line of valid UTF-8 without control
    characters is ingested as it is (``kind`` None), never malformed for not being JSON."""
    if len(line) > max_line:
        big = _Oversized(line)
        return big.event(
            source, path, offset, max_line, partial=partial, observed_at_ms=observed_at_ms
        )
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError as exc:
        return LineMalformed(
            source=source,
            path=path,
            offset=offset,
            length=len(line),
            raw=_b64(line),
            encoding="base64",
            error=f"invalid UTF-8: {exc.reason} at byte {exc.start}",
            partial=partial,
        )
    if plain_text and _CONTROL.search(line) is None:
        return LineIngested(
            source=source,
            path=path,
            offset=offset,
            length=len(line),
            raw=text,
            partial=partial,
            observed_at_ms=observed_at_ms,
        )
    try:
        head = _head_decoder.decode(line)
    except msgspec.DecodeError as exc:
        control = _CONTROL.search(line) is not None
        return LineMalformed(
            source=source,
            path=path,
            offset=offset,
            length=len(line),
            raw=_b64(line) if control else text,
            encoding="base64" if control else "utf-8",
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
    ``take`` limit. An incomplete line past ``max_line`` bytes is not buffered but
    streamed into its LineOversized (first bytes, running sha256, length): the
    buffer never holds more than ``max_line`` plus one feed.
    """

    __slots__ = (
        "_big",
        "_big_done",
        "_buf",
        "_start",
        "max_line",
        "offset",
        "path",
        "source",
        "text",
    )

    def __init__(
        self,
        source: str,
        path: str,
        offset: int = 0,
        *,
        max_line: int = MAX_LINE_BYTES,
        text: bool = False,
    ) -> None:
        if max_line < 1:
            raise ValueError("max_line must be positive")
        self.source = source
        # Plain text lines (classify_line's ``text``), not JSON.
        self.text = text
        self.path = path
        self.offset = offset
        self.max_line = max_line
        self._buf = b""
        self._start = 0
        # The oversized line at ``offset`` being streamed, and whether its newline came.
        self._big: _Oversized | None = None
        self._big_done = False

    @property
    def buffered(self) -> int:
        """Bytes fed but not yet emitted."""
        big = self._big
        held = 0 if big is None else big.length + self._big_done
        return held + len(self._buf) - self._start

    @property
    def held(self) -> int:
        """Bytes kept in memory: never more than ``max_line`` plus one feed (an oversized
        line's bytes past that are hashed and let go)."""
        return len(self._buf) - self._start + (0 if self._big is None else len(self._big.head))

    @property
    def read_end(self) -> int:
        """File offset just past the last byte fed."""
        return self.offset + self.buffered

    def has_line(self) -> bool:
        """Whether a complete line is buffered (``take`` would return something)."""
        if self._big is not None:
            return self._big_done
        return self._buf.find(_NL, self._start) >= 0

    def feed(self, data: bytes) -> None:
        if not data:
            return
        big = self._big
        if big is not None and not self._big_done:
            # Streaming an oversized line: the buffer is empty until its newline.
            nl = data.find(_NL)
            if nl < 0:
                big.add(data)
                return
            big.add(data[:nl])
            self._big_done = True
            self._buf = data[nl + 1 :]
            self._start = 0
            return
        if self._start >= len(self._buf):
            self._buf = data
        else:
            self._buf = self._buf[self._start :] + data
        self._start = 0

    def reset(self, offset: int) -> None:
        """Forget everything buffered; the next byte fed is at ``offset``."""
        self.discard_remainder()
        self.offset = offset

    def discard_remainder(self) -> None:
        """Drop buffered bytes (the incomplete tail); ``offset`` is unchanged."""
        self._buf = b""
        self._start = 0
        self._big = None
        self._big_done = False

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
        events: list[LineEvent] = []
        if max_events == 0:
            return events, 0
        source = self.source
        path = self.path
        limit = self.max_line
        nbytes = 0
        count = 0
        big = self._big
        if big is not None:
            if not self._big_done:
                return events, 0
            events.append(
                big.event(
                    source,
                    path,
                    self.offset,
                    limit,
                    partial=False,
                    observed_at_ms=observed_at_ms,
                )
            )
            count = 1
            nbytes = big.length
            self.offset += big.length + 1
            self._big = None
            self._big_done = False
            if count == max_events or 0 <= max_bytes <= nbytes:
                return events, nbytes
        buf = self._buf
        find = buf.find
        pos = self._start
        off = self.offset
        append = events.append
        while count != max_events:
            nl = find(_NL, pos)
            if nl < 0:
                if len(buf) - pos > limit:
                    # Too long to keep: stream the rest of this line from here on.
                    self._big = _Oversized(buf[pos:])
                    pos = len(buf)
                break
            length = nl - pos
            append(
                classify_line(
                    source,
                    path,
                    buf[pos:nl],
                    off,
                    observed_at_ms=observed_at_ms,
                    max_line=limit,
                    plain_text=self.text,
                )
            )
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
        if not partial:
            return events, nbytes
        big = self._big
        if big is not None:
            events.append(
                big.event(
                    self.source,
                    self.path,
                    self.offset,
                    self.max_line,
                    partial=True,
                    observed_at_ms=observed_at_ms,
                )
            )
            nbytes += big.length
            self.offset += big.length
            self.discard_remainder()
        elif self.buffered:
            rest = self._buf[self._start :]
            events.append(
                classify_line(
                    self.source,
                    self.path,
                    rest,
                    self.offset,
                    partial=True,
                    observed_at_ms=observed_at_ms,
                    max_line=self.max_line,
                    plain_text=self.text,
                )
            )
            nbytes += len(rest)
            self.offset += len(rest)
            self._buf = b""
            self._start = 0
        return events, nbytes
