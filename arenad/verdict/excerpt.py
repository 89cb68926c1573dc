"""Bounded excerpts of what a cell produced (its patch, its verify log), for the log.

The files stay where they are; the log keeps a bounded piece of each with the whole
file's size and sha256, so the audit trail and ``arenad view`` still show what the agent
left after the run dirs are deleted, and a surviving copy can be checked against it. A
patch keeps its head (the first files' hunks), a verify log its tail (where a failing
check says why). Cuts fall on a UTF-8 character boundary, so a UTF-8 file gives UTF-8
text; bytes that are not UTF-8 are kept as base64, never altered.
"""

from __future__ import annotations

import base64
import hashlib
import os

from events.cell import TextExcerpt

__all__ = [
    "PATCH_KEEP_BYTES",
    "VERIFY_LOG_KEEP_BYTES",
    "file_tail_excerpt",
    "head_excerpt",
    "tail_excerpt",
]

# A patch this long is past reading in a page; its file and sha256 say the rest.
PATCH_KEEP_BYTES = 512 * 1024
VERIFY_LOG_KEEP_BYTES = 64 * 1024

_CHUNK = 1 << 20


def _encoded(kept: bytes) -> tuple[str, bool]:
    """(text, is_utf8): the bytes as text, or as base64 when they are not UTF-8."""
    try:
        return kept.decode("utf-8"), True
    except UnicodeDecodeError:
        return base64.b64encode(kept).decode("ascii"), False


def _excerpt(kept: bytes, size: int, sha256: str, cut: bool, where: str) -> TextExcerpt:
    text, utf8 = _encoded(kept)
    return TextExcerpt(
        text=text,
        encoding="utf-8" if utf8 else "base64",
        kept_bytes=len(kept),
        size=size,
        sha256=sha256,
        cut="head" if cut and where == "head" else "tail" if cut else "none",
    )


def head_excerpt(data: bytes, limit: int) -> TextExcerpt:
    """The first ``limit`` bytes of ``data`` (less, to end on a whole UTF-8 character)."""
    digest = hashlib.sha256(data).hexdigest()
    if len(data) <= limit:
        return _excerpt(data, len(data), digest, False, "head")
    kept = data[:limit]
    try:
        kept.decode("utf-8")
    except UnicodeDecodeError as exc:
        # Only a character cut in two at the very end is trimmed; anything else is
        # not UTF-8 at all, and is kept whole (as base64).
        if exc.reason == "unexpected end of data" and exc.start >= len(kept) - 3:
            kept = kept[: exc.start]
    return _excerpt(kept, len(data), digest, True, "head")


def tail_excerpt(tail: bytes, size: int, sha256: str, limit: int) -> TextExcerpt:
    """The last ``limit`` bytes of a file of ``size`` bytes (``tail``: at least those last
    bytes, or the whole file), starting on a whole UTF-8 character."""
    kept = tail[-limit:] if limit else b""
    cut = len(kept) < size
    if cut:
        # Skip the continuation bytes of a character whose start was cut off.
        skip = 0
        while skip < min(3, len(kept)) and kept[skip] & 0xC0 == 0x80:
            skip += 1
        if _encoded(kept[skip:])[1]:
            kept = kept[skip:]
    return _excerpt(kept, size, sha256, cut, "tail")


def file_tail_excerpt(path: str | os.PathLike[str], limit: int) -> TextExcerpt:
    """The tail excerpt of a file, hashing all of it (read in chunks: bounded memory)."""
    digest = hashlib.sha256()
    size = 0
    last = b""
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            digest.update(chunk)
            size += len(chunk)
            last = (last + chunk)[-limit:] if limit else b""
    return tail_excerpt(last, size, digest.hexdigest(), limit)
