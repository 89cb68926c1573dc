"""wait_for_event keeps a cancellation that arrives as the event fires (asyncio.wait_for
on Python 3.11 loses it, which once hung the daemon's shutdown)."""

from __future__ import annotations

import asyncio

import pytest

from arenad.clock import wait_for_event


async def test_set_and_timeout() -> None:
    event = asyncio.Event()
    assert await wait_for_event(event, 0.01) is False
    event.set()
    assert await wait_for_event(event, 60) is True


async def test_a_cancellation_as_the_event_fires_is_delivered() -> None:
    event = asyncio.Event()
    waiter = asyncio.create_task(wait_for_event(event, 60))
    await asyncio.sleep(0)  # the waiter is waiting (a yield, not a wait)
    event.set()
    assert waiter.cancel(), "the waiter had not finished: the cancellation is pending"
    with pytest.raises(asyncio.CancelledError):
        await waiter
