"""What a fold may add of an attempt's recorded figures. Pure.

The folds (run cost, budget, status rows) read figures a capture recorded from where the
agent can write (:mod:`arenad.recovery.bounds` checked them then). They check again as
they read: a value an older arenad recorded (``cost = 1e300``, ``-1000``) is unknown
(None) here, so no fold adds it or overflows on it. It sits in ``cell`` (below the
recovery that records the figures) so the cell's folds read it without importing recovery.
"""

from __future__ import annotations

import math
from typing import Final

__all__ = [
    "MAX_ATTEMPT_TOKENS",
    "MAX_ATTEMPT_USD",
    "attempt_tokens",
    "attempt_usd",
    "out_of_bounds",
]

MAX_ATTEMPT_USD: Final = 100_000.0
"""One attempt's recorded cost, as a fold reads it from the log."""
MAX_ATTEMPT_TOKENS: Final = 10**12
"""One attempt's recorded token count, as a fold reads it from the log."""


def out_of_bounds(value: float | int, ceiling: float) -> str | None:
    """Why ``value`` cannot be a figure (None: it can)."""
    if isinstance(value, float) and not math.isfinite(value):
        return "not a finite number"
    if value < 0:
        return "negative"
    if value > ceiling:
        return f"over the ceiling of {ceiling:g}"
    return None


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
