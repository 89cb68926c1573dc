"""The run wrapper's remote-run options: no log on the machine, a lifeline, its own deadline.

A cluster node's supervisor (the Ray actor) can die or freeze while its agent runs on; these
options make the wrapper end the agent's whole group by itself. Real processes throughout:
the launcher forks the wrapper, the "actor" here is this test holding the lifeline's write
end.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from arenad.runs import groups
from arenad.runs.detached import DetachedRun, Lifeline, spawn_detached
from arenad.runs.files import RunFiles, read_exit_record
from arenad.runs.launcher_client import WrapperLauncher

STREAM = "cell/c:i:A:0"


def _clock() -> int:
    return time.time_ns() // 1_000_000


@pytest.fixture
async def launcher() -> AsyncIterator[WrapperLauncher]:
    launcher = WrapperLauncher()
    try:
        yield launcher
    finally:
        await launcher.close()


async def _spawn(
    tmp_path: Path,
    script: str,
    launcher: WrapperLauncher,
    *,
    lifeline: Lifeline | None,
    timeout_s: float = 60.0,
) -> DetachedRun:
    tmp_path.mkdir(parents=True, exist_ok=True)
    return await spawn_detached(
        ["bash", "-c", script],
        cwd=str(tmp_path),
        env=dict(os.environ),
        files=RunFiles(
            run_dir=str(tmp_path), stdout=str(tmp_path / "out"), stderr=str(tmp_path / "err")
        ),
        store_path=None,
        stream=STREAM,
        attempt=1,
        timeout_s=timeout_s,
        kill_grace_s=0.5,
        clock=_clock,
        launcher=launcher,
        lifeline=lifeline,
    )


async def _until(cond: Callable[[], object], what: str, timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.02)


def _child_of(out: Path) -> Callable[[], int | None]:
    def read() -> int | None:
        text = out.read_text() if out.exists() else ""
        return int(text.split()[0]) if text.strip() else None

    return read


def _gone(pid: int) -> bool:
    fields = groups.stat_fields(pid)
    return fields is None or fields[0] in ("Z", "X")


async def test_without_a_log_a_closed_release_pipe_means_never_started(
    tmp_path: Path, launcher: WrapperLauncher
) -> None:
    run = await _spawn(tmp_path, f"touch {tmp_path}/ran", launcher, lifeline=None)
    # The supervisor dies before releasing it: its end of the release socket closes (here
    # by hand, as the kernel does for a dead process).
    assert run._channel is not None
    run._channel.close()
    run._channel = None
    await _until(lambda: not groups.group_alive(run.pgid), "the wrapper to exit")
    record = read_exit_record(run.files.exit_file, run.pid)
    assert record is not None and not record.started and record.error == "not released"
    assert not (tmp_path / "ran").exists()


async def test_a_closed_lifeline_ends_the_whole_group(
    tmp_path: Path, launcher: WrapperLauncher
) -> None:
    read_end, write_end = os.pipe()
    run = await _spawn(
        tmp_path,
        "sleep 1000 & echo $!; wait",
        launcher,
        lifeline=Lifeline(read_fd=read_end, silence_s=0),
    )
    os.close(read_end)
    run.release()
    child = _child_of(tmp_path / "out")
    await _until(child, "the agent's child")
    pid = child()
    assert pid is not None
    os.close(write_end)  # the actor died
    await _until(lambda: not groups.group_alive(run.pgid), "the group to die")
    assert _gone(pid), "the agent's child outlived its supervisor"
    record = read_exit_record(run.files.exit_file, run.pid)
    assert record is not None and record.started
    assert record.ended_by is not None and record.ended_by.startswith("lifeline closed")
    end = await run.wait(_clock)
    assert end.how == "lost" and end.reason == record.ended_by


async def test_a_silent_lifeline_ends_the_whole_group(
    tmp_path: Path, launcher: WrapperLauncher
) -> None:
    read_end, write_end = os.pipe()
    run = await _spawn(
        tmp_path,
        "sleep 1000 & echo $!; wait",
        launcher,
        lifeline=Lifeline(read_fd=read_end, silence_s=0.6),
    )
    os.close(read_end)
    try:
        run.release()
        # Beats keep it alive...
        for _ in range(6):
            os.write(write_end, b".")
            await asyncio.sleep(0.2)
        assert groups.group_alive(run.pgid)
        # ...and their absence (a frozen node) ends it, the pipe still open.
        await _until(lambda: not groups.group_alive(run.pgid), "the group to die")
    finally:
        os.close(write_end)
    record = read_exit_record(run.files.exit_file, run.pid)
    assert record is not None and record.ended_by == "lifeline silent for 0.6 s"


async def test_a_lifeline_that_goes_before_the_release_starts_nothing(
    tmp_path: Path, launcher: WrapperLauncher
) -> None:
    read_end, write_end = os.pipe()
    run = await _spawn(
        tmp_path,
        f"touch {tmp_path}/ran",
        launcher,
        lifeline=Lifeline(read_fd=read_end, silence_s=0),
    )
    os.close(read_end)
    os.close(write_end)
    await _until(lambda: not groups.group_alive(run.pgid), "the wrapper to exit")
    record = read_exit_record(run.files.exit_file, run.pid)
    assert record is not None and not record.started
    assert record.ended_by is not None and record.ended_by.startswith("lifeline closed")
    assert not (tmp_path / "ran").exists()
    await run.cancel_unreleased()


async def test_the_wrapper_enforces_the_deadline_when_its_supervisor_cannot(
    tmp_path: Path, launcher: WrapperLauncher
) -> None:
    # The agent ignores SIGTERM, so the wrapper's grace runs out and it KILLs the group.
    read_end, write_end = os.pipe()
    run = await _spawn(
        tmp_path,
        "trap '' TERM; sleep 1000 & echo $!; while :; do sleep 0.1; done",
        launcher,
        lifeline=Lifeline(read_fd=read_end, silence_s=0, deadline_margin_s=0),
        timeout_s=0.5,
    )
    os.close(read_end)
    try:
        started = time.monotonic()
        run.release()
        # Nobody supervises the run here (a frozen actor): no run.wait().
        await _until(lambda: not groups.group_alive(run.pgid), "the group to die")
        assert time.monotonic() - started < 10
    finally:
        os.close(write_end)
    record = read_exit_record(run.files.exit_file, run.pid)
    assert record is not None and record.ended_by == "deadline" and record.term_signal == 9
    end = await run.wait(_clock)
    assert end.how == "timed_out" and end.code == groups.TIMEOUT_CODE


def test_disk_use_counts_allocated_blocks_once_and_follows_no_link(tmp_path: Path) -> None:
    from arenad.runs.wrapper import disk_use

    root = tmp_path / "ws"
    (root / "sub").mkdir(parents=True)
    (root / "sub" / "data").write_bytes(os.urandom(1 << 20))
    os.link(root / "sub" / "data", root / "again")  # a hard link: its blocks once
    (root / "outside").symlink_to(tmp_path)  # never followed
    (tmp_path / "big").write_bytes(os.urandom(4 << 20))
    with open(root / "sparse", "wb") as f:  # 1 GiB long, nothing allocated
        f.truncate(1 << 30)
    used = disk_use(str(root))
    assert (1 << 20) <= used < (2 << 20)
    # A bounded walk is a lower bound.
    assert disk_use(str(root), max_entries=1) <= used


def test_the_disk_check_walks_when_the_filesystem_grew_past_the_headroom(
    tmp_path: Path,
) -> None:
    from arenad.runs import wrapper
    from tests.fullfs import small_fs

    # A filesystem of its own: nothing else frees space there meanwhile.
    with small_fs(tmp_path / "fs", size="64m") as fs:
        root = fs / "ws"
        root.mkdir()
        limits = wrapper._Limits({"disk-dir": str(root), "disk-max": str(8 << 20)})
        now = time.monotonic()
        assert limits.check(now) is None  # the first check walks
        walked = limits.soonest_disk
        (root / "fill").write_bytes(os.urandom(16 << 20))
        # Past the earliest next walk, long before the periodic one: the growth says walk.
        assert limits.check(max(walked, now + wrapper.LIMIT_CHECK_S)) == "disk"
