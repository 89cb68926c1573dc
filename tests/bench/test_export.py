"""bench/export.py runs end to end in its quick mode and prints every figure it promises.

A smoke test: it checks the figures are there and well formed, never how fast anything was.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_quick_mode_prints_every_figure() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "bench.export", "--quick", "--formats", "swebench,otel"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 0, done.stderr
    for size in (100, 1000):
        for kind in ("ledger", "swebench", "otel"):
            row = rf"{size}\s+{kind}\s+\d+\.\d\d\s+\d+\s+\d+\s+\d+\.\d MiB\s+\d+\.\d\dx"
            assert re.search(row, done.stdout), (row, done.stdout)
    for kind in ("ledger", "swebench", "otel"):
        assert re.search(rf"peak RSS 1000 / 100 cells, {kind}: \d+\.\d\dx", done.stdout)
