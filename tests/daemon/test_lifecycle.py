"""The daemon's lifecycle: a failed side task stops it at once, its resources are torn
down, and the signal handlers it installed are restored (in-process, real home)."""

from __future__ import annotations

import asyncio
import os
import re
import signal
from pathlib import Path

import pytest

from arenad import app
from arenad.daemon.daemon import (
    Daemon,
    DaemonFatal,
    DaemonOptions,
    crash_reason,
    signal_handlers,
)
from arenad.home import Home, open_store
from events.control import DaemonStarted, DaemonStopped


async def test_a_side_task_that_fails_stops_the_daemon_at_once(tmp_path: Path) -> None:
    home = Home(tmp_path / "home")
    await app.init_home(home)
    async with open_store(home) as store:
        daemon = Daemon(store, home, DaemonOptions(), dict(os.environ))

        async def broken_follower(after_seq: int) -> None:
            raise RuntimeError("the follower broke")

        daemon._follow_control = broken_follower  # type: ignore[method-assign]
        # No --until-idle: only the failure can end this run; the loop would otherwise
        # sleep a second at a time forever.
        with pytest.raises(DaemonFatal, match="the follower broke"):
            async with asyncio.timeout(10):
                await daemon.run()
        assert daemon.executor is not None
        assert daemon.executor.launcher.pid is None  # type: ignore[attr-defined]
        tags = [type(r.event) async for r in store.read_all(0)]
    assert tags == [DaemonStarted, DaemonStopped]


async def test_signal_handlers_are_restored(tmp_path: Path) -> None:
    def mine(signum: int, frame: object) -> None:
        pass

    before = signal.signal(signal.SIGTERM, mine)
    try:
        home = Home(tmp_path / "home")
        await app.init_home(home)
        async with open_store(home) as store:
            daemon = Daemon(store, home, DaemonOptions(until_idle=True), dict(os.environ))
            with signal_handlers(daemon):
                assert signal.getsignal(signal.SIGTERM) is not mine
                assert await daemon.run() == 0
        assert signal.getsignal(signal.SIGTERM) is mine
    finally:
        signal.signal(signal.SIGTERM, before)


def test_a_crashed_steps_reason_is_one_line_never_a_traceback() -> None:
    def step() -> None:
        raise ValueError("bad\nvalue\x1b]0;")

    try:
        step()
    except ValueError as exc:
        reason = crash_reason(exc)
    assert reason.startswith("the daemon's step failed: ValueError: bad value\x1b]0;")
    assert re.search(r" \(at test_lifecycle\.py:\d+ in step\)$", reason), reason
    assert "\n" not in reason and "Traceback" not in reason
