"""The lease does not die with its file name (issue 27, finding 10): a daemon whose
``daemon.lock`` is deleted takes it again, so a second daemon is refused; a second daemon
that got the lease first makes the first one stop (exit 1, one line) and adopts its run.
Never two daemons driving one cell, never a ConcurrencyError in a cell."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

import pytest

from arenad.daemon.lease import DaemonLease
from arenad.errors import LeaseError
from events import cell as ev
from events.control import DaemonStarted
from tests.conftest import make_repo
from tests.daemon.support import (
    cli,
    command_campaign,
    read_all,
    start_daemon,
    submitted,
    wait_for,
)

CELL = "lease:i1:CMD:0"
# The agent outlasts what the test does to the daemons: it waits for a file in its own
# workspace, then answers.
AGENT = "while [ ! -e go ]; do sleep 0.05; done; echo answer > answer.txt"


def test_a_deleted_lease_file_is_taken_again(tmp_path: Path) -> None:
    path = tmp_path / "daemon.lock"
    first = DaemonLease(path)
    first.acquire()
    try:
        assert first.check() is None
        path.unlink()
        assert first.check() is None  # re-created and locked again
        assert path.read_text() == f"{os.getpid()}\n"
        with pytest.raises(LeaseError, match=f"another arenad daemon \\(pid {os.getpid()}\\)"):
            DaemonLease(path).acquire()
    finally:
        first.release()


def test_a_lease_another_daemon_took_is_lost(tmp_path: Path) -> None:
    path = tmp_path / "daemon.lock"
    first = DaemonLease(path)
    first.acquire()
    second = DaemonLease(path)
    try:
        path.unlink()
        second.acquire()  # the file the path names now is a new one, unlocked
        why = first.check()
        assert why is not None and "another daemon" in why and "took the lease" in why
        assert second.check() is None
    finally:
        first.release()
        second.release()


def _cell_events(home: Path) -> list[object]:
    return [r.event for r in read_all(home) if r.stream == f"cell/{CELL}"]


def _setup(tmp_path: Path) -> tuple[Path, Path]:
    home = tmp_path / "home"
    repo = tmp_path / "repo"
    base = make_repo(repo, {"a.txt": "a\n"})
    camp = command_campaign(
        tmp_path / "lease.toml",
        name="lease",
        repo=repo,
        base=base,
        argv=["bash", "-c", AGENT],
        verify_cmd="test -e answer.txt",
    )
    submitted(home, camp)
    return home, tmp_path / "d1.err"


def _running_ws(home: Path) -> Path:
    def started() -> Path | None:
        events = _cell_events(home)
        if not any(isinstance(e, ev.RunStarted) for e in events):
            return None
        [made] = [e for e in events if isinstance(e, ev.CellMaterialized)]
        return Path(made.workspace)

    ws: Path = wait_for(started, "the agent's run to start")
    return ws


def _no_concurrency_failure(home: Path, *stderr: str) -> None:
    events = _cell_events(home)
    assert not any(isinstance(e, ev.CellFailed) for e in events), events
    assert isinstance(events[-1], ev.CellRecovered), events[-1]
    verified = [e for e in events if isinstance(e, ev.CellVerified)]
    assert [v.verify_pass for v in verified] == [True]
    for text in stderr:
        assert "ConcurrencyError" not in text and "Traceback" not in text, text[-3000:]


def test_a_second_daemon_is_refused_when_the_lease_file_was_deleted(tmp_path: Path) -> None:
    home, err = _setup(tmp_path)
    first = start_daemon(home, "--until-idle", stderr=err)
    try:
        ws = _running_ws(home)
        lock = home / "daemon.lock"
        lock.unlink()
        # The running daemon takes its lease again at its next check...
        wait_for(lambda: lock.exists() and lock.read_text() == f"{first.pid}\n", "the lease back")
        # ...so a second one is refused, with one line naming the first.
        second = cli(home, "daemon", "--until-idle")
        assert second.returncode == 1
        assert second.stderr.strip() == (
            f"arenad: another arenad daemon (pid {first.pid}) is running on {home};"
            " stop it first, or use a different --home"
        )
        (ws / "go").touch()
        assert first.wait(timeout=120) == 0, err.read_text()
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()
    _no_concurrency_failure(home, err.read_text())
    starts = [r.event for r in read_all(home) if isinstance(r.event, DaemonStarted)]
    assert [s.pid for s in starts] == [first.pid]  # the refused one recorded nothing


def test_a_daemon_that_lost_its_lease_stops_and_the_new_one_adopts_its_run(
    tmp_path: Path,
) -> None:
    home, err = _setup(tmp_path)
    first = start_daemon(home, "--until-idle", stderr=err)
    second: subprocess.Popen[bytes] | None = None
    try:
        ws = _running_ws(home)
        # The first daemon is frozen (it cannot check its lease): the second one takes a
        # new lease file, starts, and waits for the first to notice.
        first.send_signal(signal.SIGSTOP)
        (home / "daemon.lock").unlink()
        second = start_daemon(home, "--until-idle", stderr=tmp_path / "d2.err")

        def second_started() -> bool:
            pids = [r.event.pid for r in read_all(home) if isinstance(r.event, DaemonStarted)]
            return second is not None and second.pid in pids

        wait_for(second_started, "the second daemon's start")
        first.send_signal(signal.SIGCONT)
        assert first.wait(timeout=60) == 1
        line = err.read_text().strip().splitlines()[-1]
        assert line.startswith("arenad: ") and "lease" in line, err.read_text()
        assert "this daemon stopped without recording anything more" in line
        wait_for(
            lambda: any(isinstance(e, ev.RunAdopted) for e in _cell_events(home)),
            "the second daemon to adopt the run",
        )
        (ws / "go").touch()
        assert second.wait(timeout=120) == 0, (tmp_path / "d2.err").read_text()
    finally:
        for daemon in (first, second):
            if daemon is not None and daemon.poll() is None:
                daemon.send_signal(signal.SIGCONT)
                daemon.kill()
                daemon.wait()
    _no_concurrency_failure(home, err.read_text(), (tmp_path / "d2.err").read_text())
    adopted = [e for e in _cell_events(home) if isinstance(e, ev.RunAdopted)]
    assert second is not None and [a.daemon_pid for a in adopted] == [second.pid]
    assert json.loads(cli(home, "status", "--json").stdout)["counts"] == {"recovered": 1}
