"""``[sandbox] kind = "docker"``: the container's command line (pure), and what an agent in a
real container of the base image sees (a real docker engine; skipped without one)."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from arenad.containers.docker import engine_problem, image_exists, remove_container
from arenad.runs import commands
from arenad.sandbox import container
from arenad.sandbox.cellenv import prepare_cell_env
from arenad.sandbox.confine import CellSandbox, SandboxError, confine
from events.specs import SandboxSpec

BASE = "local/deb-py:bookworm"


def test_names_are_per_home_cell_and_attempt_and_docker_safe() -> None:
    a = container.container_name("/h1", "c:i/1:ARM:0", 1)
    assert a == container.container_name("/h1/", "c:i/1:ARM:0", 1)
    assert a.endswith("-c_i_1_ARM_0-a1") and a.startswith("arenad-")
    assert a != container.container_name("/h2", "c:i/1:ARM:0", 1)
    assert a != container.container_name("/h1", "c:i/1:ARM:0", 2)


def test_the_argv_names_variables_never_their_values() -> None:
    binds = container.ContainerBinds(
        workspace="/h/run/ws",
        workdir="/testbed",
        read_only=("/opt/tool",),
        run_dir="/h/run",
        read_write=("/h/run/home", "/h/run/ws"),
    )
    argv = container.container_argv(
        "docker",
        "img:1",
        "n1",
        binds,
        ["bash", "-c", "true"],
        env_names=["OPENAI_API_KEY", "PATH", "PWD"],
        network="none",
        memory_bytes=1 << 30,
        pids=100,
        cpus=1.5,
        labels={"arenad.home": "/h"},
    )
    joined = " ".join(argv)
    assert "-e OPENAI_API_KEY " in joined and "-e PATH " in joined and "PWD=/testbed" in joined
    assert "-e PWD " not in joined
    for flag in ("--memory=1073741824b", "--memory-swap=1073741824b", "--pids-limit=100"):
        assert flag in argv
    assert "--cpus=1.5" in argv and "--network=none" in argv and "--init" in argv
    assert "type=bind,src=/opt/tool,dst=/opt/tool,readonly" in argv
    assert "type=bind,src=/h/run,dst=/h/run,readonly" in argv
    assert "type=bind,src=/h/run/ws,dst=/testbed" in argv
    assert argv[-4:] == ["bash", "img:1", "-c", "true"] and "--rm" not in argv


class Cell:
    def __init__(self, root: Path, network: str = "none") -> None:
        self.home = root / "home"
        self.run_dir = self.home / "campaigns/c/rep-0/attempt-1/runs/i1/CMD"
        self.ws = self.run_dir / "ws"
        self.ws.mkdir(parents=True)
        (self.ws / "code.py").write_text("x = 1\n")
        self.env = prepare_cell_env(self.run_dir, {"PATH": "/usr/bin:/bin"}).env
        self.neighbour = self.home / "campaigns/c/rep-1/attempt-1/runs/i1/CMD/ws/answer.py"
        self.neighbour.parent.mkdir(parents=True)
        self.neighbour.write_text("the answer\n")
        (self.home / "arenad.db").write_text("store\n")
        self.share = root / "data"
        self.share.mkdir()
        (self.share / "rows.jsonl").write_text("{}\n")
        self.name = f"arenad-test-{os.getpid()}-{root.name}"
        self.spec = SandboxSpec(
            kind="docker",
            read_only=[str(self.share)],
            network=network,  # type: ignore[arg-type]
            memory_bytes=256 << 20,
            pids=256,
        )

    @property
    def sandbox(self) -> CellSandbox:
        return CellSandbox(
            spec=self.spec,
            run_dir=str(self.run_dir),
            workspace=str(self.ws),
            home_root=str(self.home),
            image=BASE,
            container=self.name,
            labels=container.labels(str(self.home), "c:i1:CMD:0", 1),
        )


def test_model_network_waits_for_the_forwarder_with_no_interface_of_its_own(
    tmp_path: Path,
) -> None:
    cell = Cell(tmp_path)
    argv = confine(
        cell.sandbox, ["agent", "x"], env=cell.env, chdir=str(cell.ws), container_network="model"
    ).argv
    assert "--network=none" in argv
    ready = str(cell.run_dir / container.NETWORK_READY)
    assert argv[-7:] == ["/bin/sh", BASE, "-c", container.READY_SHIM, ready, "agent", "x"]


def test_a_share_that_shows_the_home_is_refused(tmp_path: Path) -> None:
    cell = Cell(tmp_path)
    with pytest.raises(SandboxError, match="arenad home"):
        confine(
            cell.sandbox, ["true"], env=cell.env, chdir=str(cell.ws), read_only=[str(cell.home)]
        )


PROBE = r"""
set -u
echo "cwd $(pwd) $PWD"
for p in "$@"; do
  if [ ! -e "$p" ]; then echo "$p hidden"
  elif [ -w "$p" ]; then echo "$p rw"
  else echo "$p ro"; fi
done
echo "secret=${ARENAD_TEST_SECRET:-unset}"
python3 -c 'import socket; s = socket.socket(); s.settimeout(3); s.connect(("1.1.1.1", 53))' \
  2>/dev/null && echo net-open || echo net-closed
"""


def test_the_agent_sees_its_image_its_cell_and_nothing_else(tmp_path: Path) -> None:
    if (problem := engine_problem()) is not None:
        pytest.skip(f"no container engine: {problem}")
    if not image_exists(BASE):
        pytest.skip(f"{BASE} is not in the engine (scripts/build-base-image)")
    cell = Cell(tmp_path)
    env = {**cell.env, "ARENAD_TEST_SECRET": "s3cr3t-value"}
    paths = [
        "/testbed/code.py",
        str(cell.ws),
        str(cell.run_dir),
        env["HOME"],
        str(cell.share),
        str(cell.neighbour),
        str(cell.home / "arenad.db"),
        "/usr/lib/python3",
    ]
    confined = confine(
        cell.sandbox, ["bash", "-c", PROBE, "probe", *paths], env=env, chdir=str(cell.ws)
    )
    assert "s3cr3t-value" not in " ".join(confined.argv)
    assert confined.view.kind == "docker" and confined.view.container == cell.name
    try:
        result = asyncio.run(
            commands.run(confined.argv, cwd=cell.ws, env={**os.environ, **env}, timeout_s=120)
        )
    finally:
        asyncio.run(remove_container(cell.name))
    out = result.stdout.decode()
    assert result.code == 0, out + result.stderr.decode()
    assert "cwd /testbed /testbed" in out
    assert "/testbed/code.py rw" in out
    assert f"{cell.ws} rw" in out
    assert f"{cell.run_dir} ro" in out
    assert f"{env['HOME']} rw" in out
    assert f"{cell.share} ro" in out
    assert f"{cell.neighbour} hidden" in out
    assert f"{cell.home / 'arenad.db'} hidden" in out
    assert "secret=s3cr3t-value" in out  # passed by name, its value from the client's env
    assert "net-closed" in out
    assert "/usr/lib/python3 ro" in out or "/usr/lib/python3 rw" in out  # the image's own


def test_submit_refuses_a_docker_sandbox_whose_image_is_missing(tmp_path: Path) -> None:
    if (problem := engine_problem()) is not None:
        pytest.skip(f"no container engine: {problem}")
    from tests.conftest import make_repo
    from tests.daemon.support import cli, command_campaign

    repo = tmp_path / "repo"
    camp = command_campaign(
        tmp_path / "c.toml",
        name="dm",
        repo=repo,
        base=make_repo(repo, {"a.txt": "a\n"}),
        argv=["true"],
        extra='[sandbox]\nkind = "docker"\nimage = "arenad-test/no-such-image:1"\n',
    )
    home = tmp_path / "home"
    assert cli(home, "init").returncode == 0
    done = cli(home, "submit", str(camp))
    assert done.returncode == 2, done.stderr
    assert "arenad-test/no-such-image:1" in done.stderr and "Traceback" not in done.stderr
