"""The daemon's live line: its text from the progress fold, and a real `arenad daemon` on
a pseudo-terminal (the line) and on a file (no line, only log lines)."""

from __future__ import annotations

import asyncio
import os
import pty
import re
import select
import shutil
import subprocess
import time
from pathlib import Path

from arenad.daemon.progress import duration, progress_line
from arenad.home import Home, open_store
from arenad.readmodels.progress import PROGRESS_TAGS, ProgressFold
from tests.conftest import make_repo
from tests.daemon.support import CLI, REPO_ROOT, command_campaign, submitted
from tests.report.arena_log import build_arena


def _arena_fold(home: Path) -> ProgressFold:
    async def read() -> ProgressFold:
        fold = ProgressFold()
        async with open_store(Home(home)) as store:
            fold.apply_all([r async for r in store.read_all(0, tags=PROGRESS_TAGS)])
        return fold

    return asyncio.run(read())


def test_the_line_from_the_fold(tmp_path: Path) -> None:
    asyncio.run(build_arena(tmp_path / "home"))
    snap = _arena_fold(tmp_path / "home").snapshot()
    line = progress_line(snap, finished=6, elapsed_s=60.0, max_parallel=4)
    # 18 cells, 1 still to run: at 6 a minute, 10 s.
    assert line == (
        "18 cells: 1 submitted · 15 recovered · 2 failed | running 0/4"
        " | spend $2.8750 (+1 unknown) | ETA 10s"
    )
    assert progress_line(snap, finished=0, elapsed_s=5.0, max_parallel=4).endswith("ETA -")


def test_durations() -> None:
    assert [duration(s) for s in (0, 42.4, 61, 3599, 3600, 11_100)] == [
        "0s",
        "42s",
        "1m01s",
        "59m59s",
        "1h00m",
        "3h05m",
    ]


def _campaign(tmp_path: Path) -> Path:
    home = tmp_path / "home"
    repo = tmp_path / "repo"
    base = make_repo(repo, {"a.txt": "a\n"})
    camp = command_campaign(
        tmp_path / "c.toml",
        name="prog",
        repo=repo,
        base=base,
        argv=["bash", "-c", "true"],
        instances=("i1", "i2", "i3"),
    )
    # A cell whose checkout fails: the daemon logs a warning while the line is up. Its
    # source is there at submit (which checks it) and gone by the time it runs.
    gone = tmp_path / "gone"
    bad = command_campaign(
        tmp_path / "bad.toml",
        name="bad",
        repo=gone,
        base=make_repo(gone, {"a.txt": "a\n"}),
        argv=["true"],
    )
    submitted(home, camp, bad)
    shutil.rmtree(gone)
    return home


def _on_a_terminal(home: Path, *args: str) -> tuple[int, str]:
    """Run the daemon with its stderr on a pseudo-terminal; (exit status, what it drew)."""
    master, slave = pty.openpty()
    process = subprocess.Popen(
        [*CLI, "--home", str(home), "daemon", *args],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=slave,
        cwd=REPO_ROOT,
    )
    os.close(slave)
    out = bytearray()
    deadline = time.monotonic() + 120
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 1.0)
            if not ready:
                if process.poll() is not None:
                    break
                continue
            try:
                chunk = os.read(master, 65536)
            except OSError:  # the pty's other end closed: the daemon is gone
                break
            if not chunk:
                break
            out += chunk
        return process.wait(timeout=60), out.decode(errors="replace")
    finally:
        os.close(master)
        if process.poll() is None:
            process.kill()


def test_on_a_terminal_the_daemon_draws_one_live_line(tmp_path: Path) -> None:
    home = _campaign(tmp_path)
    code, drawn = _on_a_terminal(home, "--until-idle", "--infra-retries", "0")
    assert code == 0, drawn
    drawn = drawn.replace("\r\n", "\n")
    assert re.search(r"\r\x1b\[2K4 cells: [^\r\n]* \| running \d/4 \| spend ", drawn), drawn
    # A log record clears the line, prints on a line of its own, and the line comes back.
    record = r"\r\x1b\[2K\d{4}-\d\d-\d\d [^\r\n]* WARNING arenad\.cell: bad:i1:CMD:0: [^\r\n]*\n"
    assert re.search(record + r"\r\x1b\[2K4 cells: ", drawn), drawn
    # Its last state stays on the terminal, as plain text.
    last = drawn.rstrip("\n").rsplit("\n", 1)[-1].rsplit("\r\x1b[2K", 1)[-1]
    assert re.fullmatch(
        r"4 cells: 3 recovered · 1 failed \| running 0/4 \| spend \$\d+\.\d{4}"
        r"( \(\+\d+ unknown\))? \| done",
        last,
    ), repr(last)


def test_off_a_terminal_only_log_lines(tmp_path: Path) -> None:
    home = _campaign(tmp_path)
    err = tmp_path / "daemon.err"
    with err.open("wb") as f:
        done = subprocess.run(
            [*CLI, "--home", str(home), "daemon", "--until-idle", "--infra-retries", "0"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=f,
            cwd=REPO_ROOT,
            timeout=120,
            check=False,
        )
    assert done.returncode == 0
    text = err.read_text()
    assert "\x1b" not in text and "\r" not in text and "cells:" not in text
    assert "WARNING arenad.cell: bad:i1:CMD:0:" in text
