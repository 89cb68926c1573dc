"""Resource limits checked when the daemon starts: the figures, the refusal, the raise,
and what a running cell really holds open (the figure the check counts on)."""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import textwrap
from pathlib import Path

from arenad.ingest.inotify import Inotify
from arenad.runs import limits
from arenad.runs.limits import FDS_PER_CELL, FDS_RESERVE, WATCHES_PER_CELL, Capacity
from events import streams
from events.cell import CellMaterialized, RunCompleted, RunTimedOut
from tests.conftest import make_repo
from tests.daemon.support import (
    CLI,
    REPO_ROOT,
    cli,
    command_campaign,
    read_all,
    submitted,
    wait_for,
)


def _capacity(nofile: int = 20_000, watches: int | None = 100_000, used: int = 0) -> Capacity:
    return Capacity(
        nofile=nofile,
        nofile_hard=nofile,
        watches_max=watches,
        watches_used=used,
        instances_max=128,
        instances_used=3,
    )


def test_the_smallest_limit_decides_and_is_named() -> None:
    files = _capacity(nofile=FDS_RESERVE + 100 * FDS_PER_CELL)
    assert files.max_cells == 100
    assert files.refusal(100) is None
    refusal = files.refusal(101)
    assert refusal is not None and "RLIMIT_NOFILE" in refusal and "at most 100" in refusal
    watches = _capacity(watches=1000, used=1000 - 50 * WATCHES_PER_CELL)
    assert watches.max_cells == 50
    refusal = watches.refusal(51)
    assert refusal is not None and "fs.inotify.max_user_watches" in refusal
    assert "at most 50" in refusal


def test_no_free_inotify_instance_is_a_warning_not_a_refusal() -> None:
    full = Capacity(
        nofile=20_000,
        nofile_hard=20_000,
        watches_max=None,
        watches_used=None,
        instances_max=8,
        instances_used=8,
    )
    assert full.refusal(100) is None
    assert any("max_user_instances" in w for w in full.warnings())


async def test_inotify_use_is_counted_from_proc(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    before = limits.inotify_in_use()
    instance = Inotify()
    try:
        instance.watch(str(tmp_path / "a"), 0, lambda rescan: None)
        instance.watch(str(tmp_path / "b"), 0, lambda rescan: None)
        instances, watches = limits.inotify_in_use()
    finally:
        instance.close()
    # Other processes of this user come and go meanwhile; ours are at least counted.
    assert instances >= 1 and watches >= 2
    assert (instances, watches) != before or before[1] >= 2


_SPAWN = textwrap.dedent(
    """
    import asyncio, os, resource, sys, time
    from pathlib import Path
    from arenad.runs import limits
    from arenad.runs.detached import spawn_detached
    from arenad.runs.files import RunFiles
    from arenad.runs.launcher_client import WrapperLauncher

    async def main(run_dir):
        launcher = WrapperLauncher()
        files = RunFiles(run_dir=run_dir, stdout=run_dir + "/out", stderr=run_dir + "/err")
        run = await spawn_detached(
            ["bash", "-c", "ulimit -Sn"], cwd=run_dir, env=dict(os.environ), files=files,
            store_path=Path(run_dir) / "absent.db", stream="cell/c:i:A:0", attempt=1,
            timeout_s=30, kill_grace_s=0.5, clock=lambda: time.time_ns() // 1_000_000,
            launcher=launcher,
        )
        run.release()
        await run.wait(lambda: time.time_ns() // 1_000_000)
        await launcher.close()

    print(limits.raise_open_files(), resource.getrlimit(resource.RLIMIT_NOFILE)[0])
    asyncio.run(main(sys.argv[1]))
    """
)


def _low_limits() -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (300, 600))


def test_the_daemon_raises_its_limit_and_the_agent_keeps_the_one_given(tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, "-c", _SPAWN, str(tmp_path)],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        preexec_fn=_low_limits,
        timeout=60,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["600", "600"]
    assert (tmp_path / "out").read_text().strip() == "300"


def test_a_max_parallel_beyond_the_open_file_limit_is_refused_in_one_line(
    tmp_path: Path,
) -> None:
    home = tmp_path / "home"
    assert cli(home, "init").returncode == 0
    out = subprocess.run(
        [*CLI, "--home", str(home), "daemon", "--max-parallel", "200", "--until-idle"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        preexec_fn=_low_limits,
        timeout=60,
        check=False,
    )
    assert out.returncode == 2, out
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "RLIMIT_NOFILE" in lines[0] and "at most 67" in lines[0], lines
    assert "Traceback" not in out.stderr
    assert not [r for r in read_all(home) if r.stream == streams.DAEMON]


def _fds(pid: int) -> list[str]:
    out = []
    for name in os.listdir(f"/proc/{pid}/fd"):
        try:
            out.append(os.readlink(f"/proc/{pid}/fd/{name}"))
        except OSError:
            continue
    return out


def test_running_cells_hold_what_the_check_counts_on(tmp_path: Path) -> None:
    home = tmp_path / "home"
    repo = tmp_path / "repo"
    base = make_repo(repo, {"a.txt": "a\n"})
    cells = 4
    # Each agent runs until a file appears in its own workspace: sandboxed, it sees nothing
    # of the test's (a marker in tmp_path would never show, and each cell would run until
    # its timeout).
    camp = command_campaign(
        tmp_path / "c.toml",
        name="fds",
        repo=repo,
        base=base,
        argv=["bash", "-c", "echo '{{}}'; while [ ! -e stop ]; do sleep 0.1; done"],
        instances=tuple(f"i{n}" for n in range(cells)),
    )
    submitted(home, camp)
    with (tmp_path / "daemon.err").open("wb") as err:
        daemon = subprocess.Popen(
            [*CLI, "--home", str(home), "daemon", "--max-parallel", str(cells), "--until-idle"],
            cwd=REPO_ROOT,
            stdin=subprocess.DEVNULL,
            stderr=err,
        )
    try:

        def running() -> bool:
            started = {r.stream for r in read_all(home) if r.tag == "run.started"}
            return len(started) == cells

        wait_for(running, "every cell running")
        # Once the runs are released and their stdout tailed (one line each).
        wait_for(
            lambda: sum(r.tag == "ingest.line" for r in read_all(home)) == cells,
            "a line ingested from each cell",
        )
        held = _fds(daemon.pid)
        per_cell = [t for t in held if "anon_inode:[pidfd]" in t or "/runs/" in t]
        assert len(per_cell) <= 2 * cells, per_cell
        assert len(held) <= FDS_RESERVE + FDS_PER_CELL * cells, held
    finally:
        for r in read_all(home):
            if isinstance(r.event, CellMaterialized):
                (Path(r.event.workspace) / "stop").touch()
        assert daemon.wait(timeout=120) == 0
    ended = [r.event for r in read_all(home) if isinstance(r.event, RunCompleted | RunTimedOut)]
    assert len(ended) == cells and all(isinstance(e, RunCompleted) for e in ended), ended
