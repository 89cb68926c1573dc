"""bench/oversized.py runs end to end in its quick mode and prints every figure it promises.

A smoke test: it checks the figures are there and well formed, never how much memory.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_quick_mode_prints_every_figure() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "bench.oversized", "--quick"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 0, done.stderr
    out = done.stdout
    for figure in ("daemon peak RSS", "verify-log peak RSS"):
        assert re.search(rf"{figure} +[\d.]+ MiB +[\d.]+ MiB +\d+\.\d\d", out), out
    assert re.search(r"largest event row +[\d,]+ B +[\d,]+ B \(ingest\.oversized\)", out), out
