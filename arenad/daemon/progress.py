"""The daemon's live line, on a terminal: cells by state, running, spend so far, an ETA.

    42 cells: 9 submitted · 27 recovered · 2 failed | running 4/4 | spend $1.2040 | ETA 6m10s

It follows the log as ``arenad view`` does (:class:`arenad.readmodels.progress.ProgressFold`:
only the events that move a cell or its spend), and is redrawn in place at most twice a
second and at least once a second (the ETA moves with the clock). Log records still go
to the terminal: the line is cleared before each one and drawn again after it. The ETA is
the pace of this daemon: the cells it saw finish since it started, over the time since.
Off a terminal nothing of this runs and the log lines are all there is.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import shutil
import sys
from collections.abc import Callable
from typing import TextIO

from arenad.clock import Clock
from arenad.readmodels.progress import PROGRESS_TAGS, STATES, Progress, ProgressFold, eta_s
from arenad.store.base import EventStore
from arenad.terminal import printable

__all__ = ["LiveLine", "duration", "progress_line", "start_live_line"]

log = logging.getLogger("arenad.daemon")

REDRAW_S = 0.5
TICK_S = 1.0
_TERMINAL_STATES = ("recovered", "failed")


def duration(seconds: float) -> str:
    """``3h05m``, ``6m10s``, ``42s``."""
    s = round(seconds)
    if s >= 3600:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    if s >= 60:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s}s"


def progress_line(progress: Progress, *, finished: int, elapsed_s: float, max_parallel: int) -> str:
    """The line for a snapshot; ``finished`` cells ended in the ``elapsed_s`` this daemon
    has run."""
    total = progress.total
    # Running cells are counted against the slots, not listed twice.
    states = " · ".join(
        f"{total.states[s]} {s}" for s in STATES if total.states[s] and s != "running"
    )
    remaining = total.cells - sum(total.states[s] for s in _TERMINAL_STATES) - total.paused
    remaining = max(remaining, 0)
    unknown = f" (+{total.cost_unknown_runs} unknown)" if total.cost_unknown_runs else ""
    eta = eta_s(remaining, finished, elapsed_s)
    eta_text = "done" if remaining == 0 else "ETA -" if eta is None else f"ETA {duration(eta)}"
    paused = f" ({total.paused} paused)" if total.paused else ""
    return (
        f"{total.cells} cells: {states or 'none'}{paused} | running {total.running}/{max_parallel}"
        f" | spend ${total.cost_usd:.4f}{unknown} | {eta_text}"
    )


class LiveLine:
    """One line at the bottom of a terminal, drawn over itself; ``clear`` and ``redraw``
    let other output (log records) pass above it."""

    def __init__(self, out: TextIO) -> None:
        self.out = out
        self.text = ""

    def show(self, text: str) -> None:
        self.text = printable(text)
        self.redraw()

    def redraw(self) -> None:
        width = shutil.get_terminal_size((100, 24)).columns
        # One column short: writing the last one makes some terminals wrap.
        self.out.write("\r\x1b[2K" + self.text[: max(width - 1, 10)])
        self.out.flush()

    def clear(self) -> None:
        self.out.write("\r\x1b[2K")
        self.out.flush()

    def finish(self) -> None:
        """Leave the last line as plain output (the daemon's final count stays visible)."""
        if self.text:
            self.clear()
            self.out.write(self.text + "\n")
            self.out.flush()


class _AboveTheLine(logging.Handler):
    """Wraps a handler so that its records print above the live line."""

    def __init__(self, inner: logging.Handler, line: LiveLine) -> None:
        super().__init__(inner.level)
        self.inner = inner
        self.line = line

    def emit(self, record: logging.LogRecord) -> None:
        self.line.clear()
        self.inner.handle(record)
        self.line.redraw()


class _Follower:
    def __init__(
        self, store: EventStore, line: LiveLine, clock: Clock, max_parallel: Callable[[], int]
    ) -> None:
        self.store = store
        self.line = line
        self.clock = clock
        self.max_parallel = max_parallel
        self.fold = ProgressFold()
        self.started_ms = clock()

    async def refresh(self) -> None:
        """Fold what was appended since the last time, and draw the line."""
        head = await self.store.last_seq()
        async for batch in self.store.read_batches(self.fold.last_seq, tags=PROGRESS_TAGS):
            self.fold.apply_all(batch)
        self.fold.seen(head)
        self.line.show(
            progress_line(
                self.fold.snapshot(),
                finished=self.fold.finished_since(self.started_ms),
                elapsed_s=(self.clock() - self.started_ms) / 1000,
                max_parallel=self.max_parallel(),
            )
        )

    async def run(self) -> None:
        while True:
            await self.refresh()
            await asyncio.sleep(REDRAW_S)
            await self.store.wait_for_new(self.fold.last_seq, TICK_S - REDRAW_S)


async def start_live_line(
    stack: contextlib.AsyncExitStack,
    store: EventStore,
    clock: Clock,
    max_parallel: Callable[[], int],
    out: TextIO | None = None,
) -> None:
    """Show the live line until ``stack`` closes (then leave its last state printed).
    A failure of the line is logged and ends the line, never the daemon."""
    line = LiveLine(out if out is not None else sys.stderr)
    logger = logging.getLogger("arenad")
    handlers = list(logger.handlers)
    logger.handlers[:] = [_AboveTheLine(h, line) for h in handlers]

    follower = _Follower(store, line, clock, max_parallel)
    failed = False

    async def follow() -> None:
        nonlocal failed
        try:
            await follower.run()
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            failed = True
            logger.handlers[:] = handlers
            line.clear()
            log.warning("the progress line stopped: %r", exc)

    task = asyncio.create_task(follow(), name="progress line")

    async def teardown() -> None:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        logger.handlers[:] = handlers
        if not failed:
            # The last figures, once the cells wound down (the drain runs before this).
            with contextlib.suppress(Exception):
                await follower.refresh()
            line.finish()

    stack.push_async_callback(teardown)
