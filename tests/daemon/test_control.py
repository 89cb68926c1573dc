"""`arenad abort` and SIGTERM against a real `arenad daemon` subprocess (command arm, git)."""

from __future__ import annotations

import signal
from pathlib import Path

from events import cell as ev
from events.base import Event
from tests.conftest import make_repo
from tests.daemon.support import cli, command_campaign, read_all, start_daemon, wait_for

CELL = "ctl:i1:CMD:0"


def _events(home: Path, cell: str) -> list[Event]:
    return [r.event for r in read_all(home) if r.stream == f"cell/{cell}"]


def _has(home: Path, cell: str, kind: type) -> bool:
    return any(isinstance(e, kind) for e in _events(home, cell))


def _setup(tmp_path: Path) -> Path:
    home = tmp_path / "home"
    repo = tmp_path / "repo"
    base = make_repo(repo, {"a.txt": "a\n"})
    camp = command_campaign(
        tmp_path / "c.toml", name="ctl", repo=repo, base=base, argv=["bash", "-c", "sleep 60"]
    )
    assert cli(home, "init").returncode == 0
    out = cli(home, "submit", str(camp))
    assert out.returncode == 0, out.stderr
    return home


def test_abort_running_cell(tmp_path: Path) -> None:
    home = _setup(tmp_path)
    daemon = start_daemon(home, "--until-idle", stderr=tmp_path / "daemon.err")
    try:
        wait_for(lambda: _has(home, CELL, ev.RunStarted), "RunStarted")
        out = cli(home, "abort", CELL, "--reason", "test abort")
        assert out.returncode == 0, out.stderr
        assert daemon.wait(timeout=60) == 0
    finally:
        if daemon.poll() is None:
            daemon.kill()
            daemon.wait()
    aborted = [e for e in _events(home, CELL) if isinstance(e, ev.RunAborted)]
    assert len(aborted) == 1
    assert aborted[0].rc == 130
    assert "test abort" in aborted[0].reason


def test_sigterm_aborts_then_next_daemon_finishes(tmp_path: Path) -> None:
    home = _setup(tmp_path)
    daemon = start_daemon(home, stderr=tmp_path / "daemon.err")
    try:
        wait_for(lambda: _has(home, CELL, ev.RunStarted), "RunStarted")
        daemon.send_signal(signal.SIGTERM)
        assert daemon.wait(timeout=60) == 0
    finally:
        if daemon.poll() is None:
            daemon.kill()
            daemon.wait()
    aborted = [e for e in _events(home, CELL) if isinstance(e, ev.RunAborted)]
    assert len(aborted) == 1 and "shutting down" in aborted[0].reason
    assert not _has(home, CELL, ev.CellVerified)

    second = start_daemon(home, "--until-idle", stderr=tmp_path / "daemon2.err")
    assert second.wait(timeout=60) == 0
    events = _events(home, CELL)
    verified = [e for e in events if isinstance(e, ev.CellVerified)]
    assert len(verified) == 1 and verified[0].scored is False
    assert isinstance(events[-1], ev.CellRecovered)
