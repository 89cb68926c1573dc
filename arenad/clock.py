"""The clock is passed in: writers stamp events with it; folds never read one."""

from __future__ import annotations

import time
from collections.abc import Callable

Clock = Callable[[], int]
"""Returns the current UTC time in epoch milliseconds."""


def system_clock() -> int:
    return time.time_ns() // 1_000_000
