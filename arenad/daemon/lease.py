"""One daemon per home: an exclusive flock on <home>/daemon.lock.

The kernel drops a flock when its holder dies, even by SIGKILL, so a crashed
daemon never leaves a stale lease behind.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from pathlib import Path
from types import TracebackType

from arenad.errors import LeaseError


class DaemonLease:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = None

    def acquire(self) -> None:
        if self._fd is not None:
            return  # already held by this object
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            # os.open gives a non-inheritable descriptor (PEP 446): the agents a daemon
            # starts never hold its lease, so the lease dies with the daemon alone.
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        except OSError as exc:
            raise LeaseError(
                f"cannot take the daemon lease {self.path}: {exc.strerror or exc}"
            ) from exc
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 64, 0).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            raise LeaseError(
                f"another arenad daemon (pid {holder}) is running on {self.path.parent};"
                " stop it first, or use a different --home"
            ) from None
        # The pid only names the holder in another daemon's refusal; the flock is the
        # lease. On a full disk it cannot be written, and the store then says why the
        # daemon cannot run (a runtime failure, not this file's).
        with contextlib.suppress(OSError):
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._fd = fd

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
