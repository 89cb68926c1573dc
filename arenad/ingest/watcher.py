"""Watch run directories and turn their growing files into ingest events.

:class:`RunDirWatcher` owns one :class:`~arenad.ingest.tailer.FileTailer` per
selected file under one or more :class:`WatchSource` roots. It wakes on inotify
notifications (watchdog's, through :mod:`arenad.ingest.inotify`: one instance and
one thread for every watcher of a daemon) *and* on a periodic rescan, so a missed
notification delays at most one rescan interval and loses nothing; files that
appear after start (new workers) are picked up by the rescan a creation triggers.

Delivery is batched: each sink call carries the lines available now across all
files, at most ``max_batch_events`` events or about ``max_batch_bytes`` line bytes
(a single longer line still goes whole). Positions advance only after the sink
returns, so a crash between read and commit re-reads the same bytes on restart:
together with a log that commits each batch atomically, every line is recorded
exactly once. A sink that raises stops the watcher: nothing of that batch is
committed, :attr:`RunDirWatcher.failure` holds the error and :meth:`close`
re-raises it; restart a new watcher from :attr:`RunDirWatcher.positions`.
"""

from __future__ import annotations

import asyncio
import fnmatch
import logging
import os
import re
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from watchdog.observers import Observer
from watchdog.observers.api import BaseObserver

from arenad.ingest.inotify import Inotify, Watch
from arenad.ingest.lines import MAX_LINE_BYTES
from arenad.ingest.live import LiveLoop
from arenad.ingest.offsets import (
    FileKey,
    IngestPosition,
    Positions,
    closed_files,
)
from arenad.ingest.tailer import DEFAULT_CHUNK_SIZE, FileTailer, Mode
from events.base import Event
from events.ingest import IngestionClosed, InotifyEventsLost, InotifyWatchFailed

log = logging.getLogger(__name__)


def _quiet_unschedule_race(record: logging.LogRecord) -> bool:
    # watchdog logs this at ERROR when a watch is unscheduled while its emitter
    # thread is between reads (busy mode does that on purpose); it is harmless.
    return "called when the thread is inactive" not in str(record.msg)


logging.getLogger("watchdog.observers.inotify").addFilter(_quiet_unschedule_race)

Sink = Callable[[list[Event]], Awaitable[None]]
"""``async def sink(events) -> None``: make the events durable, or raise."""

RootResolver = Callable[[], Path | None]
"""Where a source's root is, or ``None`` while it does not exist yet."""

Clock = Callable[[], int]

DEFAULT_MAX_BATCH_EVENTS = 5_000
DEFAULT_MAX_BATCH_BYTES = 4 << 20
DEFAULT_RESCAN_INTERVAL = 0.5
# While inotify watches every root, a rescan only backs it up (a file appearing is itself
# a notification): a daemon following 500 runs spent a tenth of its time in rescans at 0.5 s.
DEFAULT_WATCHED_RESCAN_INTERVAL = 5.0
DEFAULT_BUSY_RATE = 2_000.0
DEFAULT_BUSY_INTERVAL = 0.02
_BUSY_WINDOW = 0.1


def wall_clock_ms() -> int:
    """The default clock for ``observed_at_ms``."""
    return time.time_ns() // 1_000_000


# -- selection ---------------------------------------------------------------------

_MAGIC = re.compile(r"[*?\[]")


def _segments(pattern: str) -> tuple[str, ...]:
    segs = tuple(s for s in pattern.split("/") if s)
    if not segs or any(s in (".", "..", "**") for s in segs):
        raise ValueError(f"unsupported selection pattern {pattern!r}")
    return segs


@dataclass(frozen=True)
class GlobSelection:
    """Which files under a root are ingested, and how.

    Patterns are ``/``-separated relative paths; each segment is an
    :func:`fnmatch.fnmatchcase` pattern matching exactly one path component
    (``workers/*.ndjson`` matches ``workers/a.ndjson``, not
    ``workers/x/a.ndjson``; there is no ``**``). ``exclude`` wins over
    ``snapshots``, which win over ``lines``.
    """

    lines: tuple[str, ...] = ()
    snapshots: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()
    # Plain text lines (not JSON): ingested as they are, never malformed for it.
    texts: tuple[str, ...] = ()
    _compiled: tuple[tuple[tuple[str, ...], Mode], ...] = field(
        init=False, repr=False, compare=False
    )
    _excluded: tuple[tuple[str, ...], ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        compiled = (
            tuple((_segments(p), "snapshot") for p in self.snapshots)
            + tuple((_segments(p), "text") for p in self.texts)
            + tuple((_segments(p), "lines") for p in self.lines)
        )
        object.__setattr__(self, "_compiled", compiled)
        object.__setattr__(self, "_excluded", tuple(_segments(p) for p in self.exclude))

    @property
    def recursive(self) -> bool:
        """Whether any pattern reaches below the root (the watch must recurse)."""
        return self.depth > 0

    @property
    def depth(self) -> int:
        """How many directory levels below the root a pattern reaches (no ``**``)."""
        return max((len(segs) - 1 for segs, _ in self._compiled), default=0)

    def classify(self, relpath: str) -> Mode | None:
        """The mode a relative path is ingested in, or ``None`` if it is not selected."""
        parts = tuple(relpath.split("/"))
        if any(_matches(segs, parts) for segs in self._excluded):
            return None
        for segs, mode in self._compiled:
            if _matches(segs, parts):
                return mode
        return None

    def scan(self, root: str | os.PathLike[str]) -> dict[str, Mode]:
        """The selected regular files under ``root`` now: ``{relpath: mode}``."""
        base = os.fspath(root)
        found: dict[str, Mode] = {}
        for segs, _ in self._compiled:
            for rel in _expand(base, segs, ""):
                if rel not in found:
                    mode = self.classify(rel)
                    if mode is not None:
                        found[rel] = mode
        return found


def _matches(segs: tuple[str, ...], parts: tuple[str, ...]) -> bool:
    return len(segs) == len(parts) and all(
        fnmatch.fnmatchcase(p, s) for s, p in zip(segs, parts, strict=True)
    )


def _expand(base: str, segs: tuple[str, ...], prefix: str) -> Iterator[str]:
    seg, rest = segs[0], segs[1:]
    if _MAGIC.search(seg) is None:
        full = os.path.join(base, seg)
        if rest:
            if os.path.isdir(full):
                yield from _expand(full, rest, f"{prefix}{seg}/")
        elif os.path.isfile(full):
            yield prefix + seg
        return
    try:
        with os.scandir(base) as it:
            entries = sorted(
                (e for e in it if fnmatch.fnmatchcase(e.name, seg)), key=lambda e: e.name
            )
    except OSError:
        return
    for entry in entries:
        try:
            if rest:
                if entry.is_dir():
                    yield from _expand(entry.path, rest, f"{prefix}{entry.name}/")
            elif entry.is_file():
                yield prefix + entry.name
        except OSError:
            continue


def first_subdirectory(*parents: Path) -> RootResolver:
    """A resolver: the first (by name) subdirectory of the first parent that has one."""

    def resolve() -> Path | None:
        for parent in parents:
            try:
                with os.scandir(parent) as it:
                    names = sorted(e.name for e in it if e.is_dir())
            except OSError:
                continue
            if names:
                return parent / names[0]
        return None

    return resolve


@dataclass(frozen=True)
class WatchSource:
    """A root to watch: its events' ``source``, the root (or how to find it), the files."""

    name: str
    root: Path | RootResolver
    selection: GlobSelection
    # Every file read must really be inside this directory, symbolic links resolved (the
    # agent writes below it: a link it made to a host file is refused, with FileRefused).
    confine: Path | None = None

    def __post_init__(self) -> None:
        if not self.name or ":" in self.name:
            raise ValueError(f"source name must be non-empty without ':': {self.name!r}")

    def resolve(self) -> Path | None:
        if isinstance(self.root, Path):
            return self.root if self.root.is_dir() else None
        return self.root()


def file_source(name: str, file: Path, mode: Mode = "lines") -> WatchSource:
    """One file (e.g. ``<run>/brain.jsonl`` as source ``brain``), path = its name."""
    if mode == "snapshot":
        selection = GlobSelection(snapshots=(glob_escape(file.name),))
    elif mode == "text":
        selection = GlobSelection(texts=(glob_escape(file.name),))
    else:
        selection = GlobSelection(lines=(glob_escape(file.name),))
    return WatchSource(name, file.parent, selection, confine=file.parent)


def glob_escape(name: str) -> str:
    """``name`` as a pattern matching only itself."""
    return re.sub(r"([*?\[])", r"[\1]", name)


# -- the watcher -------------------------------------------------------------------


def start_observer(purpose: str) -> BaseObserver | None:
    """A started watchdog observer, or None when inotify is unavailable (out of inotify
    instances, say): whoever watches then relies on its periodic rescans alone."""
    try:
        observer = Observer()
        observer.start()
    except OSError as exc:
        log.warning("inotify unavailable, %s relies on rescans: %s", purpose, exc)
        return None
    return observer


def stop_observer(observer: BaseObserver) -> None:
    """Stop and join an observer (blocking: call it off the event loop)."""
    observer.stop()
    observer.join(timeout=10)


@dataclass
class IngestStats:
    """Counters for benchmarks and diagnostics (committed batches only)."""

    batches: int = 0
    events: int = 0
    bytes: int = 0
    busy_periods: int = 0


@dataclass
class _Root:
    source: WatchSource
    path: Path | None = None
    watched: bool = False
    # The live inotify watch of the root (None: none could be added, or it was dropped).
    watch: Watch | None = None


class RunDirWatcher(LiveLoop):
    """Tails the selected files of some roots into ``sink``; see the module docstring."""

    task_name = "arenad-ingest-watcher"

    def __init__(
        self,
        sources: Sequence[WatchSource],
        sink: Sink,
        *,
        positions: Positions | None = None,
        rescan_interval: float = DEFAULT_RESCAN_INTERVAL,
        watched_rescan_interval: float = DEFAULT_WATCHED_RESCAN_INTERVAL,
        max_batch_events: int = DEFAULT_MAX_BATCH_EVENTS,
        max_batch_bytes: int = DEFAULT_MAX_BATCH_BYTES,
        chunk_size: int = DEFAULT_CHUNK_SIZE,
        max_line: int = MAX_LINE_BYTES,
        clock: Clock | None = wall_clock_ms,
        inotify: bool = True,
        busy_rate: float = DEFAULT_BUSY_RATE,
        busy_interval: float = DEFAULT_BUSY_INTERVAL,
        observer: Inotify | None = None,
    ) -> None:
        """``observer``: an inotify instance shared with other watchers (a daemon watching
        many runs); this watcher adds its roots' watches to it and removes them on close.
        Without one it opens (and closes) an instance of its own."""
        super().__init__()
        names = [s.name for s in sources]
        if len(set(names)) != len(names):
            raise ValueError(f"duplicate source names: {names}")
        if positions is not None and positions.closed:
            raise ValueError("ingestion was already closed for these positions")
        if min(rescan_interval, max_batch_events, max_batch_bytes, busy_rate, busy_interval) <= 0:
            raise ValueError("intervals, rates and batch bounds must be positive")
        self._roots = [_Root(s) for s in sources]
        self._sink = sink
        self._initial = positions if positions is not None else Positions()
        self._rescan_interval = rescan_interval
        self._watched_rescan_interval = max(rescan_interval, watched_rescan_interval)
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = -1.0
        self._max_events = max_batch_events
        self._max_bytes = max_batch_bytes
        self._chunk_size = chunk_size
        self._max_line = max_line
        self._clock = clock
        self._use_inotify = inotify
        self._busy_rate = busy_rate
        self._busy_interval = busy_interval
        self._busy = False
        self._window_start = 0.0
        self._window_events = 0
        self._tailers: dict[FileKey, FileTailer] = {}
        self._order: list[FileTailer] = []
        self._rr = 0
        self._observer: Inotify | None = None
        self._shared_observer = observer
        self._watches: list[Watch] = []
        self._wake_requested = False
        self._rescan_requested = False
        # A notify of ours raised in the inotify instance: no more watches, only rescans.
        self._watch_failed = False
        # What our own inotify instance reported, delivered at the head of the next batch.
        self._notes: list[Event] = []
        # Every file drained to its end and IngestionClosed delivered.
        self._drained = False
        self.stats = IngestStats()

    # -- public --------------------------------------------------------------------

    @property
    def positions(self) -> Positions:
        """Committed positions: the initial ones advanced by every batch the sink accepted."""
        files = dict(self._initial.files)
        for key, tailer in self._tailers.items():
            files[key] = tailer.committed
        return Positions(files=files, closed=self._drained)

    @property
    def files(self) -> dict[FileKey, Mode]:
        """The files found so far and their modes."""
        return {key: t.mode for key, t in self._tailers.items()}

    async def close(self) -> Positions:  # type: ignore[override]  # it also returns them
        """Drain every file to its end and emit IngestionClosed; returns final positions.

        Trailing unterminated lines are ingested flagged ``partial``. Re-raises the
        sink's error if one stopped the watcher (or occurs while draining).
        """
        await super().close()
        return self.positions

    async def _on_start(self) -> None:
        if self._use_inotify and self._shared_observer is not None:
            self._observer = self._shared_observer
        elif self._use_inotify:
            try:
                # Its own instance: what it reports goes into this watcher's batches.
                self._observer = Inotify(report=self._notes.append)
            except OSError as exc:
                log.warning("inotify unavailable, ingestion relies on rescans: %s", exc)

    async def _final_pass(self) -> None:
        await self._final_drain()
        self._drained = True

    async def _release(self) -> None:
        for tailer in self._order:
            tailer.close()

    # -- the loop ------------------------------------------------------------------

    def _notify(self, rescan: bool) -> None:
        # On the loop (arenad.ingest.inotify hands watchdog's reads over). The loop
        # resets the flags *before* it reads, so a notification after the reset always
        # wakes it again and one before it is seen by the read.
        if rescan:
            self._rescan_requested = True
        if self._wake_requested:
            return
        self._wake_requested = True
        self._wake.set()

    async def _run(self) -> None:
        # Idle, the watcher sleeps until inotify reports a change (or the next
        # rescan). Under load (``busy_rate`` events/s or more) inotify's per-write
        # notifications cost more than they save: the watches are dropped and the
        # files polled every ``busy_interval`` until the rate falls below a quarter
        # of ``busy_rate``, then the watches come back.
        loop = asyncio.get_running_loop()
        next_rescan = loop.time()
        self._window_start = loop.time()
        self._window_events = 0
        while not self._closing:
            self._wake_requested = False
            self._wake.clear()
            now = loop.time()
            if self._rescan_requested or now >= next_rescan:
                self._rescan_requested = False
                await self._rescan()
                next_rescan = now + self._next_rescan_in()
            await self._pump()
            if self._closing:
                break
            now = loop.time()
            if now - self._window_start >= _BUSY_WINDOW:
                quiet = self._window_events < self._busy_rate * _BUSY_WINDOW / 4
                self._window_start, self._window_events = now, 0
                if self._busy and quiet:
                    await self._set_busy(False)
                    continue  # writes made while unwatched got no notification
            wake_at = next_rescan
            if self._busy:
                wake_at = min(wake_at, loop.time() + self._busy_interval)
            self._arm_timer(loop, wake_at)
            await self._wake.wait()
        self._disarm_timer()

    def _arm_timer(self, loop: asyncio.AbstractEventLoop, at: float) -> None:
        # One timer per deadline, not one per wait: at hundreds of watchers each waking
        # on every line, a timeout scope per wait was a fifth of the loop's time.
        if self._timer is not None and self._timer_at == at:
            return
        self._disarm_timer()
        self._timer = loop.call_at(at, self._on_timer)
        self._timer_at = at

    def _on_timer(self) -> None:
        # Fired: the next wait arms a new one, even for the same deadline (asyncio may
        # fire a timer up to its clock's resolution early).
        self._timer = None
        self._wake.set()

    def _disarm_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _next_rescan_in(self) -> float:
        """The rescan period: long while inotify watches every root, short otherwise."""
        if self._observer is None or self._busy or self._watch_failed:
            return self._rescan_interval
        for root in self._roots:
            if root.watch is None or not root.watch.healthy:
                return self._rescan_interval
        return self._watched_rescan_interval

    async def _set_busy(self, busy: bool) -> None:
        self._busy = busy
        if busy:
            self.stats.busy_periods += 1
            await self._unschedule_own()
            for root in self._roots:
                root.watched = False
        else:
            for root in self._roots:
                if root.path is not None and not root.watched:
                    root.watched = await self._watch(root)

    async def _pump(self) -> None:
        while not self._closing:
            batch, nbytes, touched = self._collect()
            if not batch:
                break
            # Busy is decided before the batch goes to the sink, not after: a writer at
            # full speed makes one inotify notification per write, and each costs
            # Python time (the GIL) for as long as the watches stay;
            # the first batch's append alone can last a few hundred ms.
            self._window_events += len(batch)
            if not self._busy and self._window_events >= self._busy_rate * _BUSY_WINDOW:
                await self._set_busy(True)
            await self._deliver(batch, nbytes, touched)
            if len(batch) < self._max_events and nbytes < self._max_bytes:
                # Every file was read to its end: what was written since woke us again.
                break
            await asyncio.sleep(0)  # let the loop breathe between batches

    def _collect(self) -> tuple[list[Event], int, list[FileTailer]]:
        tailers = self._order
        count = len(tailers)
        batch = self._notes[:]
        self._notes.clear()  # the list, not a new one: our inotify instance appends to it
        touched: list[FileTailer] = []
        nbytes = 0
        if not count:
            return batch, nbytes, touched
        start = self._rr % count
        self._rr += 1
        observed = self._clock() if self._clock is not None else None
        for i in range(count):
            want = self._max_events - len(batch)
            room = self._max_bytes - nbytes
            if want <= 0 or room <= 0:
                break
            tailer = tailers[(start + i) % count]
            events, n = tailer.poll(want, room, observed_at_ms=observed)
            if events:
                batch.extend(events)
                touched.append(tailer)
                nbytes += n
        return batch, nbytes, touched

    async def _deliver(self, batch: list[Event], nbytes: int, touched: list[FileTailer]) -> None:
        try:
            await self._sink(batch)
        except BaseException:
            for tailer in touched:
                tailer.rollback()
            # Notes lead a batch (_collect): they are delivered again with the next one.
            notes = [e for e in batch if isinstance(e, InotifyEventsLost | InotifyWatchFailed)]
            self._notes[:0] = notes
            raise
        for tailer in touched:
            tailer.commit()
        self.stats.batches += 1
        self.stats.events += len(batch)
        self.stats.bytes += nbytes

    async def _rescan(self) -> None:
        for root in self._roots:
            if root.path is None:
                root.path = root.source.resolve()
                if root.path is None:
                    continue
            if root.watch is not None and root.watch.failed is not None:
                self._watch_failed = True  # the instance dropped it: rescans from now on
            elif root.watch is not None and not root.watch.healthy:
                # Its directory was deleted or moved away: watch what is there now.
                self._drop_watch(root)
            if not root.watched and not self._busy:
                root.watched = await self._watch(root)
            name = root.source.name
            for rel, mode in root.source.selection.scan(root.path).items():
                key = (name, rel)
                if key not in self._tailers:
                    tailer = FileTailer(
                        name,
                        rel,
                        root.path / rel,
                        mode,
                        self._initial.files.get(key),
                        chunk_size=self._chunk_size,
                        max_line=self._max_line,
                        confine=root.source.confine,
                    )
                    self._tailers[key] = tailer
                    self._order.append(tailer)

    async def _watch(self, root: _Root) -> bool:
        observer = self._observer
        if observer is None or root.path is None or observer.closed or self._watch_failed:
            return True
        try:
            watch = observer.watch(str(root.path), root.source.selection.depth, self._notify)
            self._watches.append(watch)
            root.watch = watch
        except FileNotFoundError:
            pass  # gone again: the next rescan finds it or not
        except OSError as exc:  # out of watches: rescans still work
            log.warning("cannot watch %s, relying on rescans: %s", root.path, exc)
        return True

    def _drop_watch(self, root: _Root) -> None:
        watch, root.watch, root.watched = root.watch, None, False
        if watch is None:
            return
        # Two roots of one watcher may share a directory, never a Watch.
        self._watches = [w for w in self._watches if w is not watch]
        if self._observer is not None and not self._observer.closed:
            self._observer.unwatch(watch)

    async def _unschedule_own(self) -> None:
        """Drop this watcher's watches (only its own: the instance may be shared)."""
        observer = self._observer
        watches, self._watches = self._watches, []
        for root in self._roots:
            root.watch = None
        if observer is None or observer.closed:
            return
        for watch in watches:
            observer.unwatch(watch)

    async def _stop_watching(self) -> None:
        self._disarm_timer()
        await self._unschedule_own()
        observer, self._observer = self._observer, None
        if observer is None or observer is self._shared_observer:
            return
        observer.close()

    async def _final_drain(self) -> None:
        await self._rescan()
        while True:
            batch, nbytes, touched = self._collect()
            if not batch:
                break
            await self._deliver(batch, nbytes, touched)
        batch = []
        touched = []
        nbytes = 0
        observed = self._clock() if self._clock is not None else None
        for tailer in self._order:
            events, n = tailer.drain(observed_at_ms=observed)
            if events:
                batch.extend(events)
                touched.append(tailer)
                nbytes += n
        final: dict[FileKey, IngestPosition] = dict(self._initial.files)
        for key, tailer in self._tailers.items():
            final[key] = tailer.pending
        batch.append(IngestionClosed(files=closed_files(final)))
        await self._deliver(batch, nbytes, touched)
