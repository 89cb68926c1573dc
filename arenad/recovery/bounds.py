"""What a figure read from where the agent can write may be. Pure.

An agent can write its own opencode store (it lives in the cell's private dirs), its own
stream (a command arm's stdout is the agent's), and a supervisor's state files. A number
read from there is not spend of record until it passes these bounds:

- it is a finite number (not NaN, not ±inf: SQLite stores ``1e999`` as inf);
- it is ≥ 0;
- it is at most the ceiling: :data:`MAX_SESSION_USD` for one session's cost (or one
  streamed step's), :data:`MAX_SESSION_TOKENS` for each of a session's token counts.

A real session is far below them: the priciest models cost a few dollars per million
tokens, and a 45-minute run reads a few million. A figure past a bound is a *labeled gap*:
the figure it would have fed is unknown (None), and the value as read is kept as evidence,
as text (:class:`events.cell.RejectedFigure`), never as a number a fold adds.

The folds check again what they read from the log (:data:`MAX_ATTEMPT_USD`,
:data:`MAX_ATTEMPT_TOKENS` for one attempt's recorded total), so a value an older arenad
recorded (``cost = 1e300``, ``-1000``) is unknown there too, and no fold can overflow on it.
"""

from __future__ import annotations

import math
from typing import Final

from events.cell import RejectedFigure

__all__ = [
    "MAX_ATTEMPT_TOKENS",
    "MAX_ATTEMPT_USD",
    "MAX_REJECTED_KEPT",
    "MAX_SESSION_TOKENS",
    "MAX_SESSION_USD",
    "attempt_tokens",
    "attempt_usd",
    "out_of_bounds",
    "raw_text",
    "rejected",
]

MAX_SESSION_USD: Final = 1_000.0
"""One session's cost, or one streamed step's, in USD."""
MAX_SESSION_TOKENS: Final = 1_000_000_000
"""Each token count of one session (input, output, reasoning, cache read, cache write)."""
MAX_ATTEMPT_USD: Final = 100_000.0
"""One attempt's recorded cost, as a fold reads it from the log."""
MAX_ATTEMPT_TOKENS: Final = 10**12
"""One attempt's recorded token count, as a fold reads it from the log."""
MAX_REJECTED_KEPT: Final = 100
"""Rejected figures kept as evidence per attempt; a last entry counts the rest."""
_RAW_CHARS = 100


def out_of_bounds(value: float | int, ceiling: float) -> str | None:
    """Why ``value`` cannot be a figure (None: it can)."""
    if isinstance(value, float) and not math.isfinite(value):
        return "not a finite number"
    if value < 0:
        return "negative"
    if value > ceiling:
        return f"over the ceiling of {ceiling:g}"
    return None


def raw_text(value: object) -> str:
    """The value as read, as evidence text (bounded)."""
    text = repr(value) if isinstance(value, float) else str(value)
    return text if len(text) <= _RAW_CHARS else text[: _RAW_CHARS - 1] + "…"


def rejected(where: str, field: str, value: object, reason: str, source: str) -> RejectedFigure:
    return RejectedFigure(
        source=source, where=where, field=field, raw=raw_text(value), reason=reason
    )


def _number(value: object) -> float | int | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return value


def attempt_usd(value: object) -> float | None:
    """A recorded attempt cost a fold may add (None: unknown, or out of bounds)."""
    number = _number(value)
    if number is None or out_of_bounds(number, MAX_ATTEMPT_USD) is not None:
        return None
    return float(number)


def attempt_tokens(value: object) -> int | None:
    """A recorded attempt token count a fold may add (None: unknown, or out of bounds)."""
    number = _number(value)
    if not isinstance(number, int) or out_of_bounds(number, MAX_ATTEMPT_TOKENS) is not None:
        return None
    return number
