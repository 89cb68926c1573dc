"""Crash, restart and live control against a real `arenad daemon` (command arm, real git).

The agent here is a bash script: it appends one line to ``runs.txt`` each time it really
starts (so "the agent ran exactly once" is a file count, not a guess), writes lines to its
stdout over time (ingested live) and exits with a chosen status.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from arenad.runs import groups
from events import cell as ev
from events.base import Event, Recorded
from events.ingest import LineIngested, LineMalformed
from tests.conftest import make_repo
from tests.daemon.support import (
    Beacon,
    cli,
    command_campaign,
    read_all,
    start_daemon,
    submitted,
    wait_for,
)
from tests.fullfs import fill, free, small_fs

CELL = "rs:i1:CMD:0"


_beacons: list[Beacon] = []


@pytest.fixture(autouse=True)
def _close_beacons() -> Iterator[None]:
    yield
    while _beacons:
        _beacons.pop().close()


def _report(marker: Path) -> str:
    """The agent's shell command that adds its pid to ``marker`` (the agent is sandboxed:
    it reports over the network, see Beacon)."""
    beacon = Beacon(marker)
    _beacons.append(beacon)
    return beacon.shell()


def _agent(marker: Path, lines: int, pause_s: float, rc: int) -> list[str]:
    script = (
        f"{_report(marker)}; "
        f"for i in $(seq {lines}); do "
        # Doubled braces: the command arm's argv is a str.format template.
        f'echo "{{{{\\"kind\\":\\"tick\\",\\"i\\":$i}}}}"; sleep {pause_s}; done; exit {rc}'
    )
    return ["bash", "-c", script]


def _setup(
    tmp_path: Path,
    argv: list[str],
    *,
    timeout_s: float = 60,
    arm_extra: str = "",
    extra: str = "",
) -> Path:
    home = tmp_path / "home"
    repo = tmp_path / "repo"
    base = make_repo(repo, {"a.txt": "a\n"})
    # The agents report through a Beacon on the host's loopback: their network is the host's.
    if "[sandbox]" in extra:
        extra += '\nnetwork = "host"'
    else:
        arm_extra += '\n[sandbox]\nnetwork = "host"'
    camp = command_campaign(
        tmp_path / "c.toml",
        name="rs",
        repo=repo,
        base=base,
        argv=argv,
        timeout_s=timeout_s,
        arm_extra=arm_extra,
        extra=extra,
    )
    return submitted(home, camp)


def _cell(home: Path) -> list[Event]:
    return [r.event for r in read_all(home) if r.stream == f"cell/{CELL}"]


def _of(events: list[Event], kind: type) -> list[Event]:
    return [e for e in events if isinstance(e, kind)]


def _has(home: Path, kind: type) -> bool:
    return bool(_of(_cell(home), kind))


def _kill9_once_the_agent_runs(home: Path, marker: Path, tmp_path: Path) -> None:
    """Start a daemon, wait until its agent really started, then SIGKILL the daemon."""
    daemon = start_daemon(home, "--until-idle", stderr=tmp_path / "daemon.err")
    wait_for(lambda: marker.exists(), "the agent to start")
    daemon.send_signal(signal.SIGKILL)
    daemon.wait()


def _finish(home: Path, tmp_path: Path, *args: str, env: dict[str, str] | None = None) -> None:
    second = start_daemon(home, "--until-idle", *args, env=env, stderr=tmp_path / "daemon2.err")
    assert second.wait(timeout=120) == 0, (tmp_path / "daemon2.err").read_text()[-3000:]


def _ingested_equals_file(recorded: list[Recorded], attempt: int, run_dir: Path) -> None:
    lines = [
        r.event
        for r in recorded
        if r.stream == f"ingest/{CELL}/{attempt}"
        and isinstance(r.event, LineIngested | LineMalformed)
    ]
    raw = (run_dir / "cmd.out").read_bytes()
    assert "".join(e.raw + ("" if e.partial else "\n") for e in lines).encode() == raw
    offsets = [e.offset for e in lines]
    assert offsets == sorted(set(offsets)), "a line was ingested twice"


def _run_dir(events: list[Event]) -> Path:
    materialized = _of(events, ev.CellMaterialized)
    assert materialized
    return Path(materialized[-1].run_dir)  # type: ignore[attr-defined]


def _verify_log_ok(home: Path) -> None:
    out = cli(home, "verify-log")
    assert out.returncode == 0, out.stdout + out.stderr


def test_agent_outlives_a_killed_daemon_and_is_adopted(tmp_path: Path) -> None:
    marker = tmp_path / "runs.txt"
    # Lines, then it waits until the test lets it go on (a file in its workspace), more
    # lines, exit 5: it is still running when the next daemon adopts it, however slow the
    # machine, and some of its lines come after the adoption.
    tick = 'echo "{{\\"kind\\":\\"tick\\",\\"i\\":$i}}"'
    script = (
        f"{_report(marker)}; for i in $(seq 10); do {tick}; done;"
        f" while [ ! -e go ]; do sleep 0.02; done; for i in $(seq 11 20); do {tick}; done; exit 5"
    )
    home = _setup(tmp_path, ["bash", "-c", script])
    _kill9_once_the_agent_runs(home, marker, tmp_path)
    started = _of(_cell(home), ev.RunStarted)[0]
    assert isinstance(started, ev.RunStarted)
    assert groups.group_alive(started.pgid), "the agent died with the daemon"

    second = start_daemon(home, "--until-idle", stderr=tmp_path / "daemon2.err")
    try:
        wait_for(lambda: _has(home, ev.RunAdopted), "the run to be adopted")
        workspace = _of(_cell(home), ev.CellMaterialized)[-1].workspace  # type: ignore[attr-defined]
        (Path(workspace) / "go").touch()
        assert second.wait(timeout=120) == 0, (tmp_path / "daemon2.err").read_text()[-3000:]
    finally:
        if second.poll() is None:
            second.kill()
            second.wait()
    events = _cell(home)
    assert len(marker.read_text().split()) == 1, "the agent ran twice"
    assert len(_of(events, ev.RunStarted)) == 1
    adopted = _of(events, ev.RunAdopted)
    assert len(adopted) == 1 and adopted[0].pid == started.pid  # type: ignore[attr-defined]
    completed = _of(events, ev.RunCompleted)
    assert [c.rc for c in completed] == [5]  # type: ignore[attr-defined]
    assert isinstance(events[-1], ev.CellRecovered)
    _ingested_equals_file(read_all(home), 1, _run_dir(events))
    _verify_log_ok(home)


def test_a_run_that_ended_while_no_daemon_ran_gets_its_real_exit(tmp_path: Path) -> None:
    marker = tmp_path / "runs.txt"
    home = _setup(tmp_path, _agent(marker, lines=3, pause_s=0.3, rc=3))
    _kill9_once_the_agent_runs(home, marker, tmp_path)
    run_dir = _run_dir(_cell(home))
    wait_for(lambda: (run_dir / "arenad.exit.json").exists(), "the agent's exit record")

    _finish(home, tmp_path)
    events = _cell(home)
    assert not _of(events, ev.RunAdopted)
    assert [c.rc for c in _of(events, ev.RunCompleted)] == [3]  # type: ignore[attr-defined]
    _ingested_equals_file(read_all(home), 1, run_dir)


def test_the_recorded_deadline_holds_for_an_adopted_run(tmp_path: Path) -> None:
    marker = tmp_path / "runs.txt"
    home = _setup(tmp_path, _agent(marker, lines=600, pause_s=0.1, rc=0), timeout_s=4)
    _kill9_once_the_agent_runs(home, marker, tmp_path)
    _finish(home, tmp_path)
    events = _cell(home)
    started = _of(events, ev.RunStarted)[0]
    timed_out = _of(events, ev.RunTimedOut)
    assert len(timed_out) == 1 and timed_out[0].rc == 124  # type: ignore[attr-defined]
    assert not groups.group_alive(started.pgid)  # type: ignore[attr-defined]
    # Timed out at the original deadline, not a fresh ceiling from the restart.
    assert timed_out[0].wall_s < 4 + 3  # type: ignore[attr-defined]


def test_a_run_gone_without_an_exit_record_is_recorded_lost(tmp_path: Path) -> None:
    marker = tmp_path / "runs.txt"
    home = _setup(tmp_path, _agent(marker, lines=600, pause_s=0.1, rc=0))
    _kill9_once_the_agent_runs(home, marker, tmp_path)
    started = _of(_cell(home), ev.RunStarted)[0]
    # The machine "rebooted": the run's whole group dies with no chance to record anything.
    os.killpg(started.pgid, signal.SIGKILL)  # type: ignore[attr-defined]
    wait_for(lambda: not groups.group_alive(started.pgid), "the group to die")  # type: ignore[attr-defined]

    _finish(home, tmp_path)
    events = _cell(home)
    aborted = _of(events, ev.RunAborted)
    assert len(aborted) == 1
    assert aborted[0].reason == "lost with the daemon" and aborted[0].rc is None  # type: ignore[attr-defined]
    assert isinstance(events[-1], ev.CellRecovered)


def test_on_a_full_disk_a_finished_run_is_recorded_with_its_real_status(tmp_path: Path) -> None:
    # Issue 14, finding 6, end to end: the run dirs are on a real filesystem that fills
    # while the agent runs (the store is elsewhere and still writable, as SQLite's WAL was
    # in the finding). The wrapper cannot write its output or its exit record: the run
    # must still be recorded completed with its status, and the cuts with their real cause.
    go, marker = tmp_path / "go", tmp_path / "runs.txt"
    script = (
        f"echo $$ >> {marker}; while [ ! -e {go} ]; do sleep 0.05; done;"
        " head -c 20000 /dev/zero; echo oops >&2; exit 3"
    )
    home = tmp_path / "home"
    with small_fs(home / "campaigns", size="16m") as fs:
        # Unsandboxed: what is tested is the wrapper's writes on a full disk, and the
        # agent waits on a file of the test's (a sandboxed agent sees only its cell).
        home = _setup(tmp_path, ["bash", "-c", script], extra='[sandbox]\nkind = "none"')
        daemon = start_daemon(home, "--until-idle", stderr=tmp_path / "daemon.err")
        try:
            wait_for(marker.exists, "the agent to start")
            fill(fs)
            go.touch()
            assert daemon.wait(timeout=120) == 0, (tmp_path / "daemon.err").read_text()[-3000:]
        finally:
            if daemon.poll() is None:
                daemon.kill()
                daemon.wait()
            free(fs)
        events = _cell(home)
    assert not _of(events, ev.RunAborted), "a finished run was recorded aborted"
    (completed,) = _of(events, ev.RunCompleted)
    assert isinstance(completed, ev.RunCompleted) and completed.rc == 3
    capped = _of(events, ev.RunOutputCapped)
    assert capped and all(
        isinstance(c, ev.RunOutputCapped)
        and c.cause == "write error: No space left on device"
        and c.kept_bytes == 0
        for c in capped
    ), capped


@pytest.mark.parametrize("adopted", [False, True], ids=["started-here", "adopted"])
def test_a_wrapper_killed_while_the_daemon_runs_is_not_lost_with_the_daemon(
    tmp_path: Path, adopted: bool
) -> None:
    # Issue 14, finding 7: only the wrapper is killed; the daemon watching it is up, so
    # "lost with the daemon" would be false. The reason says what is known instead.
    marker = tmp_path / "runs.txt"
    home = _setup(tmp_path, _agent(marker, lines=600, pause_s=0.1, rc=0))
    if adopted:
        _kill9_once_the_agent_runs(home, marker, tmp_path)
    daemon = start_daemon(home, "--until-idle", stderr=tmp_path / "daemon.err")
    try:
        wait_for(marker.exists, "the agent to start")
        if adopted:
            wait_for(lambda: _has(home, ev.RunAdopted), "the run to be adopted")
        started = _of(_cell(home), ev.RunStarted)[0]
        os.kill(started.pid, signal.SIGKILL)  # type: ignore[attr-defined]
        assert daemon.wait(timeout=120) == 0, (tmp_path / "daemon.err").read_text()[-3000:]
    finally:
        if daemon.poll() is None:
            daemon.kill()
            daemon.wait()
    (aborted,) = _of(_cell(home), ev.RunAborted)
    assert isinstance(aborted, ev.RunAborted) and aborted.rc is None
    assert "lost with the daemon" not in aborted.reason
    assert "died without an exit record while the daemon ran" in aborted.reason
    how = "not this daemon's child" if adopted else "killed by SIGKILL"
    assert how in aborted.reason, aborted.reason


def test_a_row_inserted_under_a_running_daemon_stops_it_naming_the_row(tmp_path: Path) -> None:
    # Issue 14, finding 9: the daemon stopped with a raw "UNIQUE constraint failed:
    # events.seq". Its next append now refuses the log by name; agents are left running.
    marker = tmp_path / "runs.txt"
    home = _setup(tmp_path, _agent(marker, lines=600, pause_s=0.1, rc=0))
    daemon = start_daemon(home, "--until-idle", stderr=tmp_path / "daemon.err")
    try:
        wait_for(marker.exists, "the agent to start")
        started = wait_for(lambda: _of(_cell(home), ev.RunStarted), "the run")[0]
        with sqlite3.connect(home / "arenad.db") as conn:
            (head,) = conn.execute("SELECT seq FROM log_head").fetchone()
            conn.execute(
                "INSERT INTO events SELECT seq + 1000, stream, version + 1000, tag,"
                " schema_version, recorded_at_ms, payload, hash FROM events WHERE seq = ?",
                (head,),
            )
        assert daemon.wait(timeout=60) == 1
    finally:
        if daemon.poll() is None:
            daemon.kill()
            daemon.wait()
    err = (tmp_path / "daemon.err").read_text()
    assert "UNIQUE constraint" not in err and "Traceback" not in err, err[-3000:]
    assert "fails verification at row" in err and "past the log's head" in err, err[-3000:]
    assert groups.group_alive(started.pgid)  # type: ignore[attr-defined]
    os.killpg(started.pgid, signal.SIGKILL)  # type: ignore[attr-defined]


@pytest.mark.parametrize("when", ["crash-before", "crash-after"])
def test_a_crash_around_run_started_never_runs_the_agent_twice(tmp_path: Path, when: str) -> None:
    marker = tmp_path / "runs.txt"
    home = _setup(tmp_path, _agent(marker, lines=3, pause_s=0.1, rc=0))
    env = {**os.environ, "ARENAD_FAULT": f"{when}:run.started"}
    daemon = start_daemon(home, "--until-idle", env=env, stderr=tmp_path / "daemon.err")
    assert daemon.wait(timeout=60) == 86, (tmp_path / "daemon.err").read_text()[-2000:]

    _finish(home, tmp_path)
    events = _cell(home)
    assert len(marker.read_text().split()) == 1, "the agent ran twice (or never)"
    started = _of(events, ev.RunStarted)
    assert len(started) == 1
    assert started[0].attempt == 1  # type: ignore[attr-defined]
    assert not _of(events, ev.CellRetried)
    materialized = _of(events, ev.CellMaterialized)
    if when == "crash-before":
        # Nothing was recorded as started: the workspace was made afresh for the same
        # attempt, and the first wrapper never started its agent.
        assert [m.attempt for m in materialized] == [1, 1]  # type: ignore[attr-defined]
    else:
        # Recorded but never released: the orphaned wrapper read the log and started it.
        assert [m.attempt for m in materialized] == [1]  # type: ignore[attr-defined]
    assert isinstance(events[-1], ev.CellRecovered)
    _verify_log_ok(home)


def test_sigterm_with_leave_running_hands_the_agent_to_the_next_daemon(tmp_path: Path) -> None:
    marker = tmp_path / "runs.txt"
    home = _setup(tmp_path, _agent(marker, lines=20, pause_s=0.1, rc=0))
    daemon = start_daemon(home, "--leave-running", stderr=tmp_path / "daemon.err")
    wait_for(lambda: marker.exists(), "the agent to start")
    daemon.send_signal(signal.SIGTERM)
    assert daemon.wait(timeout=30) == 0
    assert not _has(home, ev.RunAborted)
    _finish(home, tmp_path)
    events = _cell(home)
    assert len(_of(events, ev.RunAdopted)) <= 1  # 0 if it ended before the restart
    assert [c.rc for c in _of(events, ev.RunCompleted)] == [0]  # type: ignore[attr-defined]
    assert len(marker.read_text().split()) == 1


def test_leave_running_exits_at_once_instead_of_waiting_for_the_agent(tmp_path: Path) -> None:
    # Issue 14, finding 8: the daemon waited for its agents (up to --drain-timeout) instead
    # of leaving them. The agent runs for a minute and the drain bound is ten: the daemon
    # must be gone while the agent still runs, having recorded nothing of the run's end.
    marker = tmp_path / "runs.txt"
    home = _setup(tmp_path, _agent(marker, lines=600, pause_s=0.1, rc=0))
    daemon = start_daemon(
        home, "--leave-running", "--drain-timeout", "600", stderr=tmp_path / "daemon.err"
    )
    wait_for(lambda: marker.exists(), "the agent to start")
    started = wait_for(lambda: _of(_cell(home), ev.RunStarted), "the run to be recorded")[0]
    daemon.send_signal(signal.SIGTERM)
    try:
        assert daemon.wait(timeout=60) == 0, (tmp_path / "daemon.err").read_text()[-3000:]
    finally:
        if daemon.poll() is None:
            daemon.kill()
            daemon.wait()
    assert groups.group_alive(started.pgid), "the agent was not left running"
    events = _cell(home)
    assert not _of(events, ev.RunAborted) and not _of(events, ev.RunCompleted)
    # The next daemon adopts it (aborted here only to keep the test short).
    second = start_daemon(home, "--until-idle", stderr=tmp_path / "daemon2.err")
    try:
        wait_for(lambda: _has(home, ev.RunAdopted), "the run to be adopted")
        assert cli(home, "abort", CELL).returncode == 0
        assert second.wait(timeout=120) == 0, (tmp_path / "daemon2.err").read_text()[-3000:]
    finally:
        if second.poll() is None:
            second.kill()
            second.wait()
    assert len(marker.read_text().split()) == 1


def test_a_second_signal_forces_the_stop(tmp_path: Path) -> None:
    marker = tmp_path / "runs.txt"
    # An agent that ignores SIGTERM, with a long kill grace: a drain would wait it out.
    stubborn = ["bash", "-c", f"trap '' TERM; {_report(marker)}; sleep 120"]
    home = _setup(tmp_path, stubborn, arm_extra="kill_grace_s = 60")
    daemon = start_daemon(home, stderr=tmp_path / "daemon.err")
    wait_for(lambda: marker.exists(), "the agent to start")
    daemon.send_signal(signal.SIGTERM)
    time.sleep(0.5)  # the drain is under way (no condition to wait on: it is waiting)
    assert daemon.poll() is None, "the first signal should drain, not stop at once"
    t0 = time.monotonic()
    daemon.send_signal(signal.SIGTERM)
    assert daemon.wait(timeout=30) == 0
    assert time.monotonic() - t0 < 20
    aborted = _of(_cell(home), ev.RunAborted)
    assert len(aborted) == 1
    started = _of(_cell(home), ev.RunStarted)[0]
    assert not groups.group_alive(started.pgid)  # type: ignore[attr-defined]


def test_output_past_the_cap_is_dropped_and_recorded_across_a_restart(tmp_path: Path) -> None:
    # The wrapper holds the cap, so it holds for an adopted run too; the run's end (seen by
    # the second daemon) records the cut, and what was ingested is exactly the kept bytes.
    marker = tmp_path / "runs.txt"
    home = _setup(
        tmp_path,
        _agent(marker, lines=200, pause_s=0.005, rc=0),
        extra="max_output_bytes = 1000",
    )
    _kill9_once_the_agent_runs(home, marker, tmp_path)
    _finish(home, tmp_path)
    events = _cell(home)
    started = _of(events, ev.RunStarted)
    assert len(started) == 1 and started[0].output_cap_bytes == 1000  # type: ignore[attr-defined]
    run_dir = _run_dir(events)
    capped = _of(events, ev.RunOutputCapped)
    assert capped == [
        ev.RunOutputCapped(
            attempt=1, path=str(run_dir / "cmd.out"), cap_bytes=1000, kept_bytes=1000
        )
    ]
    completed = _of(events, ev.RunCompleted)
    assert len(completed) == 1 and events.index(completed[0]) < events.index(capped[0])
    assert len((run_dir / "cmd.out").read_bytes()) == 1000
    _ingested_equals_file(read_all(home), 1, run_dir)
    recovered = _of(events, ev.CellRecovered)
    # The stream's usage sums would cover only the kept part of the run: unknown instead.
    assert len(recovered) == 1 and recovered[0].usage is None  # type: ignore[attr-defined]
    assert len(marker.read_text().split()) == 1
    _verify_log_ok(home)


def test_output_dropped_past_the_cap_is_not_silence(tmp_path: Path) -> None:
    # Past the cap the files stop growing, yet the agent is busy: no hang is detected. The
    # cap is reached on the fourth line; the agent then stays busy for ~2.6 s, well past
    # --hang-after (checked every quarter of it).
    script = "for i in $(seq 30); do echo line-$i-xxxxxxxxxxxxxxxxxxxx; sleep 0.1; done"
    home = _setup(tmp_path, ["bash", "-c", script], extra="max_output_bytes = 100")
    daemon = start_daemon(home, "--until-idle", "--hang-after", "1", stderr=tmp_path / "daemon.err")
    assert daemon.wait(timeout=60) == 0
    events = _cell(home)
    assert _of(events, ev.HangDetected) == []
    [capped] = _of(events, ev.RunOutputCapped)
    assert capped.cause == "cap" and capped.cap_bytes == 100  # type: ignore[attr-defined]
    assert len(_of(events, ev.RunCompleted)) == 1


def test_a_silent_run_gets_a_hang_event_and_is_aborted(tmp_path: Path) -> None:
    marker = tmp_path / "runs.txt"
    home = _setup(tmp_path, ["bash", "-c", f"{_report(marker)}; sleep 120"])
    daemon = start_daemon(
        home,
        "--until-idle",
        "--hang-after",
        "1",
        "--hang-abort",
        stderr=tmp_path / "daemon.err",
    )
    assert daemon.wait(timeout=60) == 0
    events = _cell(home)
    hangs = _of(events, ev.HangDetected)
    assert len(hangs) == 1 and hangs[0].action == "abort"  # type: ignore[attr-defined]
    assert hangs[0].silent_s >= 1  # type: ignore[attr-defined]
    aborted = _of(events, ev.RunAborted)
    assert len(aborted) == 1 and "hang" in aborted[0].reason  # type: ignore[attr-defined]


@pytest.mark.parametrize("fault", ["full-after", "readonly-after"])
def test_an_unwritable_store_stops_the_daemon_cleanly_and_loses_nothing(
    tmp_path: Path, fault: str
) -> None:
    marker = tmp_path / "runs.txt"
    home = _setup(tmp_path, _agent(marker, lines=20, pause_s=0.1, rc=0))
    env = {**os.environ, "ARENAD_FAULT": f"{fault}:run.started"}
    daemon = start_daemon(home, "--until-idle", env=env, stderr=tmp_path / "daemon.err")
    assert daemon.wait(timeout=60) == 1
    err = (tmp_path / "daemon.err").read_text()
    assert "cannot be written" in err and "Traceback" not in err
    _verify_log_ok(home)
    started = _of(_cell(home), ev.RunStarted)
    assert len(started) == 1

    _finish(home, tmp_path)
    events = _cell(home)
    assert [c.rc for c in _of(events, ev.RunCompleted)] == [0]  # type: ignore[attr-defined]
    assert len(marker.read_text().split()) == 1
    _ingested_equals_file(read_all(home), 1, _run_dir(events))
    _verify_log_ok(home)
