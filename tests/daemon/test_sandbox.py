"""The sandbox through the real `arenad daemon` (command arm, real bubblewrap): what a run
records of its view, PWD for every child (finding 4), the launch error for an agent the
sandbox hides, and the run's timeout ending its whole sandbox."""

from __future__ import annotations

import json
import os
import sys
import uuid
from pathlib import Path

import pytest

from arenad.sandbox.bwrap import probe_host
from events import cell as ev
from events.base import Event
from tests.conftest import make_repo
from tests.daemon.support import (
    cli,
    command_campaign,
    read_all,
    start_daemon,
    status_json,
    submitted,
)

pytestmark = pytest.mark.skipif(probe_host() is None, reason="bubblewrap is not installed")

# Trusts $PWD as opencode does (bash would repair a stale one, so not bash).
PRINT_PWD = "import os; open('pwd.txt', 'w').write(os.environ.get('PWD', '<none>'))"


def _run(
    tmp_path: Path,
    argv: list[str],
    *,
    extra: str = "",
    verify_cmd: str = "true",
    path: str | None = None,
    **kw: object,
) -> tuple[Path, list[Event]]:
    home = tmp_path / "home"
    repo = tmp_path / "repo"
    base = make_repo(repo, {"a.txt": "a\n"})
    camp = command_campaign(
        tmp_path / "c.toml",
        name="sb",
        repo=repo,
        base=base,
        argv=argv,
        extra=extra,
        verify_cmd=verify_cmd,
        **kw,  # type: ignore[arg-type]
    )
    submitted(home, camp)
    # The daemon's own PWD names another directory: no child may inherit it.
    env = {**os.environ, "PWD": "/", "OLDPWD": "/usr"}
    if path is not None:
        env["PATH"] = path
    daemon = start_daemon(home, "--until-idle", env=env, stderr=tmp_path / "daemon.err")
    assert daemon.wait(timeout=120) == 0, (tmp_path / "daemon.err").read_text()[-3000:]
    return home, [r.event for r in read_all(home) if r.stream == "cell/sb:i1:CMD:0"]


def _one(events: list[Event], kind: type) -> Event:
    found = [e for e in events if isinstance(e, kind)]
    assert len(found) == 1, (kind, events)
    return found[0]


def test_every_child_gets_its_own_working_directory_as_pwd(tmp_path: Path) -> None:
    """An agent started directly (no shell to repair PWD) and the verify command see PWD =
    their real working directory, not the daemon's (verify's: the grading checkout)."""
    verify = "python3 -c \"import os; print(os.environ.get('PWD', '<none>'))\""
    _home, events = _run(tmp_path, ["python3", "-c", PRINT_PWD], verify_cmd=verify)
    started = _one(events, ev.RunStarted)
    ws = Path(started.cwd)  # type: ignore[attr-defined]
    assert (ws / "pwd.txt").read_text() == str(ws)
    verified = _one(events, ev.CellVerified)
    log = Path(verified.verify_log or "").read_text()  # type: ignore[attr-defined]
    assert log == f"{ws.parent / 'grade' / 'ws'}\n"
    assert isinstance(events[-1], ev.CellRecovered)


def test_run_started_records_the_view_and_history_shows_it(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    home, events = _run(
        tmp_path,
        ["bash", "-c", f"cat {data}/rows.txt > copied.txt"],
        extra=f"[sandbox]\nread_only = [{json.dumps(str(data))}]",
    )
    started = _one(events, ev.RunStarted)
    view = started.sandbox  # type: ignore[attr-defined]
    host = probe_host()
    assert host is not None and view is not None
    assert (view.kind, view.version) == ("bwrap", host.version)
    run_dir = str(Path(started.cwd).parent)  # type: ignore[attr-defined]
    assert str(data) in view.read_only and run_dir in view.read_only and "/usr" in view.read_only
    assert f"{run_dir}/ws" in view.read_write
    hist = cli(home, "history", "sb:i1:CMD:0")
    line = next(ln for ln in hist.stdout.splitlines() if " run.started " in ln)
    assert f"sandbox=bwrap {host.version}" in line and str(data) in line


def test_an_agent_the_sandbox_hides_fails_at_launch_saying_how_to_share_it(
    tmp_path: Path,
) -> None:
    tools = tmp_path / "tools"
    tools.mkdir()
    agent = tools / "agent.sh"
    agent.write_text("#!/bin/sh\necho ran > ran.txt\n")
    agent.chmod(0o755)
    # By its name on the daemon's PATH (submit, with another PATH, checks an agent it
    # finds: tests/app/test_submit_checks.py); the launch checks it again with the daemon's.
    home, events = _run(tmp_path, ["agent.sh"], path=f"{tools}{os.pathsep}{os.environ['PATH']}")
    failed = _one(events, ev.CellFailed)
    assert failed.stage == "launch" and failed.retryable is False  # type: ignore[attr-defined]
    assert "not visible inside the sandbox" in failed.error  # type: ignore[attr-defined]
    assert f'[sandbox] read_only = ["{tools}"]' in failed.error  # type: ignore[attr-defined]
    assert not any(isinstance(e, ev.RunStarted) for e in events)  # nothing paid for
    row = status_json(home)["cells"][0]
    assert row["state"] == "failed" and "not visible inside the sandbox" in row["reason"]


def test_a_timeout_ends_the_whole_sandbox(tmp_path: Path) -> None:
    marker = f"{3000 + uuid.uuid4().int % 1000}.{uuid.uuid4().int % 10**6}"
    script = f"setsid -f sleep {marker} </dev/null >/dev/null 2>&1; trap '' TERM; sleep 300"
    _home, events = _run(
        tmp_path, ["bash", "-c", script], timeout_s=3, arm_extra="kill_grace_s = 1"
    )
    timed_out = _one(events, ev.RunTimedOut)
    assert timed_out.rc == 124  # type: ignore[attr-defined]
    alive = []
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            if marker.encode() in (proc / "cmdline").read_bytes():
                alive.append(proc.name)
        except OSError:
            continue
    assert not alive


def test_verify_still_runs_the_projects_tests(tmp_path: Path) -> None:
    """pytest from a virtualenv (shown with its base interpreter) runs the workspace's
    tests inside the sandbox, after the agent's fix."""
    home = tmp_path / "home"
    repo = tmp_path / "repo"
    files = {
        "calc.py": "def add(a, b):\n    return a - b\n",
        "test_calc.py": "from calc import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n",
    }
    base = make_repo(repo, files)
    camp = command_campaign(
        tmp_path / "c.toml",
        name="vp",
        repo=repo,
        base=base,
        argv=["bash", "-c", "sed -i 's/a - b/a + b/' calc.py"],
        verify_cmd="python -m pytest -q -p no:cacheprovider test_calc.py",
    )
    submitted(home, camp)
    venv_bin = Path(sys.executable).parent
    env = {**os.environ, "PATH": f"{venv_bin}{os.pathsep}{os.environ['PATH']}"}
    daemon = start_daemon(home, "--until-idle", env=env, stderr=tmp_path / "daemon.err")
    assert daemon.wait(timeout=120) == 0, (tmp_path / "daemon.err").read_text()[-3000:]
    events = [r.event for r in read_all(home) if r.stream == "cell/vp:i1:CMD:0"]
    verified = _one(events, ev.CellVerified)
    log = Path(verified.verify_log or "").read_text()  # type: ignore[attr-defined]
    assert verified.verify_pass is True, log  # type: ignore[attr-defined]
    assert "1 passed" in log
