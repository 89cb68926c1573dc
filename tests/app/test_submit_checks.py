"""`arenad submit` refuses a campaign whose every cell would fail on this machine (exit 2,
one line naming the file and the key, nothing appended): finding 8's missing secrets
wrapper, a sandboxed campaign without bubblewrap, a share that would show the home."""

from __future__ import annotations

import asyncio
import os
import stat
from pathlib import Path

import pytest

from arenad import app
from arenad.errors import UserError
from arenad.home import Home
from arenad.runs import netns
from tests.conftest import make_repo
from tests.daemon.support import cli, command_campaign


def _campaign(tmp_path: Path, extra: str, file: str = "c.toml") -> Path:
    repo = tmp_path / "repo"
    base = make_repo(repo, {"a.txt": "a\n"}) if not repo.exists() else "0" * 40
    return command_campaign(
        tmp_path / file, name=file[:-5], repo=repo, base=base, argv=["true"], extra=extra
    )


def _refused(home: Path, camp: Path, env: dict[str, str] | None = None) -> str:
    assert cli(home, "init").returncode == 0
    out = cli(home, "submit", str(camp), env=env)
    assert out.returncode == 2, out
    assert "Traceback" not in out.stderr and len(out.stderr.strip().splitlines()) == 1
    assert str(camp) in out.stderr and "nothing was appended" in out.stderr
    assert cli(home, "events", "--json").stdout == ""
    return out.stderr


def test_a_secrets_wrapper_that_is_not_installed_is_refused(tmp_path: Path) -> None:
    secrets = tmp_path / "secrets"
    secrets.mkdir()
    table = (
        f'[secrets]\ndir = "{secrets}"\nenv_files = [".env"]\nwrapper = ["no-such-dotenvx", "run"]'
    )
    err = _refused(tmp_path / "home", _campaign(tmp_path, table))
    assert "[secrets] wrapper: 'no-such-dotenvx' is not found on PATH" in err
    # Installed (here: an executable of that name on PATH), the same campaign is accepted.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "no-such-dotenvx"
    fake.write_text("#!/bin/sh\nexit 0\n")
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
    assert cli(tmp_path / "home", "submit", str(tmp_path / "c.toml"), env=env).returncode == 0


def test_a_sandboxed_campaign_is_refused_where_bubblewrap_is_missing(tmp_path: Path) -> None:
    camp = _campaign(tmp_path, "")
    no_bwrap = {**os.environ, "PATH": str(tmp_path / "empty")}
    err = _refused(tmp_path / "home", camp, no_bwrap)
    assert "bubblewrap (bwrap) is not installed" in err and 'kind = "none"' in err
    # The explicit opt-out is accepted on such a machine.
    opted_out = _campaign(tmp_path, '[sandbox]\nkind = "none"', "none.toml")
    assert cli(tmp_path / "home", "submit", str(opted_out), env=no_bwrap).returncode == 0


def test_a_share_inside_the_arenad_home_is_refused(tmp_path: Path) -> None:
    home = tmp_path / "home"
    (home / "templates").mkdir(parents=True)
    camp = _campaign(tmp_path, f'[sandbox]\nread_only = ["{home / "templates"}"]')
    err = _refused(home, camp)
    assert "[sandbox] read_only: " in err and "inside the arenad home" in err


def test_a_campaign_needing_a_network_namespace_is_refused_where_none_can_be_made(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Not root (here: the probe says so): refused at submit with the opt-out named; a
    campaign on the host's network is accepted."""
    monkeypatch.setattr(netns, "problem", lambda: "[sandbox] network needs ... (EPERM)")
    home = Home(tmp_path / "home")
    asyncio.run(app.init_home(home))
    with pytest.raises(UserError, match=r"c\.toml: \[sandbox\] network needs .*nothing was"):
        asyncio.run(app.submit_campaign(home, _campaign(tmp_path, "")))
    host = _campaign(tmp_path, '[sandbox]\nnetwork = "host"', "host.toml")
    asyncio.run(app.submit_campaign(home, host))
