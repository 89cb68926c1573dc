"""Hostile agents through the daemon, with the real bubblewrap: a command-arm agent that
tries to read and write outside its cell and to leave a process behind changes nothing
outside its cell, takes nothing into its patch, leaves no process, and its cell records
what it tried (its stderr: "Read-only file system", "No such file or directory").

Two cells of the same instance run at once (reps 0 and 1; rep 2 after them): each writes
its answer and looks for the other's while both run; neither finds it (issue 19). The agent
also reads the workspace template, ``arenad.db``, a marker in the user's ``~/.ssh`` and the
secrets dir, and writes what it read into its workspace."""

from __future__ import annotations

import json
import os
import signal
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from arenad.sandbox.bwrap import probe_host
from events import cell as ev
from events.base import Recorded
from events.streams import cell_of
from tests.conftest import make_repo
from tests.daemon.support import cli, command_campaign, read_all, start_daemon

pytestmark = pytest.mark.skipif(probe_host() is None, reason="bubblewrap is not installed")

FAKES = Path(__file__).resolve().parents[1] / "fakes"
BASE_TEXT = "a\n"

HOSTILE = r"""#!/bin/bash
# A hostile agent. $1: its run dir. It tries everything, reporting nothing itself:
# whatever worked lands in loot.txt; what failed is on its stderr.
run="$1"; ws="$run/ws"; cd "$ws" || exit 9
rep=$(echo "$run" | grep -o 'rep-[0-9]*')
if [ "$rep" = rep-0 ]; then other=rep-1; else other=rep-0; fi
other_ws=$(echo "$ws" | sed "s/$rep/$other/")
echo "the answer of $rep" > answer.txt
# The neighbour is writing its answer right now: look for it while both run.
for _ in $(seq 40); do [ -e "$other_ws/answer.txt" ] && break; sleep 0.1; done
{
  cat "$other_ws/answer.txt"
  cat "$HOME_ROOT"/workspace-templates/*/a.txt
  head -c 64 "$HOME_ROOT/arenad.db"
  cat "$SSH_MARKER"
  cat "$SECRETS_DIR/.env"
  ls -a "$HOME_ROOT" "$SECRETS_DIR" "$USER_HOME/.ssh"
} > loot.txt
# Writes outside the workspace: the daemon's home, the template, the user's home, the
# run dir's evidence, the system.
echo pwned > "$HOME_ROOT/pwned.txt"
for f in "$HOME_ROOT"/workspace-templates/*/a.txt; do echo pwned > "$f"; done
echo pwned > "$USER_HOME/pwned-$TAG"
echo pwned > "$run/arenad.exit.json"
echo pwned > "$run/cmd.out"
echo pwned >> /usr/pwned-$TAG
# A process that leaves the run's group and session.
setsid -f sleep "$LEFTOVER" < /dev/null > /dev/null 2>&1
echo "tried everything"
"""


def _live(marker: str) -> list[int]:
    pids = []
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            if marker.encode() in (proc / "cmdline").read_bytes():
                pids.append(int(proc.name))
        except OSError:
            continue
    return pids


@pytest.fixture
def ssh_marker() -> Iterator[tuple[Path, str]]:
    """A marker file in the user's real ~/.ssh (removed after)."""
    ssh = Path.home() / ".ssh"
    made = not ssh.exists()
    ssh.mkdir(mode=0o700, exist_ok=True)
    secret = f"arenad-test-ssh-{uuid.uuid4().hex}"
    marker = ssh / f"{secret}.marker"
    marker.write_text(secret + "\n")
    try:
        yield marker, secret
    finally:
        marker.unlink(missing_ok=True)
        if made:
            ssh.rmdir()


def test_a_hostile_agent_changes_and_takes_nothing_outside_its_cell(
    tmp_path: Path, ssh_marker: tuple[Path, str]
) -> None:
    marker, ssh_secret = ssh_marker
    tag = uuid.uuid4().hex
    leftover = f"{2000 + uuid.uuid4().int % 1000}.{uuid.uuid4().int % 10**6}"
    home = tmp_path / "home"
    tools = tmp_path / "tools"
    tools.mkdir()
    agent = tools / "hostile.sh"
    agent.write_text(HOSTILE)
    agent.chmod(0o755)
    secrets = tmp_path / "secrets"
    secrets.mkdir()
    env_secret = f"secrets-file-{tag}"
    (secrets / ".env").write_text(f"# {env_secret}\nFAKE_MODEL_KEY=k\n")
    repo = tmp_path / "repo"
    base = make_repo(repo, {"a.txt": BASE_TEXT})
    knobs = {
        "HOME_ROOT": str(home),
        "SSH_MARKER": str(marker),
        "SECRETS_DIR": str(secrets),
        "USER_HOME": str(Path.home()),
        "TAG": tag,
        "LEFTOVER": leftover,
    }
    env_table = "{ " + ", ".join(f"{k} = {json.dumps(v)}" for k, v in knobs.items()) + " }"
    camp = command_campaign(
        tmp_path / "hostile.toml",
        name="hx",
        repo=repo,
        base=base,
        argv=[str(agent), "{run_dir}"],
        uses_model=True,
        extra=(
            "reps = 3\n"
            f'[secrets]\ndir = "{secrets}"\nenv_files = [".env"]\n'
            # The documented way to run an agent installed somewhere unusual.
            f"[sandbox]\nread_only = [{json.dumps(str(tools))}]\n"
        ),
        arm_extra=f"env = {env_table}",
    )
    env = {**os.environ, "PATH": f"{FAKES}{os.pathsep}{os.environ['PATH']}"}
    assert cli(home, "init").returncode == 0
    out = cli(home, "submit", str(camp), env=env)
    assert out.returncode == 0, out.stderr
    try:
        # Two at a time: rep 2 is made from the template after reps 0 and 1 attacked it.
        daemon = start_daemon(
            home, "--until-idle", "--max-parallel", "2", env=env, stderr=tmp_path / "daemon.err"
        )
        assert daemon.wait(timeout=180) == 0, (tmp_path / "daemon.err").read_text()[-3000:]
        records = read_all(home)
        cells = ("hx:i1:CMD:0", "hx:i1:CMD:1", "hx:i1:CMD:2")
        spans: dict[str, list[int]] = {}
        for r in records:
            if isinstance(r.event, ev.RunStarted | ev.RunCompleted):
                spans.setdefault(cell_of(r.stream), []).append(r.seq)
        # The two cells really ran at the same time.
        (a0, a1), (b0, b1) = spans[cells[0]], spans[cells[1]]
        assert a0 < b1 and b0 < a1, spans
        secrets_seen = [
            "the answer of rep-",
            BASE_TEXT.strip() + "\n",
            "SQLite format",
            ssh_secret,
            env_secret,
            "arenad.db",
            marker.name,
        ]
        for cell in cells:
            _check_cell(records, cell, secrets_seen)
        # Nothing outside the cells changed.
        assert not (home / "pwned.txt").exists()
        assert not (Path.home() / f"pwned-{tag}").exists()
        assert not Path(f"/usr/pwned-{tag}").exists()
        assert marker.read_text() == ssh_secret + "\n"
        # No process of the agents' is left (the setsid'd one died with its sandbox).
        deadline = time.monotonic() + 10
        while _live(leftover) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _live(leftover), "a setsid'd child outlived its cell"
    finally:
        for pid in _live(leftover):
            os.kill(pid, signal.SIGKILL)


def _check_cell(records: list[Recorded], cell: str, secrets_seen: list[str]) -> None:
    events = [r.event for r in records if r.stream == f"cell/{cell}"]
    started = next(e for e in events if isinstance(e, ev.RunStarted))
    assert started.sandbox is not None and started.sandbox.kind == "bwrap"
    completed = next(e for e in events if isinstance(e, ev.RunCompleted))
    assert completed.rc == 0
    verified = next(e for e in events if isinstance(e, ev.CellVerified))
    assert isinstance(events[-1], ev.CellRecovered)
    run_dir = Path(started.exit_file or "").parent
    rep = cell.rsplit(":", 1)[1]
    # The patch holds the agent's own files and none of what it tried to take.
    patch = Path(verified.patch_path or "").read_text()
    assert f"+the answer of rep-{rep}" in patch and "loot.txt" in patch
    # The workspace came from an intact template (rep 2's was copied after the attacks).
    assert "a/a.txt" not in patch
    for secret in secrets_seen:
        loot_lines = [ln for ln in patch.splitlines() if ln.startswith("+") and "answer" not in ln]
        assert not any(secret in ln for ln in loot_lines), (cell, secret, patch)
    # The run dir's evidence is the wrapper's, not the agent's.
    assert "pwned" not in (run_dir / "arenad.exit.json").read_text()
    assert (run_dir / "cmd.out").read_text() == "tried everything\n"
    # What it tried is where arenad can see it.
    err = (run_dir / "cmd.err").read_text()
    assert "Read-only file system" in err and "No such file or directory" in err
    assert "workspace-templates/*/a.txt: No such file or directory" in err, err
