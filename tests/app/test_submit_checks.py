"""`arenad submit` refuses a campaign whose every cell would fail on this machine (exit 2,
one line naming the file and the key, nothing appended): finding 8's missing secrets
wrapper, a sandboxed campaign without bubblewrap, a share that would show the home."""

from __future__ import annotations

import asyncio
import os
import stat
import subprocess
import sys
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
    base = (
        make_repo(repo, {"a.txt": "a\n"})
        if not repo.exists()
        else subprocess.run(
            ["git", "-C", str(repo), "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    )
    return command_campaign(
        tmp_path / file,
        name=file[:-5],
        repo=repo,
        base=base,
        argv=["/bin/true"],
        extra=extra,
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


def test_a_missing_source_or_base_commit_is_refused(tmp_path: Path) -> None:
    """Finding 6: `source = "./rpo"` (missing) was accepted, then every cell failed
    `clone-fail`; a base commit the source does not hold fails every checkout."""
    camp = _campaign(tmp_path, "")
    text = camp.read_text().replace(str(tmp_path / "repo"), str(tmp_path / "rpo"))
    missing = tmp_path / "missing.toml"
    missing.write_text(text.replace('name = "c"', 'name = "missing"'))
    err = _refused(tmp_path / "home", missing)
    assert f"[materializer] source: {tmp_path / 'rpo'} does not exist (instance i1)" in err
    no_commit = command_campaign(
        tmp_path / "nc.toml",
        name="nc",
        repo=tmp_path / "repo",
        base="1" * 40,
        argv=["true"],
        instances=("i1", "i2"),
    )
    out = cli(tmp_path / "home", "submit", str(no_commit))
    assert out.returncode == 2 and "Traceback" not in out.stderr
    lines = out.stderr.strip().splitlines()
    assert lines == [
        f"arenad: {no_commit}: instance i1: base_commit {'1' * 40}"
        f" is not in {tmp_path / 'repo'};"
        " nothing was appended"
    ]
    assert cli(tmp_path / "home", "events", "--json").stdout == ""


def test_an_agent_the_sandbox_would_not_show_is_refused(tmp_path: Path) -> None:
    """Finding 6: an agent outside the shared paths, or a virtualenv's script, failed each
    cell at launch; now submit says so, and sharing the venv (its `bin` and base interpreter
    follow) is accepted."""
    netns_ok = netns.problem() is None
    venv = tmp_path / "tools" / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    agent = venv / "bin" / "agent"
    agent.write_text(f"#!{venv / 'bin' / 'python'}\nprint('hi')\n")
    agent.chmod(0o755)
    repo = tmp_path / "repo"
    base = make_repo(repo, {"a.txt": "a\n"})
    hidden = command_campaign(
        tmp_path / "hidden.toml", name="hidden", repo=repo, base=base, argv=[str(agent)]
    )
    err = _refused(tmp_path / "home", hidden)
    assert "[[arms]] CMD: the agent's executable" in err and "is not visible inside" in err
    shared = command_campaign(
        tmp_path / "shared.toml",
        name="shared",
        repo=repo,
        base=base,
        argv=[str(agent)],
        extra=f'[sandbox]\nread_only = ["{venv}"]' + ("" if netns_ok else '\nnetwork = "host"'),
    )
    ok = cli(tmp_path / "home", "submit", str(shared))
    assert ok.returncode == 0, ok.stderr
    # An agent inside the arenad home is never shown to a cell.
    inside = tmp_path / "home" / "tools"
    inside.mkdir()
    (inside / "agent").write_text("#!/bin/sh\nexit 0\n")
    (inside / "agent").chmod(0o755)
    in_home = command_campaign(
        tmp_path / "inhome.toml",
        name="inhome",
        repo=repo,
        base=base,
        argv=[str(inside / "agent")],
        extra=f'[sandbox]\nread_only = ["{inside}"]',
    )
    out = cli(tmp_path / "home", "submit", str(in_home))
    assert out.returncode == 2, out
    assert "is inside the arenad home" in out.stderr


def test_every_missing_image_is_named_and_nothing_appended(tmp_path: Path) -> None:
    # Against the stand-in docker (tests/fakes/docker): one image is in its engine, two
    # are not; submit names both missing ones, one line each, and appends nothing.
    fakes = Path(__file__).resolve().parents[1] / "fakes"
    root = tmp_path / "docker-state"
    (root / "images" / "here%3A1" / "testbed").mkdir(parents=True)
    instances = [("i1", "here:1"), ("i2", "gone:1"), ("i3", "gone:2")]
    lines = ['name = "img"', 'split = "dev"', "[materializer]", 'kind = "image"']
    for iid, image in instances:
        lines += [
            "[[instances]]",
            f'instance_id = "{iid}"',
            f'base_commit = "{"0" * 40}"',
            'problem_statement = "p"',
            f'image = "{image}"',
            'verify_cmd = "true"',
        ]
    lines += ["[[arms]]", 'name = "CMD"', 'kind = "command"', 'argv = ["true"]']
    lines += ["uses_model = false"]
    camp = tmp_path / "img.toml"
    camp.write_text("\n".join(lines) + "\n")
    home = tmp_path / "home"
    env = {
        **os.environ,
        "PATH": f"{fakes}{os.pathsep}{os.environ['PATH']}",
        "FAKE_DOCKER_ROOT": str(root),
    }
    assert cli(home, "init").returncode == 0
    out = cli(home, "submit", str(camp), env=env)
    assert out.returncode == 2 and "Traceback" not in out.stderr, out
    err = out.stderr.strip().splitlines()
    assert len(err) == 2, err
    assert "instance i2: image gone:1" in err[0] and "instance i3: image gone:2" in err[1]
    assert all(str(camp) in line for line in err) and "nothing was appended" in err[-1]
    assert cli(home, "events", "--json").stdout == ""
