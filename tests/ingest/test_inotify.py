"""inotify on the event loop, against the real kernel: what wakes whom, how deep, and
what a vanished directory leaves."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from arenad.ingest.inotify import Inotify
from events.base import Event
from events.ingest import InotifyEventsLost, InotifyWatchFailed
from tests.ingest._util import tiny_inotify_queue, until


class Told:
    def __init__(self) -> None:
        self.calls: list[bool] = []

    def __call__(self, rescan: bool) -> None:
        self.calls.append(rescan)


@pytest.fixture
async def inotify() -> AsyncIterator[Inotify]:
    instance = Inotify()
    try:
        yield instance
    finally:
        instance.close()


def write(path: Path, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)


async def test_new_data_is_not_a_rescan_a_new_file_is(tmp_path: Path, inotify: Inotify) -> None:
    (tmp_path / "out").write_bytes(b"")
    told = Told()
    inotify.watch(str(tmp_path), 0, told)
    write(tmp_path / "out", b"line\n")
    await until(lambda: told.calls == [False], what="a data notification")
    write(tmp_path / "new", b"x")
    # A create and its data may be reported in one read or two: a rescan is asked either way.
    await until(lambda: True in told.calls[1:], what="a rescan notification")


async def test_subdirectories_are_watched_to_the_depth_asked_and_no_deeper(
    tmp_path: Path, inotify: Inotify
) -> None:
    root, marker = tmp_path / "root", tmp_path / "marker"
    (root / "old").mkdir(parents=True)
    marker.mkdir()
    told, seen_marker = Told(), Told()
    inotify.watch(str(root), 1, told)
    inotify.watch(str(marker), 0, seen_marker)

    async def settled() -> int:
        # The kernel's queue is ordered and read by one thread, handed over in order: once
        # a write to the marker is reported, everything before it has been. How many
        # notifications one change makes is not the contract (a create and its data may
        # come in one read or two), whether it makes any is.
        k = len(seen_marker.calls)
        write(marker / f"m{k}", b"m")
        await until(lambda: len(seen_marker.calls) > k, what="the marker")
        return len(told.calls)

    # A directory that was there, and one made after the watch: both are one level down.
    write(root / "old" / "w.ndjson", b"a\n")
    n = await settled()
    assert n >= 1, "the existing subdirectory"
    (root / "workers").mkdir()
    assert (m := await settled()) > n, "the new subdirectory itself"
    write(root / "workers" / "w.ndjson", b"a\n")
    assert (n := await settled()) > m, "a file in the new subdirectory"
    (root / "workers" / "deep").mkdir()
    assert (m := await settled()) > n, "the deep directory's creation"
    # Two levels down is not watched.
    write(root / "workers" / "deep" / "x", b"a\n")
    assert await settled() == m


async def test_two_watches_of_one_directory_are_independent(
    tmp_path: Path, inotify: Inotify
) -> None:
    a, b = Told(), Told()
    first = inotify.watch(str(tmp_path), 0, a)
    inotify.watch(str(tmp_path), 0, b)
    assert inotify.directories == 1
    inotify.unwatch(first)
    assert inotify.directories == 1
    write(tmp_path / "f", b"x")
    await until(lambda: bool(b.calls), what="the remaining watch")
    assert a.calls == []


async def test_a_deleted_directory_is_a_rescan_and_leaves_no_watch(
    tmp_path: Path, inotify: Inotify
) -> None:
    run = tmp_path / "run"
    run.mkdir()
    told = Told()
    watch = inotify.watch(str(run), 0, told)
    run.rmdir()
    await until(lambda: inotify.directories == 0, what="the kernel's IN_IGNORED")
    assert told.calls and told.calls[-1] is True
    assert watch.wds == set()
    inotify.unwatch(watch)  # nothing left to remove: no error


async def test_a_missing_root_raises_and_watches_nothing(tmp_path: Path, inotify: Inotify) -> None:
    with pytest.raises(FileNotFoundError):
        inotify.watch(str(tmp_path / "absent"), 1, Told())
    assert inotify.directories == 0


async def test_a_real_queue_overflow_tells_every_watch_and_the_reader_goes_on(
    tmp_path: Path,
) -> None:
    # A kernel queue of 4 events and 50 files made at once: the kernel drops events
    # (IN_Q_OVERFLOW). Every watch hears a rescan, one loss is reported, and the shared
    # reader is still alive for what comes after.
    reports: list[Event] = []
    with tiny_inotify_queue(4):
        inotify = Inotify(report=reports.append)
    try:
        dirs = [tmp_path / f"d{i}" for i in range(3)]
        told = [Told() for _ in dirs]
        for d, t in zip(dirs, told, strict=True):
            d.mkdir()
            inotify.watch(str(d), 0, t)
        for i in range(50):
            write(dirs[i % 3] / f"f{i}", b"x")
        await until(lambda: bool(reports), what="the overflow report")
        assert isinstance(reports[0], InotifyEventsLost) and reports[0].watchers == 3
        await until(lambda: all(True in t.calls for t in told), what="every watch told")
        for t in told:
            t.calls.clear()
        write(dirs[0] / "after", b"y")
        await until(lambda: True in told[0].calls, what="a notification after the overflow")
        assert not inotify.closed
    finally:
        inotify.close()


class _FailsOnce(Inotify):
    """An instance whose hand-over from the reader thread raises once: what a bug there
    would do to watchdog's shared reader."""

    raised = False

    def _hand_over(self, item: tuple[object, int, bytes]) -> None:  # type: ignore[override]
        if not self.raised:
            self.raised = True
            raise RuntimeError("a bug on the reader thread")
        super()._hand_over(item)  # type: ignore[arg-type]


async def test_an_exception_on_the_reader_thread_does_not_stop_the_reader(tmp_path: Path) -> None:
    inotify = _FailsOnce()
    try:
        told = Told()
        inotify.watch(str(tmp_path), 0, told)
        write(tmp_path / "first", b"x")  # its notification is the one that raises
        await until(lambda: inotify.raised, what="the failing hand-over")
        write(tmp_path / "second", b"y")
        await until(lambda: True in told.calls, what="the reader still reading")
    finally:
        inotify.close()


async def test_a_watcher_whose_notify_raises_is_dropped_and_the_others_are_still_told(
    tmp_path: Path,
) -> None:
    reports: list[Event] = []
    inotify = Inotify(report=reports.append)
    try:
        bad_dir, good_dir = tmp_path / "bad", tmp_path / "good"
        bad_dir.mkdir()
        good_dir.mkdir()

        def bad(rescan: bool) -> None:
            raise ValueError("the watcher's own bug")

        good = Told()
        bad_watch = inotify.watch(str(bad_dir), 0, bad)
        inotify.watch(str(good_dir), 0, good)
        write(bad_dir / "a", b"x")
        write(good_dir / "a", b"x")
        await until(lambda: bool(reports) and bool(good.calls), what="both notified")
        (failed,) = reports
        assert isinstance(failed, InotifyWatchFailed)
        assert failed.path == str(bad_dir) and "ValueError: the watcher's own bug" in failed.error
        assert bad_watch.failed == failed.error and not bad_watch.healthy
        assert inotify.directories == 1  # the failed watch was removed
        for i in range(3):
            write(good_dir / f"more{i}", b"y")
            n = len(good.calls)
            await until(lambda n=n: len(good.calls) > n, what="the good watcher, again")
        write(bad_dir / "b", b"x")
        assert len(reports) == 1
    finally:
        inotify.close()


class _DeafTo(Inotify):
    """An instance that never hands over the notifications naming ``deaf``: a directory
    whose IN_CREATE was among the events the kernel dropped."""

    deaf = b"sub"

    def _hand_over(self, item: tuple[object, int, bytes]) -> None:  # type: ignore[override]
        if item[2] != self.deaf:
            super()._hand_over(item)  # type: ignore[arg-type]


async def test_after_a_loss_a_directory_made_meanwhile_is_watched(tmp_path: Path) -> None:
    reports: list[Event] = []
    with tiny_inotify_queue(4):
        inotify = _DeafTo(report=reports.append)
    try:
        told = Told()
        inotify.watch(str(tmp_path), 1, told)
        (tmp_path / "sub").mkdir()  # never heard of: no watch is added for it
        assert inotify.directories == 1
        for i in range(50):  # a real overflow
            write(tmp_path / f"f{i}", b"x")
        await until(lambda: bool(reports), what="the overflow report")
        assert inotify.directories == 2  # repaired before the watchers were told
        told.calls.clear()
        write(tmp_path / "sub" / "w.ndjson", b"a\n")
        await until(lambda: bool(told.calls), what="a write in the directory made meanwhile")
    finally:
        inotify.close()
