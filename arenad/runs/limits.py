"""How many cells this machine lets one daemon run at once, checked when it starts.

A daemon that runs into a resource limit mid-campaign does not stop cleanly: spawns
fail, files cannot be opened, watches cannot be added. So it checks before it starts:

- **Open files** (``RLIMIT_NOFILE``). The daemon raises its soft limit to the hard
  limit (the kernel lets any process do that), then counts :data:`FDS_PER_CELL` per
  cell beyond :data:`FDS_RESERVE` for itself. The agents keep the limits the daemon was
  given: the launcher puts the old soft limit back before it forks any wrapper.
- **inotify watches** (``fs.inotify.max_user_watches``, per user): each cell's run dir
  (and, for a supervisor, its run dir's ``workers/`` and the brain's dir) is a watch,
  :data:`WATCHES_PER_CELL` at most; the watches this user's processes hold already are
  not free.
- **inotify instances** (``fs.inotify.max_user_instances``, per user): the daemon needs
  :data:`INSTANCES` whatever the number of cells. Without a free one, ingestion falls
  back to rescans every 0.5 s (slower, nothing lost): a warning, not a refusal.

Measured (``tests/runs/test_limits.py`` keeps it honest): a running command or solo cell
holds 2 descriptors in the daemon (the wrapper's pidfd and the tailed stdout); a cell in
a short command (git, verify) holds 3-4 (two pipes, the child's pidfd, its log file);
a supervisor cell holds one more per file it tails (journal, progress, brain, each
worker's). 8 per cell covers a supervisor with a few workers.
"""

from __future__ import annotations

import os
import resource
from pathlib import Path

import msgspec

FDS_PER_CELL = 8
FDS_RESERVE = 64
WATCHES_PER_CELL = 3
# The ingestion instance and the proposer capture's.
INSTANCES = 2

_INOTIFY = Path("/proc/sys/fs/inotify")


class Capacity(msgspec.Struct, frozen=True, kw_only=True):
    """What the limits allow; ``max_cells`` is the smallest of the per-limit figures."""

    nofile: int
    nofile_hard: int
    watches_max: int | None
    watches_used: int | None
    instances_max: int | None
    instances_used: int | None

    @property
    def by_files(self) -> int:
        return max(0, (self.nofile - FDS_RESERVE) // FDS_PER_CELL)

    @property
    def by_watches(self) -> int | None:
        if self.watches_max is None:
            return None
        return max(0, (self.watches_max - (self.watches_used or 0)) // WATCHES_PER_CELL)

    @property
    def instances_free(self) -> int | None:
        if self.instances_max is None:
            return None
        return self.instances_max - (self.instances_used or 0)

    @property
    def max_cells(self) -> int:
        watches = self.by_watches
        return self.by_files if watches is None else min(self.by_files, watches)

    def refusal(self, max_parallel: int) -> str | None:
        """Why ``max_parallel`` cells at once cannot work here, naming the limit to
        raise (None when they can)."""
        if max_parallel > self.by_files:
            return (
                f"--max-parallel {max_parallel} needs about"
                f" {FDS_RESERVE + FDS_PER_CELL * max_parallel} open files and this process"
                f" may open {self.nofile} (its hard RLIMIT_NOFILE): raise it (ulimit -Hn,"
                f" LimitNOFILE= for a service) or run at most {self.by_files} at once"
            )
        watches = self.by_watches
        if watches is not None and max_parallel > watches:
            return (
                f"--max-parallel {max_parallel} needs up to {WATCHES_PER_CELL * max_parallel}"
                f" inotify watches and {watches * WATCHES_PER_CELL} are free of"
                f" fs.inotify.max_user_watches = {self.watches_max}: raise it (sysctl -w"
                f" fs.inotify.max_user_watches=N) or run at most {watches} at once"
            )
        return None

    def warnings(self) -> list[str]:
        free = self.instances_free
        if free is not None and free < INSTANCES:
            return [
                f"only {max(free, 0)} of fs.inotify.max_user_instances = {self.instances_max}"
                f" are free (the daemon uses {INSTANCES}): ingestion falls back to rescans;"
                " raise it (sysctl -w fs.inotify.max_user_instances=N)"
            ]
        return []


# The soft limit the daemon was started with, before raise_open_files (for its children).
_original_nofile: int | None = None


def raise_open_files() -> int:
    """Raise the soft RLIMIT_NOFILE to the hard limit; the limit now in force."""
    global _original_nofile
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if _original_nofile is None:
        _original_nofile = soft
    if soft != hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return hard


def children_nofile() -> int | None:
    """The soft open-file limit the daemon's children should get back (None: unchanged)."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if _original_nofile is None or _original_nofile == soft:
        return None
    return _original_nofile


def _read_int(path: Path) -> int | None:
    try:
        return int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def inotify_in_use(uid: int | None = None) -> tuple[int, int]:
    """(instances, watches) the processes of ``uid`` (default: ours) hold now, from
    /proc (the processes we may not read are not counted)."""
    uid = os.getuid() if uid is None else uid
    instances = watches = 0
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            if entry.stat(follow_symlinks=False).st_uid != uid:
                continue
            fds = os.scandir(f"/proc/{entry.name}/fd")
        except OSError:
            continue
        with fds:
            for fd in fds:
                try:
                    if os.readlink(fd.path) != "anon_inode:inotify":
                        continue
                    with open(f"/proc/{entry.name}/fdinfo/{fd.name}", "rb") as f:
                        info = f.read()
                except OSError:
                    continue
                instances += 1
                watches += info.count(b"inotify wd:")
    return instances, watches


def capacity() -> Capacity:
    """This process's limits (after :func:`raise_open_files`) and what is used of them."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    instances_used, watches_used = inotify_in_use()
    return Capacity(
        nofile=soft,
        nofile_hard=hard,
        watches_max=_read_int(_INOTIFY / "max_user_watches"),
        watches_used=watches_used,
        instances_max=_read_int(_INOTIFY / "max_user_instances"),
        instances_used=instances_used,
    )
