"""One lifecycle for live capture loops (run-dir ingestion, proposer capture).

A loop runs as a background task, woken by watchdog notifications (delivered from
watchdog's thread through :meth:`LiveLoop._poke`) and by its own periodic rescans:

- :meth:`start` returns at once; the loop runs in a task.
- :meth:`close` stops the loop, stops watching, re-raises the error that stopped the loop
  (a sink or store that refused what it was given), else makes the final pass
  (:meth:`_final_pass`: drain every file, capture every change once more).
- :meth:`wait` returns when the loop stopped, re-raising its error.
- :meth:`abort` stops at once, delivering nothing more (as a crash would; a restart
  resumes from the log).

Subclasses implement :meth:`_run` (the loop: it returns once ``_closing`` is set) and
:meth:`_final_pass`, and may hook :meth:`_on_start`, :meth:`_stop_watching` and
:meth:`_release`.
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
import logging
from types import TracebackType
from typing import Self

log = logging.getLogger(__name__)


class LiveLoop(abc.ABC):
    # The task's name, and what its failure is logged as.
    task_name: str = "arenad-live-loop"

    def __init__(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._closing = False
        self._closed = False
        self._failure: BaseException | None = None

    @property
    def failure(self) -> BaseException | None:
        """The error that stopped the loop, if any."""
        return self._failure

    async def start(self) -> None:
        """Start the loop (returns at once)."""
        if self._task is not None or self._closing:
            raise RuntimeError("already started")
        self._loop = asyncio.get_running_loop()
        await self._on_start()
        self._task = asyncio.create_task(self._run(), name=self.task_name)
        self._task.add_done_callback(self._task_done)

    async def close(self) -> None:
        """Stop, then make the final pass (or re-raise what stopped the loop)."""
        if self._closed:
            return
        self._closing = True
        self._wake.set()
        try:
            if self._task is not None:
                with contextlib.suppress(Exception):
                    await self._task
            await self._stop_watching()
            if self._failure is not None:
                raise self._failure
            await self._final_pass()
            self._closed = True
        finally:
            await self._release()

    async def wait(self) -> None:
        """Until the loop stops: returns after :meth:`close`, raises what stopped it."""
        if self._task is None:
            raise RuntimeError("not started")
        with contextlib.suppress(Exception):
            await asyncio.shield(self._task)
        if self._failure is not None:
            raise self._failure

    async def abort(self) -> None:
        """Stop at once without a final pass (like a crash would)."""
        self._closing = True
        if self._task is not None and not self._task.done():
            self._task.cancel()
            with contextlib.suppress(BaseException):
                await self._task
        await self._stop_watching()
        await self._release()

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc is None:
            await self.close()
        else:
            await self.abort()

    def _poke(self) -> None:
        """Wake the loop; safe from any thread (watchdog's)."""
        loop = self._loop
        if loop is not None:
            with contextlib.suppress(RuntimeError):  # loop closed
                loop.call_soon_threadsafe(self._wake.set)

    def _task_done(self, task: asyncio.Task[None]) -> None:
        if not task.cancelled() and task.exception() is not None:
            self._failure = task.exception()
            log.error("%s stopped: %r", self.task_name, self._failure)

    @abc.abstractmethod
    async def _run(self) -> None:
        """The loop; it returns once ``self._closing`` is set."""

    @abc.abstractmethod
    async def _final_pass(self) -> None:
        """What :meth:`close` does after the loop stopped cleanly."""

    async def _on_start(self) -> None:
        """Before the loop starts (load state, start an observer)."""
        return None

    async def _stop_watching(self) -> None:
        """Drop the watches (the loop no longer runs)."""
        return None

    async def _release(self) -> None:
        """Release what the loop held (files), whatever happened."""
        return None
