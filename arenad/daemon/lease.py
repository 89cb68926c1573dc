"""One daemon per home: an exclusive flock on <home>/daemon.lock.

The kernel drops a flock when its holder dies, even by SIGKILL, so a crashed
daemon never leaves a stale lease behind.

A flock belongs to a file, not to its name. Deleting ``daemon.lock`` (a natural reaction
to "pid X is running") leaves the running daemon holding a lock on a file nobody can open
any more, and a second daemon would create a new file, lock it, and run beside the first
(issue 27, finding 10). So the lease is "the flock on the file the path names":

- after ``flock``, the descriptor's (device, inode) must be the path's; a file replaced in
  between is let go and the path opened again;
- a running daemon re-checks that (:meth:`DaemonLease.check`, every
  :data:`CHECK_EVERY_S`): when the path names another file, or none, it takes whatever the
  path names now if nobody holds it (a deleted lock is re-created), and otherwise it has
  lost the lease and must stop. The daemon also stops when the log shows a newer
  ``daemon.started`` than its own (:mod:`arenad.daemon.daemon`).
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
from pathlib import Path
from types import TracebackType

from arenad.errors import LeaseError

log = logging.getLogger("arenad.daemon")

CHECK_EVERY_S = 1.0
"""How often a running daemon checks that the path still names its lease."""
_ATTEMPTS = 5


def _holder(fd: int) -> str:
    return os.pread(fd, 64, 0).decode(errors="replace").strip() or "unknown"


class DaemonLease:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = None

    def _open(self) -> int:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            # os.open gives a non-inheritable descriptor (PEP 446): the agents a daemon
            # starts never hold its lease, so the lease dies with the daemon alone.
            return os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        except OSError as exc:
            raise LeaseError(
                f"cannot take the daemon lease {self.path}: {exc.strerror or exc}"
            ) from exc

    def _names(self, fd: int) -> bool:
        """Whether the path names the file ``fd`` is open on."""
        try:
            at_path = os.stat(self.path)
        except OSError:
            return False
        held = os.fstat(fd)
        return (at_path.st_dev, at_path.st_ino) == (held.st_dev, held.st_ino)

    def _take(self, fd: int) -> None:
        if self._fd is not None:
            os.close(self._fd)
        # The pid only names the holder in another daemon's refusal; the flock is the
        # lease. On a full disk it cannot be written, and the store then says why the
        # daemon cannot run (a runtime failure, not this file's).
        with contextlib.suppress(OSError):
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._fd = fd

    def acquire(self) -> None:
        if self._fd is not None:
            return  # already held by this object
        for _ in range(_ATTEMPTS):
            fd = self._open()
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = _holder(fd)
                os.close(fd)
                raise LeaseError(
                    f"another arenad daemon (pid {holder}) is running on {self.path.parent};"
                    " stop it first, or use a different --home"
                ) from None
            if self._names(fd):
                self._take(fd)
                return
            # Locked a file the path no longer names (deleted or replaced meanwhile).
            os.close(fd)
        raise LeaseError(f"cannot take the daemon lease {self.path}: it keeps being replaced")

    def check(self) -> str | None:
        """None while this daemon holds the lease its path names; else why it does not.

        A lease file that was deleted (or replaced by a file nobody locks) is taken again
        on the spot, so a second daemon is refused; one another daemon locked means this
        one lost the lease."""
        if self._fd is None:
            return f"the daemon lease {self.path} is not held"
        if self._names(self._fd):
            return None
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        except OSError as exc:
            return f"the daemon lease {self.path} cannot be reopened: {exc.strerror or exc}"
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _holder(fd)
            os.close(fd)
            return (
                f"{self.path} was deleted or replaced, and another daemon (pid {holder}) took"
                " the lease"
            )
        if not self._names(fd):
            os.close(fd)  # replaced again meanwhile: the next check looks again
            return None
        log.warning("%s was deleted or replaced while this daemon ran: taken again", self.path)
        self._take(fd)
        return None

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> DaemonLease:
        self.acquire()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()
