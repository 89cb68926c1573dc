"""bench/swebench_local.py runs end to end with one rep and prints every figure it promises.

A smoke test (real engine, real images, bubblewrap): it checks the figures are there and
well formed, never how long anything took.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from arenad.sandbox.bwrap import probe_host
from tests.swebench_support import engine_or_skip

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_one_rep_prints_every_figure() -> None:
    engine_or_skip()
    if probe_host() is None:
        pytest.skip("bubblewrap is not installed")
    done = subprocess.run(
        [sys.executable, "-m", "bench.swebench_local", "--reps", "1"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=900,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    out = done.stdout
    for figure in ("container start", "judge", "bwrap verify"):
        assert re.search(rf"^{figure} +median +[\d.]+ s", out, re.M), out
    assert re.search(r"^ratio judge / bwrap verify: \d+\.\d\d$", out, re.M), out
    assert re.search(r"^ratio container start / bwrap verify: \d+\.\d\d$", out, re.M), out
