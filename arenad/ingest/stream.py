"""A child's stdout (the solo arm's ``opencode --format json``) as ingest events.

The process runner reads the child's stdout and awaits
:meth:`StreamIngester.on_line` once per line with ``(line, offset)``:

- ``line``: the line's bytes **including** its terminating ``b"\\n"`` — what
  ``asyncio.StreamReader.readline()`` returns. A line without one (the stream
  ended mid-line) is ingested flagged ``partial``.
- ``offset``: the byte offset of the line's first byte in the stream.

Events are batched: a batch goes to the sink after ``flush_interval`` seconds or
as soon as it reaches ``max_batch_events`` / ``max_batch_bytes`` (then
``on_line`` waits for the sink, pushing back on the reader). The committed
position advances only when the sink returned. A sink error stops the ingester:
the failed batch is kept in :attr:`StreamIngester.unflushed`, and the error is
raised from the next ``on_line``, ``flush`` or ``close``.

Restart: given the committed ``position`` (from the log's fold), lines whose
offset lies before it are skipped, so a runner that replays the stream from a
copy on disk records each line once.
"""

from __future__ import annotations

import asyncio
import contextlib

from arenad.ingest.lines import classify_line
from arenad.ingest.offsets import START, IngestPosition, file_key
from arenad.ingest.watcher import (
    DEFAULT_MAX_BATCH_BYTES,
    DEFAULT_MAX_BATCH_EVENTS,
    Clock,
    Sink,
    wall_clock_ms,
)
from events.base import Event
from events.ingest import IngestionClosed

DEFAULT_FLUSH_INTERVAL = 0.05


class StreamIngester:
    """Adapter from per-line callbacks to batched sink calls; see the module docstring."""

    def __init__(
        self,
        sink: Sink,
        *,
        source: str = "stdout",
        path: str = "oc.jsonl",
        position: IngestPosition | None = None,
        flush_interval: float = DEFAULT_FLUSH_INTERVAL,
        max_batch_events: int = DEFAULT_MAX_BATCH_EVENTS,
        max_batch_bytes: int = DEFAULT_MAX_BATCH_BYTES,
        clock: Clock | None = wall_clock_ms,
    ) -> None:
        if flush_interval <= 0 or max_batch_events <= 0 or max_batch_bytes <= 0:
            raise ValueError("flush_interval and batch bounds must be positive")
        self.source = source
        self.path = path
        self._sink = sink
        self._flush_interval = flush_interval
        self._max_events = max_batch_events
        self._max_bytes = max_batch_bytes
        self._clock = clock
        self._committed = position if position is not None else START
        self._pending_pos = self._committed
        self._pending: list[Event] = []
        self._pending_bytes = 0
        self._lock = asyncio.Lock()
        self._timer: asyncio.TimerHandle | None = None
        self._flushers: set[asyncio.Task[None]] = set()
        self._failure: BaseException | None = None
        self._failed_batch: list[Event] = []
        self._closed = False

    @property
    def position(self) -> IngestPosition:
        """The committed position: just past the last line the sink accepted."""
        return self._committed

    @property
    def failure(self) -> BaseException | None:
        return self._failure

    @property
    def unflushed(self) -> list[Event]:
        """Events not (yet) accepted by the sink: a failed batch, then pending ones."""
        return [*self._failed_batch, *self._pending]

    async def on_line(self, line: bytes, offset: int) -> None:
        """Ingest one stdout line (with its newline, unless the stream ended mid-line)."""
        self._check()
        if offset < self._pending_pos.offset:
            return  # recorded before a restart
        partial = not line.endswith(b"\n")
        body = line if partial else line[:-1]
        observed = self._clock() if self._clock is not None else None
        event = classify_line(
            self.source, self.path, body, offset, partial=partial, observed_at_ms=observed
        )
        self._pending.append(event)
        self._pending_bytes += len(body)
        self._pending_pos = IngestPosition(offset=offset + len(line), last_line=event)
        if len(self._pending) >= self._max_events or self._pending_bytes >= self._max_bytes:
            await self._flush()
        elif self._timer is None:
            loop = asyncio.get_running_loop()
            self._timer = loop.call_later(self._flush_interval, self._on_timer)

    async def flush(self) -> None:
        """Hand everything pending to the sink now."""
        self._check()
        await self._flush()

    async def close(self, *, emit_closed: bool = True) -> IngestPosition:
        """Flush, and (by default) record IngestionClosed; returns the final position."""
        if self._closed:
            return self._committed
        self._check()
        self._cancel_timer()
        if self._flushers:  # timed flushes in flight; their errors land in _failure
            await asyncio.gather(*self._flushers, return_exceptions=True)
            self._flushers.clear()
        self._check()
        if emit_closed:
            final = self._pending_pos.offset
            self._pending.append(IngestionClosed(files={file_key(self.source, self.path): final}))
        await self._flush()
        self._closed = True
        return self._committed

    def _check(self) -> None:
        if self._failure is not None:
            raise self._failure
        if self._closed:
            raise RuntimeError("stream ingester is closed")

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _on_timer(self) -> None:
        self._timer = None
        task = asyncio.get_running_loop().create_task(self._timed_flush())
        self._flushers.add(task)
        task.add_done_callback(self._flushers.discard)

    async def _timed_flush(self) -> None:
        # Errors are kept in _failure and raised from the next call.
        with contextlib.suppress(Exception):
            await self._flush()

    async def _flush(self) -> None:
        async with self._lock:
            self._cancel_timer()
            if not self._pending or self._failure is not None:
                return
            batch, self._pending = self._pending, []
            self._pending_bytes = 0
            position = self._pending_pos
            try:
                await self._sink(batch)
            except Exception as exc:
                self._failure = exc
                self._failed_batch = batch
                raise
            self._committed = position
