"""bench/docker_sandbox.py runs with one rep and prints every figure it promises (a smoke
test with a real engine and bubblewrap: the figures' shape, never how long anything took)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from arenad.containers.docker import image_exists
from arenad.sandbox.bwrap import probe_host
from tests.swebench_support import engine_or_skip

REPO = Path(__file__).resolve().parents[2]


def test_one_rep_prints_every_figure() -> None:
    engine_or_skip()
    if probe_host() is None:
        pytest.skip("bubblewrap is not installed")
    if not image_exists("local/deb-py:bookworm"):
        pytest.skip("local/deb-py:bookworm is not in the engine (scripts/build-base-image)")
    done = subprocess.run(
        [sys.executable, "-m", "bench.docker_sandbox", "--reps", "1"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    out = done.stdout
    assert re.search(r"^bwrap agent run \(baseline\): \d+ ms median of 1$", out, re.M), out
    assert re.search(r"^docker agent run \(start, exit, rm\): \d+ ms median$", out, re.M), out
    assert re.search(r"^ratio docker / bwrap: [\d.]+$", out, re.M), out
