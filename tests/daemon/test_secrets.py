"""A sentinel secret reaches the agent through the wrapper and nothing arenad writes."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from events import cell as ev
from tests.conftest import make_repo
from tests.daemon.support import cli, command_campaign, read_all, start_daemon

FAKES = Path(__file__).resolve().parents[1] / "fakes"
SENTINEL = "sk-SENTINEL-7f3a9c0e2b14d8"
AMBIENT = "sk-AMBIENT-not-the-sentinel"


def test_sentinel_secret_never_written(tmp_path: Path) -> None:
    home = tmp_path / "home"
    secrets = tmp_path / "secrets"
    secrets.mkdir()
    (secrets / ".env").write_text(f"OPENAI_API_KEY={SENTINEL}\n")
    repo = tmp_path / "repo"
    base = make_repo(repo, {"a.txt": "a\n"})
    digest = hashlib.sha256(SENTINEL.encode()).hexdigest()
    # The agent proves it got the file's key (by hash: the value itself is never in argv).
    check = f'[ "$(printf %s "$OPENAI_API_KEY" | sha256sum | cut -c1-64)" = {digest} ]'
    camp = command_campaign(
        tmp_path / "sec.toml",
        name="sec",
        repo=repo,
        base=base,
        argv=["bash", "-c", check + " && echo changed >> a.txt"],
        uses_model=True,
        verify_cmd='test -z "${OPENAI_API_KEY:-}"',
        # The secrets wrapper's path: a command arm through the gateway gets no key at all.
        extra=f'[secrets]\ndir = "{secrets}"\nenv_files = [".env"]\n[gateway]\nkind = "none"\n',
    )
    env = {
        **os.environ,
        "PATH": f"{FAKES}{os.pathsep}{os.environ['PATH']}",
        "OPENAI_API_KEY": AMBIENT,
    }
    assert cli(home, "init").returncode == 0
    out = cli(home, "submit", str(camp), env=env)  # the wrapper must be found at submit
    assert out.returncode == 0, out.stderr
    err = tmp_path / "daemon.err"
    daemon = start_daemon(home, "--until-idle", env=env, stderr=err)
    assert daemon.wait(timeout=60) == 0

    events = [r.event for r in read_all(home) if r.stream == "cell/sec:i1:CMD:0"]
    completed = next(e for e in events if isinstance(e, ev.RunCompleted))
    assert completed.rc == 0  # the wrapper handed the agent the sentinel
    verified = next(e for e in events if isinstance(e, ev.CellVerified))
    assert verified.verify_pass is True  # verify ran with OPENAI_API_KEY stripped
    assert isinstance(events[-1], ev.CellRecovered)

    needle = SENTINEL.encode()
    assert needle not in err.read_bytes()
    scanned = 0
    for path in home.rglob("*"):
        if path.is_file() and not path.is_symlink():
            assert needle not in path.read_bytes(), f"the sentinel leaked into {path}"
            scanned += 1
    assert scanned > 5
    assert (home / "arenad.db").exists()


def test_the_auth_bootstrap_runs_without_secrets(tmp_path: Path) -> None:
    """Finding 9: without `[secrets]` the bootstrap was skipped, so a user's `opencode auth`
    login never reached opencode in the cell's private HOME. The reference always prepends
    it: the agent gets OPENCODE_AUTH_CONTENT (checked by hash; never written by arenad)."""
    home = tmp_path / "home"
    auth = tmp_path / "auth.json"
    content = '{"p":{"type":"api","key":"' + SENTINEL + '"}}'
    auth.write_text(content)
    repo = tmp_path / "repo"
    base = make_repo(repo, {"a.txt": "a\n"})
    digest = hashlib.sha256(content.encode()).hexdigest()
    check = f'[ "$(printf %s "$OPENCODE_AUTH_CONTENT" | sha256sum | cut -c1-64)" = {digest} ]'
    camp = command_campaign(
        tmp_path / "auth.toml",
        name="auth",
        repo=repo,
        base=base,
        argv=["bash", "-c", check + " && echo changed >> a.txt"],
        uses_model=True,
        # The old path (through the gateway the agent needs no auth: the gateway reads it).
        extra='[gateway]\nkind = "none"\n',
    )
    env = {**os.environ, "SWE_ARENA_OPENCODE_AUTH_FILE": str(auth)}
    assert cli(home, "init").returncode == 0
    assert cli(home, "submit", str(camp), env=env).returncode == 0
    err = tmp_path / "daemon.err"
    daemon = start_daemon(home, "--until-idle", env=env, stderr=err)
    assert daemon.wait(timeout=60) == 0
    events = [r.event for r in read_all(home) if r.stream == "cell/auth:i1:CMD:0"]
    completed = next(e for e in events if isinstance(e, ev.RunCompleted))
    assert completed.rc == 0  # the bootstrap handed the agent the auth file's content
    needle = SENTINEL.encode()
    for path in home.rglob("*"):
        if path.is_file() and not path.is_symlink():
            assert needle not in path.read_bytes(), f"the auth content leaked into {path}"
