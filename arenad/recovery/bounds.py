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

The folds check again what they read from the log (:mod:`arenad.cell.bounds`:
:data:`MAX_ATTEMPT_USD`, :data:`MAX_ATTEMPT_TOKENS` for one attempt's recorded total), so a
value an older arenad recorded (``cost = 1e300``, ``-1000``) is unknown there too, and no
fold can overflow on it. Those and the one test of a figure (:func:`out_of_bounds`) live
there, below the cell's folds, and are named here too for the captures and their readers.
"""

from __future__ import annotations

from typing import Final

from arenad.cell.bounds import (
    MAX_ATTEMPT_TOKENS,
    MAX_ATTEMPT_USD,
    attempt_tokens,
    attempt_usd,
    out_of_bounds,
)
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
MAX_REJECTED_KEPT: Final = 100
"""Rejected figures kept as evidence per attempt; a last entry counts the rest."""
_RAW_CHARS = 100


def raw_text(value: object) -> str:
    """The value as read, as evidence text (bounded)."""
    text = repr(value) if isinstance(value, float) else str(value)
    return text if len(text) <= _RAW_CHARS else text[: _RAW_CHARS - 1] + "…"


def rejected(where: str, field: str, value: object, reason: str, source: str) -> RejectedFigure:
    return RejectedFigure(
        source=source, where=where, field=field, raw=raw_text(value), reason=reason
    )
