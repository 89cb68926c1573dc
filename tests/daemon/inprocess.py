"""The daemon in the test's own event loop, on a real home (real SQLite, processes, git).

Scheduling and control tests need a running daemon, not its process: starting an
interpreter per daemon and per CLI call cost most of their time. Crash and signal tests
keep the subprocess daemon (tests/daemon/support.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

from arenad import app
from arenad.daemon.daemon import Daemon, DaemonOptions, pidfd_child_watcher
from arenad.home import Home, open_store
from arenad.readmodels.view import cells_view
from events.base import Event, Recorded
from events.streams import cell_stream


class Running:
    """A daemon running as a task of this loop, with the store it writes."""

    def __init__(self, daemon: Daemon, task: asyncio.Task[int]) -> None:
        self.daemon = daemon
        self.task = task

    async def events(self, cell: str) -> list[Event]:
        return [r.event for r in await self.daemon.store.read_stream(cell_stream(cell))]

    async def records(self) -> list[Recorded]:
        return [r async for r in self.daemon.store.read_all(0)]

    async def state(self, cell: str) -> tuple[str, int] | None:
        state = await cells_view(self.daemon.store).state(cell)
        return None if state is None else (str(state.status), state.attempt)

    async def wait_for(self, cond: Callable[[], Any], what: str, timeout_s: float = 60.0) -> Any:
        """Poll an (async) condition until it holds, or fail; the daemon must stay up."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.task.done():
                self.task.result()
                raise AssertionError(f"the daemon stopped before {what}")
            value = cond()
            if asyncio.iscoroutine(value):
                value = await value
            if value:
                return value
            await asyncio.sleep(0.05)
        raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")

    async def stopped(self, timeout_s: float = 60.0) -> int:
        """Until the daemon exits on its own (``--until-idle``); its exit status."""
        async with asyncio.timeout(timeout_s):
            return await asyncio.shield(self.task)


@contextlib.asynccontextmanager
async def running_daemon(
    home: Path, options: DaemonOptions | None = None, env: dict[str, str] | None = None
) -> AsyncIterator[Running]:
    """Run a daemon on ``home`` until the block ends (then stop it as SIGTERM would)."""
    with pidfd_child_watcher():
        async with open_store(Home(home)) as store:
            daemon = Daemon(store, Home(home), options or DaemonOptions(), env or dict(os.environ))
            task = asyncio.create_task(daemon.run(), name="in-process daemon")
            try:
                yield Running(daemon, task)
            finally:
                if not task.done():
                    daemon.stop("test over")
                with contextlib.suppress(Exception):
                    async with asyncio.timeout(90):
                        await task


async def init_and_submit(home: Path, campaign: Path) -> None:
    await app.init_home(Home(home))
    await app.submit_campaign(Home(home), campaign)
