"""inotify on the event loop: one descriptor for every watch of a daemon, and no thread.

watchdog, which the run watchers used before, starts a thread per watched directory
(besides its reader and dispatcher threads) and hands each notification across three of
them, each hop taking the GIL. With 500 cells that was ~500 threads, each waking every
second, and ~30% of the daemon's GIL time while every cell printed two lines a second
(py-spy ``--gil``); its dispatch queue's move grouping also delayed notifications. Here
the kernel's queue is read where the watchers live: a readable descriptor on the loop,
one ``read`` for many events, a callback per watch per read.

A :class:`Watch` covers a directory and its subdirectories down to ``depth`` levels
(the patterns a watcher selects have a fixed depth, so a whole workspace tree below the
run dir is never watched). What a notification means is left to the watcher: the
callback gets ``True`` when the directory's entries may have changed (a file created,
moved or deleted, a directory anything) and ``False`` for a file's new data only.

Limits are the user's, counted by the kernel: each :class:`Inotify` is one of
``fs.inotify.max_user_instances``, each watched directory one of
``fs.inotify.max_user_watches``. A watch that cannot be added raises :class:`OSError`
naming the limit; the watchers then rely on their periodic rescans for that root.
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import errno
import logging
import os
import struct
from collections.abc import Callable

log = logging.getLogger(__name__)

IN_MODIFY = 0x00000002
IN_MOVED_FROM = 0x00000040
IN_MOVED_TO = 0x00000080
IN_CREATE = 0x00000100
IN_DELETE = 0x00000200
IN_DELETE_SELF = 0x00000400
IN_MOVE_SELF = 0x00000800
IN_Q_OVERFLOW = 0x00004000
IN_IGNORED = 0x00008000
IN_ONLYDIR = 0x01000000
IN_ISDIR = 0x40000000
_IN_NONBLOCK = os.O_NONBLOCK
_IN_CLOEXEC = os.O_CLOEXEC

# No open/access/close events: a watcher's own reads must not wake it.
MASK = (
    IN_MODIFY
    | IN_MOVED_FROM
    | IN_MOVED_TO
    | IN_CREATE
    | IN_DELETE
    | IN_DELETE_SELF
    | IN_MOVE_SELF
    | IN_ONLYDIR
)
_EVENT = struct.Struct("iIII")
_READ_SIZE = 1 << 16

Notify = Callable[[bool], None]
"""Called on the loop: ``True`` when entries may have changed, ``False`` for data only."""


def _libc() -> ctypes.CDLL:
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    libc.inotify_init1.argtypes = [ctypes.c_int]
    libc.inotify_add_watch.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32]
    libc.inotify_rm_watch.argtypes = [ctypes.c_int, ctypes.c_int]
    return libc


_LIBC = _libc()


def _error(what: str, path: str | None = None) -> OSError:
    code = ctypes.get_errno()
    if code == errno.EMFILE and what == "inotify_init1":
        text = "inotify instance limit reached (raise fs.inotify.max_user_instances)"
    elif code == errno.ENOSPC:
        text = "inotify watch limit reached (raise fs.inotify.max_user_watches)"
    else:
        text = f"{what}: {os.strerror(code)}"
    return OSError(code, text, path)


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


class Inotify:
    """One inotify instance, read on the running loop (create it there)."""

    def __init__(self) -> None:
        fd = _LIBC.inotify_init1(_IN_NONBLOCK | _IN_CLOEXEC)
        if fd < 0:
            raise _error("inotify_init1")
        self._fd = fd
        self._loop = asyncio.get_running_loop()
        # wd -> the watches it serves (at which level) and its directory.
        self._subs: dict[int, dict[Watch, int]] = {}
        self._paths: dict[int, bytes] = {}
        self._loop.add_reader(fd, self._on_readable)
        self.closed = False

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
        wds, watch.wds = watch.wds, set()
        for wd in wds:
            subs = self._subs.get(wd)
            if subs is None:
                continue
            subs.pop(watch, None)
            if not subs:
                del self._subs[wd]
                self._paths.pop(wd, None)
                # EINVAL: the kernel dropped it already (its directory was deleted).
                _LIBC.inotify_rm_watch(self._fd, wd)

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self._loop.remove_reader(self._fd)
        os.close(self._fd)
        self._subs.clear()
        self._paths.clear()

    # -- inside --------------------------------------------------------------------

    def _add(self, path: bytes, watch: Watch, level: int) -> None:
        wd = _LIBC.inotify_add_watch(self._fd, path, MASK)
        if wd < 0:
            raise _error("inotify_add_watch", os.fsdecode(path))
        self._subs.setdefault(wd, {})[watch] = level
        self._paths[wd] = path
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

    def _on_readable(self) -> None:
        told: dict[Watch, bool] = {}
        while True:
            try:
                data = os.read(self._fd, _READ_SIZE)
            except BlockingIOError:
                break
            except OSError as exc:
                # Nothing is lost for good: every watcher rescans on this.
                log.warning("reading inotify events failed, rescanning: %s", exc)
                told = dict.fromkeys(self._all_watches(), True)
                break
            if not data:
                break
            self._parse(data, told)
            if len(data) < _READ_SIZE // 2:
                break
        for watch, rescan in told.items():
            watch.notify(rescan)

    def _parse(self, data: bytes, told: dict[Watch, bool]) -> None:
        offset = 0
        while offset + _EVENT.size <= len(data):
            wd, mask, _, length = _EVENT.unpack_from(data, offset)
            name = data[offset + _EVENT.size : offset + _EVENT.size + length].rstrip(b"\0")
            offset += _EVENT.size + length
            if mask & IN_Q_OVERFLOW:
                # The kernel dropped events: every watcher rescans.
                for watch in self._all_watches():
                    told[watch] = True
                continue
            subs = self._subs.get(wd)
            if not subs:
                continue
            entries_changed = bool(mask & IN_ISDIR) or not mask & IN_MODIFY
            gone = mask & (IN_DELETE_SELF | IN_MOVE_SELF | IN_IGNORED)
            for watch, level in list(subs.items()):
                told[watch] = told.get(watch, False) or entries_changed
                if gone and wd == watch.root_wd:
                    watch.healthy = False
                new_dir = mask & IN_ISDIR and mask & (IN_CREATE | IN_MOVED_TO)
                if new_dir and name and level < watch.depth:
                    try:
                        self._add(os.path.join(self._paths[wd], name), watch, level + 1)
                    except OSError as exc:
                        if exc.errno != errno.ENOENT:
                            log.warning("cannot watch a new directory, relying on rescans: %s", exc)
            if mask & IN_IGNORED:
                # The kernel removed the watch (its directory is gone, or we removed it).
                for watch in self._subs.pop(wd, {}):
                    watch.wds.discard(wd)
                self._paths.pop(wd, None)

    def _all_watches(self) -> set[Watch]:
        return {w for subs in self._subs.values() for w in subs}
