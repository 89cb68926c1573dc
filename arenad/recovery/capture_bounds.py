"""How much of an agent's opencode store a capture keeps. Pure.

The store is the agent's to write: one session of 38 MB, or a million sessions, must not
become an event SQLite refuses ("string or blob too big", at 1 GB), nor a daemon that
holds gigabytes to append it. So a capture is bounded, as patches are, and what it leaves
out is said, never silently dropped:

- **a message's or a part's data** is kept whole up to :data:`PART_KEEP_BYTES`. A longer
  one keeps its size and sha256 (``MessageRow.size``/``sha256``, ``PartRow`` alike), and
  its data is cut *inside* its JSON: every string longer than a limit is shortened (with a
  note of how much was cut), so a tool's huge output still reads as a tool part whose
  output was cut, and the transcript folds it as one. Data that is not JSON, or whose
  shape alone is too big, keeps its first bytes (a transcript then skips it);
- **a session** keeps messages and parts, in order, until their kept data reaches
  :data:`SESSION_KEEP_BYTES`; the rest are counted (``omitted_messages``,
  ``omitted_parts``, ``omitted_bytes``), not kept;
- **an attempt** keeps at most :data:`ATTEMPT_KEEP_BYTES` over all its sessions; a session
  past it keeps its row alone, its messages and parts counted as omitted;
- **a session row's** text values are kept up to :data:`ROW_VALUE_KEEP_CHARS` characters
  (:data:`ROW_VALUE_SPENT_CHARS` once the attempt's budget is spent); its numbers whole;
- **a store with more than** :data:`MAX_SESSIONS` sessions (for the cell) is not captured:
  a labeled gap (``AgentStoreUnavailable``), its spend unknown. No real run comes near.

So one session event holds at most about twice :data:`SESSION_KEEP_BYTES` (its rows and
the transcript folded from them), and one attempt's captures about twice
:data:`ATTEMPT_KEEP_BYTES` plus its rows.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, Final

__all__ = [
    "ATTEMPT_KEEP_BYTES",
    "MAX_SESSIONS",
    "PART_KEEP_BYTES",
    "ROW_VALUE_KEEP_CHARS",
    "ROW_VALUE_SPENT_CHARS",
    "SESSION_KEEP_BYTES",
    "Cut",
    "cut_data",
    "cut_row",
]

PART_KEEP_BYTES: Final = 64 * 1024
SESSION_KEEP_BYTES: Final = 16 * 1024 * 1024
ATTEMPT_KEEP_BYTES: Final = 64 * 1024 * 1024
ROW_VALUE_KEEP_CHARS: Final = 4096
ROW_VALUE_SPENT_CHARS: Final = 256
MAX_SESSIONS: Final = 10_000

# String limits tried, in order, when a JSON document is too big (a fraction of the bound).
_STRING_LIMITS = (PART_KEEP_BYTES // 4, PART_KEEP_BYTES // 32, 256, 32)


class Cut:
    """A value kept cut: its text, and the whole one's size (bytes) and sha256."""

    __slots__ = ("sha256", "size", "text")

    def __init__(self, text: str, size: int, sha256: str) -> None:
        self.text = text
        self.size = size
        self.sha256 = sha256


def _shorten(value: Any, limit: int) -> Any:
    if isinstance(value, str):
        if len(value) <= limit:
            return value
        return f"{value[:limit]}… [{len(value) - limit} more characters cut by arenad]"
    if isinstance(value, dict):
        return {k: _shorten(v, limit) for k, v in value.items()}
    if isinstance(value, list):
        return [_shorten(v, limit) for v in value]
    return value


def _head(data: bytes, limit: int) -> str:
    # The first bytes, ending on a whole UTF-8 character.
    return data[:limit].decode("utf-8", errors="ignore")


def cut_data(text: str, limit: int = PART_KEEP_BYTES) -> Cut | None:
    """``text`` (a message's or part's JSON data) cut to at most ``limit`` UTF-8 bytes, or
    None when it fits. JSON stays JSON where shortening its strings is enough."""
    data = text.encode("utf-8", errors="surrogatepass")
    if len(data) <= limit:
        return None
    digest = hashlib.sha256(data).hexdigest()
    try:
        value = json.loads(text)
        for string_limit in _STRING_LIMITS:
            # ASCII: a lone surrogate (JSON allows "\ud800") cannot break the UTF-8 text.
            kept = json.dumps(_shorten(value, string_limit), separators=(",", ":"))
            if len(kept) <= limit:
                return Cut(kept, len(data), digest)
    except (ValueError, RecursionError):
        pass
    return Cut(_head(data, limit), len(data), digest)


def cut_row(
    row: dict[str, Any], limit: int = ROW_VALUE_KEEP_CHARS
) -> tuple[dict[str, Any], list[str]]:
    """A session row with every text (or blob) value cut to ``limit``, and a note for each
    value cut (its column, size and sha256)."""
    out: dict[str, Any] = {}
    notes: list[str] = []
    for column, value in row.items():
        if isinstance(value, str | bytes) and len(value) > limit:
            raw = value.encode("utf-8", errors="surrogatepass") if isinstance(value, str) else value
            notes.append(
                f"row column {column}: {len(raw)} bytes, sha256 {hashlib.sha256(raw).hexdigest()},"
                f" kept {limit}"
            )
            value = value[:limit]
        out[column] = value
    return out, notes
