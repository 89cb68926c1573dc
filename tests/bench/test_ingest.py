"""bench/ingest.py in its quick mode: it runs end to end and prints every figure it promises.

Only the shape of the output is checked, never a timing: the figures belong to the machine.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
NUMBER = r"[\d,]+(?:\.\d+)?"
ROW = re.compile(
    rf"^  (arenad|watcher only|baseline) +({NUMBER}) +({NUMBER}) +({NUMBER}) +({NUMBER})$"
)


def test_quick_run_prints_its_figures() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "bench.ingest", "--quick"],
        cwd=REPO,
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        timeout=240,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    rows = [m.group(1) for line in lines if (m := ROW.match(line))]
    # Full speed: arenad, watcher only, baseline; paced: the same three.
    assert rows == ["arenad", "watcher only", "baseline"] * 2, out.stdout
    ratios = [line for line in lines if line.startswith("  ratio arenad/baseline: lines/s ")]
    assert len(ratios) == 2, out.stdout
    for ratio in ratios:
        assert re.search(rf"p50 lag {NUMBER}, p95 lag {NUMBER}, max lag {NUMBER}$", ratio)
    assert any(re.match(rf"^  store alone: {NUMBER} events/s", line) for line in lines)
    assert any(re.match(r"^  target p95 lag < 250 ms .*: (met|missed)$", line) for line in lines)
