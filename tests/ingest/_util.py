"""Helpers shared by the ingestion tests."""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

import pytest

from arenad.ingest.lines import line_bytes
from events.base import Event
from events.ingest import FileTruncated, LineIngested, LineMalformed


async def until(cond: Callable[[], bool], timeout: float = 15.0, what: str = "condition") -> None:
    """Poll ``cond`` until it holds; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.005)


class Recorder:
    """A sink that keeps every batch it accepted (optionally failing on a call)."""

    def __init__(self, fail_on: int | None = None) -> None:
        self.batches: list[list[Event]] = []
        self.calls = 0
        self.fail_on = fail_on

    async def __call__(self, events: list[Event]) -> None:
        self.calls += 1
        if self.fail_on is not None and self.calls == self.fail_on:
            raise RuntimeError("sink failed")
        self.batches.append(list(events))

    @property
    def events(self) -> list[Event]:
        return [e for b in self.batches for e in b]

    def lines(self, path: str, source: str | None = None) -> list[LineIngested | LineMalformed]:
        return [
            e
            for e in self.events
            if isinstance(e, LineIngested | LineMalformed)
            and e.path == path
            and (source is None or e.source == source)
        ]


def rebuild(events: Iterable[Event], path: str) -> bytes:
    """The file content a sequence of events stands for (since the last truncation).

    Asserts the line events are contiguous: no gap, no overlap, no duplicate.
    """
    content = b""
    for e in events:
        if isinstance(e, FileTruncated) and e.path == path:
            content = b""
        elif isinstance(e, LineIngested | LineMalformed) and e.path == path:
            assert e.offset == len(content), (e.offset, len(content), e)
            content += line_bytes(e)
    return content


def append(path: Path, data: bytes) -> None:
    with open(path, "ab") as f:
        f.write(data)


MAX_QUEUED_EVENTS = Path("/proc/sys/fs/inotify/max_queued_events")


@contextlib.contextmanager
def tiny_inotify_queue(size: int = 4) -> Iterator[None]:
    """While inside, a new inotify instance gets a kernel queue of ``size`` events (the
    sysctl is read when an instance is made): make the instance, then leave at once, so
    other tests' instances made meanwhile are hardly ever affected. Skips where the sysctl
    cannot be written (not root, or a read-only /proc)."""
    # The sysctl is the machine's: two test workers lowering it at once would each restore
    # what the other set (one of them then gets a normal queue and no overflow, or the
    # machine keeps the tiny one). One at a time, across processes.
    with open(Path(tempfile.gettempdir()) / "arenad-tests-inotify-sysctl.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            before = MAX_QUEUED_EVENTS.read_text()
            MAX_QUEUED_EVENTS.write_text(f"{size}\n")
        except OSError as exc:
            pytest.skip(f"cannot lower fs.inotify.max_queued_events: {exc}")
        try:
            yield
        finally:
            MAX_QUEUED_EVENTS.write_text(before)
