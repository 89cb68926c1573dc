"""A cell's view of the machine, with the real bubblewrap and real processes: what is shown
read-only, read-write, and hidden; what happens to its processes; which shares are refused;
and the clear error when the agent's executable is not visible."""

from __future__ import annotations

import os
import signal
import sys
import time
import uuid
from pathlib import Path

import pytest

from arenad.runs import commands
from arenad.sandbox.bwrap import probe_host
from arenad.sandbox.cellenv import prepare_cell_env
from arenad.sandbox.confine import (
    CellSandbox,
    SandboxError,
    check_visible,
    confine,
    share_problem,
    venv_base,
)
from events.specs import SandboxSpec
from tests.daemon.support import wait_for

pytestmark = pytest.mark.skipif(probe_host() is None, reason="bubblewrap is not installed")


class Cell:
    """A fake arenad home with this cell, a neighbour cell, a template, the store, a
    secrets dir and a share, laid out as the daemon lays them out."""

    def __init__(self, root: Path, **spec: object) -> None:
        self.home = root / "home"
        self.run_dir = self.home / "campaigns/c/rep-0/attempt-1/runs/i1/CMD"
        self.ws = self.run_dir / "ws"
        self.ws.mkdir(parents=True)
        self.env = prepare_cell_env(self.run_dir, {"PATH": os.environ["PATH"]}).env
        self.neighbour = self.home / "campaigns/c/rep-1/attempt-1/runs/i1/CMD/ws/answer.py"
        self.neighbour.parent.mkdir(parents=True)
        self.neighbour.write_text("the answer\n")
        (self.home / "templates/t").mkdir(parents=True)
        (self.home / "templates/t/calc.py").write_text("template\n")
        (self.home / "arenad.db").write_text("store\n")
        self.secrets = root / "secrets"
        self.secrets.mkdir()
        (self.secrets / ".env").write_text("OPENAI_API_KEY=sk-hidden\n")
        self.share = root / "data"
        self.share.mkdir()
        (self.share / "rows.jsonl").write_text("{}\n")
        self.spec = SandboxSpec(read_only=[str(self.share)], **spec)  # type: ignore[arg-type]

    @property
    def sandbox(self) -> CellSandbox:
        return CellSandbox(
            spec=self.spec,
            run_dir=str(self.run_dir),
            workspace=str(self.ws),
            home_root=str(self.home),
            secrets_dir=str(self.secrets),
        )

    async def run(self, script: str, **kwargs: object) -> commands.RunResult:
        confined = confine(self.sandbox, ["bash", "-c", script], env=self.env, chdir=str(self.ws))
        return await commands.run(confined.argv, cwd=self.ws, env=self.env, **kwargs)  # type: ignore[arg-type]


PROBE = """
for p in "$@"; do
  if [ ! -e "$p" ]; then echo "$p hidden"
  elif [ -w "$p" ]; then echo "$p rw"
  else echo "$p ro"; fi
done
"""


async def test_the_view_is_the_system_the_cell_and_the_shares(tmp_path: Path) -> None:
    cell = Cell(tmp_path)
    paths = {
        "/usr": "ro",
        "/etc/passwd": "ro",
        str(cell.run_dir): "ro",
        str(cell.run_dir / "prompt.txt"): "hidden",
        str(cell.ws): "rw",
        cell.env["HOME"]: "rw",
        cell.env["XDG_DATA_HOME"]: "rw",
        cell.env["TMPDIR"]: "rw",
        cell.env["PYTHONUSERBASE"]: "rw",
        str(cell.share / "rows.jsonl"): "ro",
        "/proc/sys/kernel/core_pattern": "ro",
        str(cell.home / "arenad.db"): "hidden",
        str(cell.home / "templates"): "hidden",
        str(cell.neighbour): "hidden",
        str(cell.secrets): "hidden",
        str(Path.home()): "hidden",
        "/sys/kernel": "hidden",
        str(tmp_path / "secrets/.env"): "hidden",
    }
    script = PROBE + 'echo "cwd=$(pwd) PWD=$PWD"; cat /etc/shadow 2>/dev/null | wc -c'
    confined = confine(
        cell.sandbox, ["bash", "-c", script, "probe", *paths], env=cell.env, chdir=str(cell.ws)
    )
    result = await commands.run(confined.argv, cwd=cell.ws, env=cell.env)
    assert result.code == 0, result.stderr_text
    lines = result.stdout_text.splitlines()
    seen = dict(line.rsplit(" ", 1) for line in lines[: len(paths)])
    assert seen == paths
    assert lines[len(paths)] == f"cwd={cell.ws} PWD={cell.ws}"
    assert lines[len(paths) + 1] == "0"  # /etc/shadow is masked
    # What was shown is recorded: the system, the share, the run dir; the writable dirs.
    view = confined.view
    assert view.kind == "bwrap" and view.version == probe_host().version  # type: ignore[union-attr]
    assert str(cell.share) in view.read_only and str(cell.run_dir) in view.read_only
    assert "/usr" in view.read_only
    assert str(cell.ws) in view.read_write and str(cell.run_dir) not in view.read_write
    assert not any(str(cell.home / "templates") in p for p in view.read_only)


async def test_writes_outside_the_cell_fail_or_vanish(tmp_path: Path) -> None:
    cell = Cell(tmp_path)
    script = (
        'echo x > "$1/arenad.exit.json" 2>&1 || true;'
        'echo x > "$2" || true;'
        "echo x > /usr/evil || true;"
        'mkdir -p "$3/evil" || true;'
        "echo ok > ws-file"
    )
    confined = confine(
        cell.sandbox,
        ["bash", "-c", script, "w", str(cell.run_dir), str(cell.neighbour), str(Path.home())],
        env=cell.env,
        chdir=str(cell.ws),
    )
    result = await commands.run(confined.argv, cwd=cell.ws, env=cell.env)
    assert result.code == 0
    assert result.stderr_text.count("Read-only file system") >= 3, result.stderr_text
    assert not (cell.run_dir / "arenad.exit.json").exists()
    assert cell.neighbour.read_text() == "the answer\n"
    assert not (Path.home() / "evil").exists()
    assert (cell.ws / "ws-file").read_text() == "ok\n"


def _live(marker: str) -> list[int]:
    pids = []
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            if marker.encode() in (proc / "cmdline").read_bytes():
                pids.append(int(proc.name))
        except OSError:
            continue
    return pids


@pytest.mark.parametrize("kind", ["bwrap", "none"])
async def test_a_setsid_child_does_not_outlive_a_sandboxed_command(
    tmp_path: Path, kind: str
) -> None:
    """Finding 6: a child that leaves the group with setsid outlives an unconfined command;
    in the sandbox's PID namespace it dies with it."""
    cell = Cell(tmp_path, kind=kind)
    marker = f"{1000 + uuid.uuid4().int % 1000}.{uuid.uuid4().int % 10**6}"
    # The command waits until the child is in its own session (it writes "left" after
    # setsid): a leader that ended while its child was still in the group would have it
    # killed with the group's leftovers, and the unconfined case would fail on a loaded
    # machine.
    result = await cell.run(
        f"setsid -f sh -c ': > left; exec sleep {marker}' < /dev/null > /dev/null 2>&1;"
        " while [ ! -e left ]; do sleep 0.01; done; echo started"
    )
    assert result.code == 0 and result.stdout_text == "started\n"
    try:
        if kind == "bwrap":
            wait_for(lambda: not _live(marker), "the setsid'd child to die with the sandbox", 10)
        else:
            # Without a sandbox the leftover survives (today's hole). Polled: a process in
            # the middle of an exec may show an empty command line for a moment.
            wait_for(lambda: _live(marker), "the leftover outside a sandbox to show", 10)
    finally:
        for pid in _live(marker):
            os.kill(pid, signal.SIGKILL)


async def test_the_group_term_reaches_the_child_which_keeps_its_grace(tmp_path: Path) -> None:
    cell = Cell(tmp_path)
    script = (
        "trap 'echo term > trapped; sleep 0.3; echo done >> trapped; exit 7' TERM;"
        "touch running; while :; do sleep 0.05; done"
    )
    confined = confine(cell.sandbox, ["bash", "-c", script], env=cell.env, chdir=str(cell.ws))
    handle = await commands.start(confined.argv, cwd=cell.ws, env=cell.env, kill_grace_s=10)
    deadline = time.monotonic() + 30
    while not (cell.ws / "running").exists():
        assert time.monotonic() < deadline
        time.sleep(0.02)
    handle.abort("test")
    result = await handle.wait()
    assert result.aborted and result.signals_sent == ["SIGTERM"]
    # bwrap survived the TERM and passed the child's own status on.
    assert result.exit_status == 7
    assert (cell.ws / "trapped").read_text() == "term\ndone\n"


def test_shares_that_would_show_what_is_hidden_are_refused(tmp_path: Path) -> None:
    home, secrets = str(tmp_path / "home"), str(tmp_path / "secrets")

    def problem(path: str) -> str | None:
        return share_problem(path, home_root=home, secrets_dir=secrets, homes=["/root"])

    assert problem(str(tmp_path / "data")) is None
    assert problem("/root/.local/bin") is None
    assert "system root" in (problem("/") or "") and "system root" in (problem("/tmp") or "")
    assert "contains the arenad home" in (problem(str(tmp_path)) or "")
    assert "inside the arenad home" in (problem(f"{home}/campaigns/c") or "")
    assert "secrets dir" in (problem(f"{secrets}/x") or "")
    assert "user's home" in (problem("/root") or "")


async def test_a_share_inside_the_home_is_refused_where_the_cell_runs(tmp_path: Path) -> None:
    cell = Cell(tmp_path)
    cell.spec = SandboxSpec(read_only=[str(cell.home / "templates")])
    with pytest.raises(SandboxError, match=r"\[sandbox\] read_only: .* inside the arenad home"):
        confine(cell.sandbox, ["true"], env=cell.env, chdir=str(cell.ws))


def test_a_venv_on_path_is_shown_with_its_base_interpreter(tmp_path: Path) -> None:
    cell = Cell(tmp_path)
    venv = Path(sys.prefix)
    base = venv_base(str(venv))
    if base is None:
        pytest.skip("the tests do not run in a virtualenv")
    env = {**cell.env, "PATH": f"{venv}/bin:/usr/bin:/bin"}
    confined = confine(cell.sandbox, ["true"], env=env, chdir=str(cell.ws))
    assert str(venv.resolve()) in confined.view.read_only or str(venv) in confined.view.read_only
    assert base in confined.view.read_only or any(base.startswith(p) for p in ["/usr"])


async def test_a_venv_python_runs_inside(tmp_path: Path) -> None:
    cell = Cell(tmp_path)
    if venv_base(sys.prefix) is None:
        pytest.skip("the tests do not run in a virtualenv")
    env = {**cell.env, "PATH": f"{sys.prefix}/bin:/usr/bin:/bin"}
    code = "import sys, pytest; print(sys.prefix)"
    confined = confine(cell.sandbox, ["python", "-c", code], env=env, chdir=str(cell.ws))
    result = await commands.run(confined.argv, cwd=cell.ws, env=env)
    assert result.code == 0, result.stderr_text
    assert result.stdout_text.strip() == sys.prefix


def test_a_hidden_executable_is_a_clear_error_naming_the_key(tmp_path: Path) -> None:
    cell = Cell(tmp_path)
    tool = tmp_path / "tools/mycli"
    tool.parent.mkdir()
    tool.write_text("#!/bin/sh\necho hi\n")
    tool.chmod(0o755)
    with pytest.raises(SandboxError) as err:
        confine(
            cell.sandbox, [str(tool)], env=cell.env, chdir=str(cell.ws), executables=[str(tool)]
        )
    message = str(err.value)
    assert "not visible inside the sandbox" in message
    assert f'[sandbox] read_only = ["{tool.parent}"]' in message
    # Shared, it runs.
    cell.spec = SandboxSpec(read_only=[str(tool.parent)])
    confine(cell.sandbox, [str(tool)], env=cell.env, chdir=str(cell.ws), executables=[str(tool)])
    with pytest.raises(SandboxError, match="was not found on the cell's PATH"):
        confine(
            cell.sandbox,
            ["no-such-cli"],
            env=cell.env,
            chdir=str(cell.ws),
            executables=["no-such-cli"],
        )


def test_a_script_whose_interpreter_is_hidden_is_refused(tmp_path: Path) -> None:
    interp = tmp_path / "interp/python9"
    interp.parent.mkdir()
    interp.write_text("#!/bin/sh\n")
    interp.chmod(0o755)
    script = tmp_path / "bin/agent"
    script.parent.mkdir()
    script.write_text(f"#!{interp}\n")
    script.chmod(0o755)
    roots = [str(tmp_path / "bin"), "/usr", "/bin"]

    def visible(p: str) -> bool:
        return any(p == r or p.startswith(r + "/") for r in roots)

    with pytest.raises(SandboxError, match="the interpreter of"):
        check_visible(str(script), search_path="/usr/bin", cwd="/", visible=visible)
    roots.append(str(interp.parent))
    check_visible(str(script), search_path="/usr/bin", cwd="/", visible=visible)


def test_none_is_an_explicit_opt_out(tmp_path: Path) -> None:
    cell = Cell(tmp_path, kind="none")
    confined = confine(cell.sandbox, ["agent", "x"], env=cell.env, chdir=str(cell.ws))
    assert confined.argv == ["agent", "x"] and not confined.sandboxed
    assert confined.view.kind == "none" and confined.view.read_only == []
