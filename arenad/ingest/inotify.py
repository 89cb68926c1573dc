"""inotify for many run watchers: one watchdog inotify instance and one thread per daemon.

watchdog's observer, which the run watchers used before, runs an emitter thread per
scheduled directory (each waking every second) and hands each notification across
threads three times, each hop taking the GIL. With 500 cells that was ~500 threads and
~30% of the daemon's GIL time while every cell printed two lines a second (py-spy
``--gil``); its dispatch queue's move grouping also delayed notifications. Here the
watches of every watcher share watchdog's :class:`~watchdog.observers.inotify_c.InotifyFD`
(one descriptor, one reader thread); what it reads is handed to the event loop in one
hop, and many notifications that arrive together wake each watcher once.

A :class:`Watch` covers a directory and its subdirectories down to ``depth`` levels
(the patterns a watcher selects have a fixed depth, so a whole workspace tree below the
run dir is never watched). What a notification means is left to the watcher: the
callback gets ``True`` when the directory's entries may have changed (a file created,
moved or deleted, a directory anything) and ``False`` for a file's new data only.

Limits are the user's, counted by the kernel: each :class:`Inotify` is one of
``fs.inotify.max_user_instances``, each watched directory one of
``fs.inotify.max_user_watches``. A watch that cannot be added raises :class:`OSError`
naming the limit; the watchers then rely on their periodic rescans for that root.

Two things must never stop the one reader thread every watcher shares (watchdog ends it
for good when a callback raises there, and later files get no notification at all):

- **The kernel drops events** when its queue (``fs.inotify.max_queued_events``) is full,
  most likely with hundreds of runs writing at once. watchdog then calls each callback's
  ``on_queue_overflow`` and ``on_events_lost``: every watch on the instance is told to
  rescan (ingestion resumes from logged offsets, so a rescan repeats nothing), one line is
  logged, and ``report`` gets one :class:`~events.ingest.InotifyEventsLost`.
- **A callback raises**: on the reader thread, the callbacks only queue (and catch
  everything); on the loop, a watcher's ``notify`` that raises is logged, its watch is
  removed and marked failed (its owner falls back to rescans), ``report`` gets an
  :class:`~events.ingest.InotifyWatchFailed`, and the other watchers are still told.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import errno
import logging
import os
from collections.abc import Callable

from watchdog.observers.inotify_c import (
    CallbackId,
    InotifyEvent,
    InotifyFD,
    Mask,
    WatchDescriptor,
)
from watchdog.observers.inotify_c import InotifyConstants as C

from events.base import Event
from events.ingest import InotifyEventsLost, InotifyWatchFailed

log = logging.getLogger(__name__)

# No open/access/close events: a watcher's own reads must not wake it.
MASK = (
    C.IN_MODIFY
    | C.IN_MOVED_FROM
    | C.IN_MOVED_TO
    | C.IN_CREATE
    | C.IN_DELETE
    | C.IN_DELETE_SELF
    | C.IN_MOVE_SELF
    | C.IN_ONLYDIR
)

Notify = Callable[[bool], None]
"""Called on the loop: ``True`` when entries may have changed, ``False`` for data only."""

Report = Callable[[Event], None]
"""Called on the loop with what must be recorded (events lost, a watch failed)."""

# A queued item's mask when the kernel dropped events (IN_Q_OVERFLOW's own bit).
_LOST = C.IN_Q_OVERFLOW


class Watch:
    """One directory tree (down to ``depth``) and whom to tell when it changes."""

    def __init__(self, path: str, depth: int, notify: Notify) -> None:
        self.path = path
        self.depth = depth
        self.notify = notify
        self.wds: set[int] = set()
        self.root_wd: int | None = None
        # False once the root directory was deleted or moved away (the kernel's watch
        # follows the inode, not the path): its owner should watch the path anew.
        self.healthy = True
        self.active = True
        # Why its notify raised (it is no longer watched; its owner rescans instead).
        self.failed: str | None = None


class _Callback:
    """One watch's interest in one directory; watchdog calls it on its reader thread,
    and it only queues what happened for the loop. Nothing may escape it: an exception
    here would end the reader that every watcher shares."""

    def __init__(self, owner: Inotify, watch: Watch, path: bytes, level: int) -> None:
        self.owner = owner
        self.watch = watch
        self.path = path
        self.level = level
        self.wd = -1

    def on_event(self, event: InotifyEvent) -> None:
        self.owner._queue_from_thread((self, event.mask, event.name))

    def on_watch_deleted(self, wd: int) -> None:
        self.owner._queue_from_thread((self, C.IN_IGNORED, b""))

    def on_queue_overflow(self) -> None:
        # Every callback hears it; on_events_lost follows once each has returned.
        return None

    def on_events_lost(self) -> None:
        self.owner._queue_from_thread((None, _LOST, b""))


class Inotify:
    """One watchdog inotify instance and its reader thread, reporting on the running
    loop (create it there). ``report`` records what the watchers cannot: dropped events
    and failed watches (None: they are only logged)."""

    def __init__(self, report: Report | None = None) -> None:
        self._loop = asyncio.get_running_loop()
        self._report = report
        # Raises OSError (EMFILE: the user's instance limit) with nothing started.
        self._fd = InotifyFD()
        # wd -> the callbacks on it (one per watch that covers the directory).
        self._subs: dict[int, dict[Watch, _Callback]] = {}
        self._queue: collections.deque[tuple[_Callback | None, int, bytes]] = collections.deque()
        self._scheduled = False
        self.closed = False
        self._fd.start()

    @property
    def directories(self) -> int:
        """Directories watched now (each is one of the user's inotify watches)."""
        return len(self._subs)

    def watch(self, path: str, depth: int, notify: Notify) -> Watch:
        """Watch ``path`` and its subdirectories ``depth`` levels down; raises OSError
        (the root is gone, or a limit is reached) with nothing left watched."""
        watch = Watch(path, depth, notify)
        try:
            self._add(os.fsencode(path), watch, 0)
        except OSError:
            self.unwatch(watch)
            raise
        return watch

    def unwatch(self, watch: Watch) -> None:
        watch.active = False
        wds, watch.wds = watch.wds, set()
        removed: list[tuple[WatchDescriptor, CallbackId]] = []
        for wd in wds:
            subs = self._subs.get(wd)
            if subs is None or watch not in subs:
                continue
            del subs[watch]
            if not subs:
                del self._subs[wd]
            removed.append((WatchDescriptor(wd), CallbackId(id(watch))))
        if removed and not self.closed:
            self._fd.remove_callbacks(removed)

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self._subs.clear()
        # The reader thread stops (watchdog's kill pipe) and closes the descriptor.
        self._fd.stop()

    # -- inside --------------------------------------------------------------------

    def _add(self, path: bytes, watch: Watch, level: int) -> None:
        callback = _Callback(self, watch, path, level)
        if not os.path.isdir(path):
            # IN_ONLYDIR would refuse it too; say so as the kernel would.
            raise FileNotFoundError(errno.ENOENT, "no such directory", os.fsdecode(path))
        wd = self._fd.add_callback(path, Mask(MASK), callback, CallbackId(id(watch)))
        callback.wd = wd
        self._subs.setdefault(wd, {})[watch] = callback
        watch.wds.add(wd)
        if level == 0:
            watch.root_wd = wd
        if level < watch.depth:
            self._add_below(path, watch, level)

    def _add_below(self, path: bytes, watch: Watch, level: int) -> None:
        try:
            with os.scandir(path) as entries:
                subdirs = [e.path for e in entries if e.is_dir(follow_symlinks=False)]
        except OSError:
            return  # gone meanwhile: its IN_IGNORED follows
        for sub in subdirs:
            try:
                self._add(sub, watch, level + 1)
            except FileNotFoundError:
                continue
            except OSError as exc:
                log.warning("cannot watch %s, relying on rescans: %s", os.fsdecode(sub), exc)

    def _queue_from_thread(self, item: tuple[_Callback | None, int, bytes]) -> None:
        # watchdog's thread. The loop resets the flag *before* it drains, so an item
        # queued after the reset schedules a new drain and one queued before it is seen.
        try:
            self._hand_over(item)
        except BaseException:  # never into watchdog's reader (it would stop for good)
            log.exception("inotify: could not hand a notification to the loop")

    def _hand_over(self, item: tuple[_Callback | None, int, bytes]) -> None:
        self._queue.append(item)
        if self._scheduled:
            return
        self._scheduled = True
        with contextlib.suppress(RuntimeError):  # the loop is closed
            self._loop.call_soon_threadsafe(self._drain)

    def _drain(self) -> None:
        self._scheduled = False
        told: dict[Watch, bool] = {}
        lost = False
        while self._queue:
            callback, mask, name = self._queue.popleft()
            if self.closed:
                continue
            if callback is None:  # the kernel dropped events: every watcher rescans
                lost = True
                for watch in self._all_watches():
                    told[watch] = True
                continue
            watch = callback.watch
            if not watch.active:
                continue
            if mask & C.IN_IGNORED:
                # The directory is gone (or the watch was removed): forget it.
                if watch.wds and callback.wd in watch.wds:
                    watch.wds.discard(callback.wd)
                    subs = self._subs.get(callback.wd)
                    if subs is not None and subs.get(watch) is callback:
                        del subs[watch]
                        if not subs:
                            del self._subs[callback.wd]
                if callback.wd == watch.root_wd:
                    watch.healthy = False
                told[watch] = True
                continue
            entries_changed = bool(mask & C.IN_ISDIR) or not mask & C.IN_MODIFY
            told[watch] = told.get(watch, False) or entries_changed
            if mask & (C.IN_DELETE_SELF | C.IN_MOVE_SELF) and callback.wd == watch.root_wd:
                watch.healthy = False
            new_dir = mask & C.IN_ISDIR and mask & (C.IN_CREATE | C.IN_MOVED_TO)
            if new_dir and name and callback.level < watch.depth:
                try:
                    self._add(os.path.join(callback.path, name), watch, callback.level + 1)
                except OSError as exc:
                    if exc.errno != errno.ENOENT:
                        log.warning("cannot watch a new directory, relying on rescans: %s", exc)
        if lost:
            # Directories made while events were dropped have no watch yet (their
            # IN_CREATE may be what was lost): add them before the watchers rescan, so what
            # is written there later is heard.
            for watch in told:
                if watch.active:
                    self._repair(watch)
            log.warning(
                "inotify queue overflowed (fs.inotify.max_queued_events): %d watcher(s)"
                " rescan their files",
                len(told),
            )
            self._record(InotifyEventsLost(watchers=len(told)))
        for watch, rescan in told.items():
            if watch.active:
                self._tell(watch, rescan)

    def _repair(self, watch: Watch) -> None:
        """Watch every directory of ``watch``'s tree (to its depth) that has no watch."""
        known = {cb.path for subs in self._subs.values() for w, cb in subs.items() if w is watch}
        self._add_missing(os.fsencode(watch.path), watch, 0, known)

    def _add_missing(self, path: bytes, watch: Watch, level: int, known: set[bytes]) -> None:
        if path not in known:
            try:
                self._add(path, watch, level)  # and everything below it
            except OSError as exc:
                if exc.errno != errno.ENOENT:
                    log.warning("cannot watch %s, relying on rescans: %s", os.fsdecode(path), exc)
            return
        if level >= watch.depth:
            return
        try:
            with os.scandir(path) as entries:
                subdirs = [e.path for e in entries if e.is_dir(follow_symlinks=False)]
        except OSError:
            return
        for sub in subdirs:
            self._add_missing(sub, watch, level + 1, known)

    def _tell(self, watch: Watch, rescan: bool) -> None:
        try:
            watch.notify(rescan)
        except Exception as exc:
            # Its owner's fault, not the others': they are still told. It is watched no
            # more (a notify that raised once would raise at every write) and rescans.
            error = f"{type(exc).__name__}: {exc}"
            log.error("watcher of %s failed, it falls back to rescans: %s", watch.path, error)
            self.unwatch(watch)
            watch.failed = error
            watch.healthy = False
            self._record(InotifyWatchFailed(path=watch.path, error=error))

    def _record(self, event: Event) -> None:
        if self._report is None:
            return
        try:
            self._report(event)
        except Exception:
            log.exception("inotify: could not record %s", type(event).__name__)

    def _all_watches(self) -> set[Watch]:
        return {w for subs in self._subs.values() for w in subs}
