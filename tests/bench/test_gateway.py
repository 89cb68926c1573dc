"""bench/gateway.py in its quick mode: it runs end to end and prints every figure it promises.

Only the shape of the output is checked, never a timing: the figures belong to the machine.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_quick_run_prints_its_figures() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "bench.gateway", "--quick"],
        cwd=REPO,
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        timeout=240,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    for pattern in (
        r"^  direct +p50 +[\d.]+ ms",
        r"^  gateway +p50 +[\d.]+ ms",
        r"^  added +p50 +-?[\d.]+ ms",
        r"^  ratio +[\d.]+ \(gateway / direct\)",
        r"^journal: (\d+) lines for \1 gateway calls",
    ):
        assert re.search(pattern, out.stdout, re.MULTILINE), (pattern, out.stdout)
