"""bench/capacity.py in its quick mode: it runs end to end and prints every figure it promises.

Only the shape of the output is checked, never a timing: the figures belong to the machine.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
NUMBER = r"-?[\d,]+(?:\.\d+)?|nan"


def test_quick_run_prints_its_figures() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "bench.capacity", "--quick"],
        cwd=REPO,
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        timeout=240,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    rows = [line.split()[0] for line in lines if re.match(rf"^  (arenad|baseline) +{NUMBER}", line)]
    assert rows == ["arenad", "baseline"], out.stdout
    assert any(line.startswith("  ratio arenad/baseline: all running ") for line in lines)
    assert "  arenad: recovered 5/5, daemon starts 1" in lines, out.stdout
    assert not any("FAILED" in line for line in lines), out.stdout
