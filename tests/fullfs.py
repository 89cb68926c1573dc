"""A real small filesystem for tests that need a full disk: a tmpfs mounted in the test.

Mounting needs root (CAP_SYS_ADMIN); where it is refused the test is skipped with the
reason. ``fill`` then takes every free block, so the next write that needs one fails with
ENOSPC, as on a full disk (files already open can still be written in place only where
their blocks exist).
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

FILLER = ".filler"


@contextlib.contextmanager
def small_fs(where: Path, size: str = "8m") -> Iterator[Path]:
    """A tmpfs of ``size`` mounted at ``where`` for the duration (lazily unmounted after,
    so a process still holding a file there cannot make the teardown fail)."""
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("a full-disk test mounts a small tmpfs, which needs root and mount(8)")
    where.mkdir(parents=True, exist_ok=True)
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size},mode=0755", "tmpfs", str(where)],
        capture_output=True,
        text=True,
        check=False,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs for a full-disk test: {mounted.stderr.strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], capture_output=True, check=False)


def fill(root: Path) -> None:
    """Take every free block of the filesystem holding ``root`` (a file named FILLER)."""
    chunk = b"\0" * (1 << 16)
    fd = os.open(root / FILLER, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        while True:
            try:
                os.write(fd, chunk)
            except OSError as exc:
                if exc.errno != errno.ENOSPC:
                    raise
                if len(chunk) == 1:
                    return
                chunk = chunk[: len(chunk) // 2]
    finally:
        os.close(fd)


def free(root: Path) -> None:
    """Give the filled blocks back."""
    with contextlib.suppress(FileNotFoundError):
        (root / FILLER).unlink()
