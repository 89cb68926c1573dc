"""arenad.runs.commands and arenad.runs.groups against real children, real process groups
and real signals."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from pathlib import Path

import pytest

from arenad.runs import groups
from arenad.runs.commands import CommandError, run, run_ok, start
from arenad.runs.groups import (
    GroupSurvivedError,
    SpawnError,
    group_alive,
    kill_group,
    read_start_ticks,
    wait_group_gone,
)


def _dead(pid: int) -> bool:
    """Gone, or a zombie waiting for a late reaper (it can never run again)."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return True
    return raw.rsplit(")", 1)[1].split()[0] in ("Z", "X")


class Out:
    """The child's stdout file, read while it runs: what a test waits on (pids it echoes)."""

    def __init__(self, tmp_path: Path) -> None:
        self.path = tmp_path / "stdout"

    def lines(self) -> list[str]:
        try:
            return self.path.read_text().splitlines()
        except FileNotFoundError:
            return []

    async def wait_for(self, n: int, timeout_s: float = 10.0) -> None:
        async with asyncio.timeout(timeout_s):
            while len(self.lines()) < n:
                await asyncio.sleep(0.01)

    def pids(self) -> list[int]:
        return [int(line) for line in self.lines() if line.strip().isdigit()]


async def test_normal_exit_keeps_stdout_and_stderr(tmp_path: Path) -> None:
    out, err = tmp_path / "oc.jsonl", tmp_path / "oc.err"
    handle = await start(
        ["bash", "-c", "printf 'a\\nbb\\n'; echo oops >&2; printf ccc"],
        stdout_path=out,
        stderr_path=err,
        timeout_s=30,
        clock=lambda: 1_000,
    )
    assert handle.pgid == handle.pid
    assert handle.started_at_ms == 1_000
    assert handle.deadline_ms == 31_000
    result = await handle.wait()
    assert result.code == 0 and result.ok
    assert not result.timed_out and not result.aborted
    assert result.signals_sent == []
    assert out.read_bytes() == b"a\nbb\nccc" == result.stdout
    assert err.read_bytes() == b"oops\n" == result.stderr
    assert result.stdout_bytes == 8 and not result.stdout_truncated
    assert result.wall_s >= 0


async def test_handle_records_process_start_ticks(tmp_path: Path) -> None:
    lines = Out(tmp_path)
    handle = await start(["bash", "-c", "echo up; exec sleep 1000"], stdout_path=lines.path)
    try:
        await lines.wait_for(1)
        assert handle.start_ticks is not None
        assert read_start_ticks(handle.pid) == handle.start_ticks
        assert groups.process_identity_matches(handle.pid, handle.start_ticks)
        assert not groups.process_identity_matches(handle.pid, handle.start_ticks + 1)
    finally:
        handle.abort("test over")
        await handle.wait()


async def test_timeout_kills_group_including_grandchildren(tmp_path: Path) -> None:
    lines = Out(tmp_path)
    script = "sleep 1000 & echo $!; sleep 1000 & echo $!; wait"
    handle = await start(["bash", "-c", script], stdout_path=lines.path, timeout_s=1.0)
    result = await handle.wait()
    assert result.code == 124 and result.timed_out and not result.aborted
    assert result.signals_sent[0] == "SIGTERM"
    grandchildren = lines.pids()
    assert len(grandchildren) == 2
    assert all(_dead(pid) for pid in grandchildren)
    assert _dead(handle.pid)
    assert not group_alive(handle.pgid)


async def test_timeout_escalates_to_sigkill_when_term_is_ignored(tmp_path: Path) -> None:
    lines = Out(tmp_path)
    script = "trap '' TERM; sleep 1000 & echo $!; echo ready; wait"
    handle = await start(
        ["bash", "-c", script], stdout_path=lines.path, timeout_s=1.0, kill_grace_s=0.2
    )
    result = await handle.wait()
    assert result.code == 124 and result.timed_out
    assert result.signals_sent == ["SIGTERM", "SIGKILL"]
    assert result.term_signal == signal.SIGKILL
    assert all(_dead(pid) for pid in lines.pids())
    assert not group_alive(handle.pgid)


async def test_abort_method_gives_130(tmp_path: Path) -> None:
    lines = Out(tmp_path)
    handle = await start(
        ["bash", "-c", "sleep 1000 & echo $!; wait"], stdout_path=lines.path, timeout_s=600
    )
    await lines.wait_for(1)
    handle.abort("operator request")
    result = await handle.wait()
    assert result.code == 130 and result.aborted and not result.timed_out
    assert result.abort_reason == "operator request"
    assert all(_dead(pid) for pid in lines.pids())
    assert not group_alive(handle.pgid)


async def test_capture_is_capped_but_file_gets_everything(tmp_path: Path) -> None:
    out = tmp_path / "out"
    result = await run(
        ["python3", "-c", "import sys; sys.stdout.write('y' * (1 << 20))"],
        stdout_path=out,
        capture_limit=1000,
    )
    assert result.code == 0
    assert result.stdout == b"y" * 1000
    assert result.stdout_truncated and result.stdout_bytes == 1 << 20
    assert out.stat().st_size == 1 << 20


async def test_stdin_is_closed_by_default() -> None:
    # `cat` with an inherited or open stdin would block forever; with it closed it exits.
    result = await run(["cat"], timeout_s=30)
    assert result.code == 0 and not result.timed_out
    assert result.stdout == b""


async def test_stdin_bytes_and_file(tmp_path: Path) -> None:
    result = await run(["cat"], stdin=b"hello\n", timeout_s=30)
    assert result.stdout == b"hello\n"
    src = tmp_path / "in.txt"
    src.write_bytes(b"from file\n")
    result = await run(["cat"], stdin=src, timeout_s=30)
    assert result.stdout == b"from file\n"


async def test_env_and_cwd_are_given(tmp_path: Path) -> None:
    result = await run(
        ["bash", "-c", 'printf "%s|%s" "$ONLY" "$PWD"'],
        env={"ONLY": "me", "PATH": os.environ["PATH"]},
        cwd=tmp_path,
    )
    assert result.stdout_text == f"me|{tmp_path}"


async def test_leader_exit_kills_members_left_in_group(tmp_path: Path) -> None:
    lines = Out(tmp_path)
    result = await run(["bash", "-c", "sleep 1000 & echo $!; exit 3"], stdout_path=lines.path)
    assert result.code == 3 and not result.timed_out
    assert result.leftovers_killed
    assert all(_dead(pid) for pid in lines.pids())


async def test_leader_killed_by_signal_reports_128_plus_n() -> None:
    result = await run(["bash", "-c", "kill -KILL $$"])
    assert result.code == 137
    assert result.term_signal == signal.SIGKILL and result.exit_status is None


async def test_group_survivor_check_raises_typed_error(tmp_path: Path) -> None:
    # No group survives a real SIGKILL on demand, so test the check itself: a live group
    # that is never signalled must be reported as surviving once the poll's deadline passes.
    lines = Out(tmp_path)
    handle = await start(["bash", "-c", "echo up; exec sleep 1000"], stdout_path=lines.path)
    try:
        await lines.wait_for(1)
        with pytest.raises(GroupSurvivedError) as info:
            await wait_group_gone(handle.pgid, timeout_s=0.05)
        assert info.value.pgid == handle.pgid
        assert handle.pid in [pid for pid, _ in info.value.members]
    finally:
        handle.abort()
        await handle.wait()
    await wait_group_gone(handle.pgid, timeout_s=5)


async def test_kill_group_on_its_own(tmp_path: Path) -> None:
    lines = Out(tmp_path)
    handle = await start(
        ["bash", "-c", "sleep 1000 & echo $!; sleep 1000 & echo $!; wait"], stdout_path=lines.path
    )
    await lines.wait_for(2)
    ticks = handle.start_ticks
    assert ticks is not None
    # A recycled pid (different start time) is not our group: nothing is signalled.
    assert await kill_group(handle.pgid, 0.5, leader_start_ticks=ticks + 1) is False
    assert group_alive(handle.pgid)
    assert await kill_group(handle.pgid, 0.5, leader_start_ticks=ticks) is True
    assert not group_alive(handle.pgid)
    assert all(_dead(pid) for pid in lines.pids())
    result = await handle.wait()
    assert result.term_signal == signal.SIGTERM and result.code == 143
    assert await kill_group(handle.pgid, 0.5) is False


async def test_cancelling_wait_kills_the_group(tmp_path: Path) -> None:
    lines = Out(tmp_path)
    handle = await start(["bash", "-c", "sleep 1000 & echo $!; wait"], stdout_path=lines.path)
    await lines.wait_for(1)
    waiter = asyncio.ensure_future(handle.wait())
    await asyncio.sleep(0)
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    assert _dead(handle.pid)  # the leader was killed and reaped before the cancel completed
    await wait_group_gone(handle.pgid, timeout_s=5)
    assert all(_dead(pid) for pid in lines.pids())


async def test_spawn_error_is_typed(tmp_path: Path) -> None:
    with pytest.raises(SpawnError):
        await start(["/nonexistent/binary"])
    with pytest.raises(SpawnError):
        await start(["true"], cwd=tmp_path / "missing")


async def test_run_ok() -> None:
    result = await run_ok(["bash", "-c", "echo fine"])
    assert result.stdout_text == "fine\n"
    with pytest.raises(CommandError) as info:
        await run_ok(["bash", "-c", "echo bad thing >&2; exit 4"], stage="git-reset")
    err = info.value
    assert err.stage == "git-reset" and err.rc == 4 and "bad thing" in err.stderr_tail
    assert "git-reset" in str(err) and "exited 4" in str(err)
    with pytest.raises(CommandError) as info:
        await run_ok(["sleep", "1000"], timeout_s=0.2)
    assert info.value.timed_out and info.value.rc == 124
    with pytest.raises(CommandError) as info:
        await run_ok(["/nonexistent/git", "status"])
    assert info.value.rc is None


def test_display_argv_masks_url_credentials() -> None:
    shown = groups.display_argv(["git", "clone", "https://user:tok3n@example.com/r.git"])
    assert "tok3n" not in shown and "***@example.com" in shown


async def test_pipe_held_outside_the_group_is_abandoned_not_awaited(tmp_path: Path) -> None:
    # setsid moves the sleeper out of the group; it keeps stdout open after the leader exits.
    # The leader exits only once the sleeper leads its own session (stat field 6 = its pid).
    lines = Out(tmp_path)
    script = (
        "setsid sleep 1000 & p=$!; "
        'until [ "$(cut -d" " -f6 /proc/$p/stat)" = "$p" ]; do :; done; echo $p; exit 0'
    )
    result = await run(
        ["bash", "-c", script],
        stdout_path=lines.path,
        drain_timeout_s=0.3,
    )
    escaped = lines.pids()
    try:
        assert result.code == 0 and result.drain_incomplete
        assert not result.leftovers_killed
    finally:
        for pid in escaped:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


async def test_a_child_gets_pwd_equal_to_its_working_directory(tmp_path: Path) -> None:
    """Finding 4's rule: an inherited PWD names the daemon's directory, and a program that
    trusts PWD (opencode) would work there."""
    code = "import os; print(os.environ.get('PWD'), os.environ.get('OLDPWD'))"
    env = {**os.environ, "PWD": "/", "OLDPWD": "/usr"}
    result = await run(["python3", "-c", code], cwd=tmp_path, env=env)
    assert result.stdout_text.split() == [str(tmp_path), "None"]
