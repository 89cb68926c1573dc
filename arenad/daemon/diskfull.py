"""A full disk: the store's reserve, and naming (and ending) the run that holds the most.

**The reserve.** At start the daemon keeps ``<home>/arenad.reserve``, ``RESERVE_BYTES``
preallocated (``posix_fallocate``: real blocks, not a sparse file). When an append finds
the disk full, the store calls the daemon's ``on_disk_full``, which deletes the reserve,
and the append is tried again in the room it gave back: the log does not stop first. The
daemon then records :class:`~events.control.DiskFull` and goes on; should the disk fill
again with no reserve left, it stops as before (recording what it can). The reserve is
made again, every ``RECHECK_S`` and at start, once the disk has room for it twice over
(without room the daemon runs all the same, and says so in its log).

**Naming the filler.** The event lists the largest run dirs of this home (cell id,
attempt, bytes: a bounded walk that follows no symlink, ``arenad.runs.wrapper.disk_use``),
and, while the daemon goes on and the disk really is short of room (statvfs), the run of
the largest one that this daemon follows is ended (SIGKILL to its group): a full disk is
most likely its doing, and left running it would fill the room the reserve just gave
back. When the daemon stops (the disk filled again), runs are left running for the next
daemon, as on any fatal stop. Its wrapper records
the run's real exit once it can write (the next daemon adopts it and reads it). The
per-cell ``[sandbox] disk`` limit normally ends a filler long before this.
"""

from __future__ import annotations

import contextlib
import errno
import os
import signal
from pathlib import Path

from arenad.runs import groups
from arenad.runs.wrapper import disk_use
from events.cell import RunStarted
from events.control import RunDirSize
from events.specs import cell_id

RESERVE_NAME = "arenad.reserve"
RESERVE_BYTES = 16 << 20  # a few thousand events of room: a full disk needs a handful
# How many run dirs the event names.
LARGEST_SHOWN = 5
# How often a missing reserve is made again (once the disk has room for it).
RECHECK_S = 30.0


def reserve_path(home: Path) -> Path:
    return home / RESERVE_NAME


def ensure_reserve(home: Path, size: int = RESERVE_BYTES) -> bool:
    """Make the reserve (if it is missing or short); False if the disk has no room."""
    path = reserve_path(home)
    try:
        if path.stat().st_blocks * 512 >= size:
            return True
    except FileNotFoundError:
        pass
    # Only with as much again left over: a reserve made in the last room there is would
    # leave the daemon nothing to run on (the room returns once the bytes are cleared).
    try:
        vfs = os.statvfs(home)
    except OSError:
        return False
    if vfs.f_bavail * vfs.f_frsize < 2 * size:
        return False
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
    except OSError:
        return False
    try:
        os.posix_fallocate(fd, 0, size)
        os.fsync(fd)
    except OSError as exc:
        if exc.errno not in (errno.ENOSPC, errno.EDQUOT, errno.EOPNOTSUPP):
            raise
        os.close(fd)
        fd = -1
        # A partial reserve would be counted as a whole one next time: none at all.
        with contextlib.suppress(OSError):
            path.unlink()
        return False
    finally:
        if fd >= 0:
            os.close(fd)
    return True


def release_reserve(home: Path) -> int:
    """Delete the reserve; the bytes it gave back (0: there was none)."""
    path = reserve_path(home)
    try:
        size = path.stat().st_blocks * 512
        path.unlink()
    except FileNotFoundError:
        return 0
    return size


def short_of_room(home: Path, size: int = RESERVE_BYTES) -> bool:
    """Whether the disk under ``home`` really is nearly full (less free than the reserve
    twice over): a store refuses to grow for other reasons too (a page limit)."""
    try:
        vfs = os.statvfs(home)
    except OSError:
        return False
    return vfs.f_bavail * vfs.f_frsize < 2 * size


def is_disk_full(exc: BaseException) -> bool:
    """Whether a store error was a full disk (SQLITE_FULL, ENOSPC, a quota)."""
    text = str(exc).lower()
    return "disk is full" in text or "no space left" in text or "quota exceeded" in text


def _cell_of(run_dir: Path, campaigns: Path) -> tuple[str, int] | None:
    # <home>/campaigns/<campaign>/rep-<rep>/attempt-<a>/runs/<instance>/<arm>
    parts = run_dir.relative_to(campaigns).parts
    if len(parts) != 6 or parts[3] != "runs":
        return None
    campaign, rep, attempt, _, instance, arm = parts
    try:
        return cell_id(campaign, instance, arm, int(rep[4:])), int(attempt[8:])
    except ValueError:
        return None


def largest_run_dirs(home: Path, shown: int = LARGEST_SHOWN) -> list[RunDirSize]:
    """The home's largest run dirs, largest first."""
    campaigns = home / "campaigns"
    sizes: list[RunDirSize] = []
    for run_dir in campaigns.glob("*/rep-*/attempt-*/runs/*/*"):
        if run_dir.is_symlink() or not run_dir.is_dir():
            continue
        cell = _cell_of(run_dir, campaigns)
        if cell is None:
            continue
        sizes.append(RunDirSize(cell_id=cell[0], attempt=cell[1], bytes=disk_use(str(run_dir))))
    sizes.sort(key=lambda s: s.bytes, reverse=True)
    return sizes[:shown]


def end_run(started: RunStarted) -> bool:
    """SIGKILL a run's whole group (the wrapper included: its record is written by the
    agent's end, or the next daemon finds it lost). False if it was gone."""
    ticks = started.process_start_ticks
    if ticks is None or not groups.process_identity_matches(started.pid, ticks):
        return False
    try:
        os.killpg(started.pgid, signal.SIGKILL)
    except ProcessLookupError:
        return False
    return True
