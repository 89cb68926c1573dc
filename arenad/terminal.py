"""Text from the log, made safe for a terminal: the one escape every rendering uses.

Event strings carry what agents wrote (a failure reason taken from stderr, a path, a
session's title). Printed raw, a control character is an instruction to the terminal: an
OSC 52 sequence writes the reader's clipboard, an unterminated OSC swallows what follows,
ESC sequences move the cursor or repaint what was printed before. So every CLI and log
rendering of an event string goes through :func:`printable`, which writes each such
character as a visible escape instead (``\\x1b``, ``\\x9b``, ``\\u202e``), the way the
ingest path keeps a line holding control characters as data (base64), never as text.

Escaped: the C0 controls (U+0000–U+001F, newline and tab too unless ``newlines``), DEL
(U+007F), the C1 controls (U+0080–U+009F, which some terminals obey in UTF-8 as well),
and the characters that reorder or break what is shown around them: the bidirectional
marks, embeddings, overrides and isolates (a "Trojan source" line reads differently from
what it is) and the Unicode line and paragraph separators. Everything else, any script or
emoji, prints as itself. Pure.
"""

from __future__ import annotations

import re

__all__ = ["json_printable", "printable"]

_BIDI_AND_SEPARATORS = "\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069"
_ONE_LINE = re.compile(f"[\\x00-\\x1f\\x7f-\\x9f{_BIDI_AND_SEPARATORS}]")
# Newline and tab stay: a multi-line rendering (a log record with its traceback).
_LINES = re.compile(f"[\\x00-\\x08\\x0b-\\x1f\\x7f-\\x9f{_BIDI_AND_SEPARATORS}]")


_SHORT = {"\n": "\\n", "\t": "\\t", "\r": "\\r"}


def _escape(match: re.Match[str]) -> str:
    char = match.group()
    code = ord(char)
    short = _SHORT.get(char)
    if short is not None:
        return short
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def printable(text: str, *, newlines: bool = False) -> str:
    """``text`` with every control character written as a visible escape; with
    ``newlines``, line feeds and tabs are kept (a multi-line rendering)."""
    pattern = _LINES if newlines else _ONE_LINE
    return pattern.sub(_escape, text)


# In UTF-8, U+0080–U+009F are the two bytes C2 80 – C2 9F, and C2 is only ever a lead
# byte: in valid UTF-8 the pair cannot be part of another character. JSON output holds
# non-ASCII characters only inside strings, where "\\u0080" means the same character.
_JSON_RAW = re.compile(
    b"\\x7f|\\xc2[\\x80-\\x9f]|\\xd8\\x9c|\\xe2\\x80[\\x8e\\x8f\\xa8-\\xae]|\\xe2\\x81[\\xa6-\\xa9]"
)


def _json_escape(match: re.Match[bytes]) -> bytes:
    return f"\\u{ord(match.group().decode('utf-8')):04x}".encode("ascii")


def json_printable(data: bytes) -> bytes:
    """A UTF-8 JSON document with the characters :func:`printable` escapes written as
    ``\\uXXXX`` (the JSON encoder already does so for C0): the same value, safe to print."""
    return _JSON_RAW.sub(_json_escape, data)
