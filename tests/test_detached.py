"""Detached runs: the run wrapper and DetachedRun, with real processes and process groups.

The crash cases use a real "daemon" process (a small Python script that spawns the
wrapper and is then SIGKILLed) and a real event store for the wrapper to consult.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from arenad import proc
from arenad.detached import DetachedRun, RunFiles, read_exit_record, spawn_detached
from arenad.store.sqlite import SqliteEventStore
from events.cell import RunStarted

STREAM = "cell/c:i:A:0"


def _files(tmp_path: Path) -> RunFiles:
    tmp_path.mkdir(parents=True, exist_ok=True)
    return RunFiles(
        run_dir=str(tmp_path), stdout=str(tmp_path / "out"), stderr=str(tmp_path / "err")
    )


def _clock() -> int:
    return time.time_ns() // 1_000_000


async def _spawn(tmp_path: Path, script: str, timeout_s: float = 30.0) -> DetachedRun:
    tmp_path.mkdir(parents=True, exist_ok=True)
    return await spawn_detached(
        ["bash", "-c", script],
        cwd=str(tmp_path),
        env=dict(os.environ),
        files=_files(tmp_path),
        store_path=tmp_path / "absent.db",
        stream=STREAM,
        attempt=1,
        timeout_s=timeout_s,
        kill_grace_s=0.5,
        clock=_clock,
    )


async def test_released_agent_runs_and_its_exit_is_recorded(tmp_path: Path) -> None:
    run = await _spawn(tmp_path, "echo out; echo err >&2; pwd; exit 7")
    assert run.alive
    run.release()
    end = await run.wait(_clock)
    assert (end.how, end.code) == ("exited", 7)
    assert (tmp_path / "out").read_text() == f"out\n{tmp_path}\n"
    assert (tmp_path / "err").read_text() == "err\n"
    record = read_exit_record(run.files.exit_file)
    assert record is not None and record.started and record.exit_status == 7
    assert not proc.group_alive(run.pgid)


async def test_agent_is_held_back_until_released(tmp_path: Path) -> None:
    run = await _spawn(tmp_path, "touch started")
    await asyncio.sleep(0.3)  # long enough for an unheld agent to have started
    assert not (tmp_path / "started").exists()
    run.release()
    assert (await run.wait(_clock)).how == "exited"
    assert (tmp_path / "started").exists()


async def test_a_release_for_another_wrapper_is_not_taken(tmp_path: Path) -> None:
    # Two wrappers at once (a leftover of a crashed daemon may share the run dir with the
    # new one): releasing one does not start the other.
    held = await _spawn(tmp_path / "held", "touch started")
    other = await _spawn(tmp_path / "other", "touch started")
    other.release()
    assert (await other.wait(_clock)).how == "exited"
    await asyncio.sleep(0.3)
    assert not (tmp_path / "held" / "started").exists()
    held.release()
    assert (await held.wait(_clock)).how == "exited"
    assert (tmp_path / "held" / "started").exists()


async def test_cancel_unreleased_starts_nothing(tmp_path: Path) -> None:
    run = await _spawn(tmp_path, "touch started")
    await run.cancel_unreleased()
    assert not proc.group_alive(run.pgid)
    assert not (tmp_path / "started").exists()


async def test_deadline_kills_the_whole_group(tmp_path: Path) -> None:
    run = await _spawn(tmp_path, "sleep 60 & sleep 60; wait", timeout_s=0.5)
    run.release()
    end = await run.wait(_clock)
    assert (end.how, end.code) == ("timed_out", 124)
    assert end.signals_sent and end.signals_sent[0] == "SIGTERM"
    assert not proc.group_alive(run.pgid)


async def test_abort_kills_the_group_and_the_wrapper_records_the_signal(tmp_path: Path) -> None:
    run = await _spawn(tmp_path, "exec sleep 60")
    run.release()
    waiting = asyncio.ensure_future(run.wait(_clock))
    await _until(lambda: _children(run.pid))
    run.abort("operator request")
    end = await waiting
    assert (end.how, end.code, end.reason) == ("aborted", 130, "operator request")
    # SIGTERM reached the agent with its default action; the wrapper outlived it to say so.
    record = read_exit_record(run.files.exit_file)
    assert record is not None and record.term_signal == signal.SIGTERM
    assert not proc.group_alive(run.pgid)


async def test_missing_agent_binary_is_not_started(tmp_path: Path) -> None:
    run = await spawn_detached(
        ["/nonexistent/agent"],
        cwd=str(tmp_path),
        env=dict(os.environ),
        files=_files(tmp_path),
        store_path=tmp_path / "absent.db",
        stream=STREAM,
        attempt=1,
        timeout_s=30,
        kill_grace_s=0.5,
        clock=_clock,
    )
    run.release()
    end = await run.wait(_clock)
    assert end.how == "not_started"
    assert end.reason is not None and "/nonexistent/agent" in end.reason


async def test_a_wrapper_killed_without_an_exit_record_is_lost(tmp_path: Path) -> None:
    run = await _spawn(tmp_path, "exec sleep 60")
    run.release()
    await _until(lambda: _children(run.pid))
    os.killpg(run.pgid, signal.SIGKILL)
    end = await run.wait(_clock)
    assert end.how == "lost" and end.code is None


# -- the daemon dies: a real parent process, SIGKILLed ------------------------------------

_PARENT = textwrap.dedent(
    """
    import asyncio, json, os, sys, time
    from pathlib import Path
    from arenad.detached import RunFiles, spawn_detached

    async def main():
        d = Path(sys.argv[1])
        run = await spawn_detached(
            ["bash", "-c", sys.argv[2]], cwd=str(d), env=dict(os.environ),
            files=RunFiles(run_dir=str(d), stdout=str(d / "out"), stderr=str(d / "err")),
            store_path=d / "store.db", stream=sys.argv[3], attempt=1,
            timeout_s=30, kill_grace_s=0.5, clock=lambda: time.time_ns() // 1_000_000,
        )
        print(json.dumps({"pid": run.pid, "ticks": run.start_ticks,
                          "started_at_ms": run.started_at_ms}), flush=True)
        await asyncio.sleep(3600)

    asyncio.run(main())
    """
)


async def _orphan(tmp_path: Path, script: str, *, start_recorded: bool) -> dict[str, int]:
    """Spawn a wrapper from a parent process, record (or not) its RunStarted in a real
    store, then SIGKILL the parent: the daemon died before releasing the agent."""
    parent = subprocess.Popen(
        [sys.executable, "-c", _PARENT, str(tmp_path), script, STREAM],
        stdout=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        cwd=Path(__file__).resolve().parents[1],
    )
    assert parent.stdout is not None
    line = await asyncio.to_thread(parent.stdout.readline)
    info: dict[str, int] = json.loads(line)
    await _store(tmp_path / "store.db", info["pid"] if start_recorded else None)
    parent.kill()
    parent.wait()
    parent.stdout.close()
    return info


async def _store(path: Path, started_pid: int | None = None) -> None:
    """A real event store; with a committed RunStarted naming ``started_pid`` if given."""
    store = await SqliteEventStore.open(path)
    try:
        if started_pid is None:
            return
        await store.append(
            STREAM,
            None,
            [
                RunStarted(
                    attempt=1,
                    argv=["bash"],
                    cwd="/",
                    pid=started_pid,
                    pgid=started_pid,
                    process_start_ticks=proc.read_start_ticks(started_pid),
                    started_at_ms=0,
                    deadline_ms=10**13,
                    timeout_s=30,
                    kill_grace_s=0.5,
                )
            ],
        )
    finally:
        await store.close()


async def test_orphaned_wrapper_without_a_recorded_start_never_starts(tmp_path: Path) -> None:
    # The "daemon" spawned the wrapper and died before committing RunStarted.
    info = await _orphan(tmp_path, "touch started", start_recorded=False)
    run = _adopt(tmp_path, info)
    end = await run.wait(_clock)
    assert end.how == "not_started"
    assert not (tmp_path / "started").exists()


async def test_orphaned_wrapper_with_a_recorded_start_runs_and_is_adopted(tmp_path: Path) -> None:
    # The "daemon" committed RunStarted and died before releasing the agent.
    info = await _orphan(tmp_path, "sleep 1; echo done; exit 3", start_recorded=True)
    run = _adopt(tmp_path, info)
    assert run.alive
    end = await run.wait(_clock)
    assert (end.how, end.code) == ("exited", 3)
    assert (tmp_path / "out").read_text() == "done\n"


def _adopt(tmp_path: Path, info: dict[str, int]) -> DetachedRun:
    return DetachedRun.adopt(
        pid=info["pid"],
        start_ticks=info["ticks"],
        files=_files(tmp_path),
        started_at_ms=info["started_at_ms"],
        deadline_ms=info["started_at_ms"] + 30_000,
        kill_grace_s=0.5,
    )


async def _until(cond: object, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not cond():  # type: ignore[operator]
        if time.monotonic() > deadline:
            pytest.fail("condition not met in time")
        await asyncio.sleep(0.01)


def _children(pid: int) -> list[int]:
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except OSError:
        return []
    return [int(x) for x in text.split()]
