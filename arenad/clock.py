"""Time: the clock is passed in (writers stamp events with it; folds never read one), and
waiting on an asyncio.Event with a timeout without losing a cancellation."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

Clock = Callable[[], int]
"""Returns the current UTC time in epoch milliseconds."""


def system_clock() -> int:
    return time.time_ns() // 1_000_000


async def wait_for_event(event: asyncio.Event, timeout_s: float) -> bool:
    """Wait until ``event`` is set or ``timeout_s`` passes; True if it was set.

    Not ``asyncio.wait_for``: on Python 3.11 it swallows a cancellation that arrives just
    as the awaited event completes (CPython gh-86296). That once left the daemon's control
    follower un-cancellable at shutdown, hanging the daemon. ``asyncio.timeout`` tells
    its own timeout from an outside cancellation.
    """
    try:
        async with asyncio.timeout(timeout_s):
            await event.wait()
    except TimeoutError:
        return event.is_set()
    return True
