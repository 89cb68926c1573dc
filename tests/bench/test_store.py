"""bench/store.py runs end to end in its quick mode and prints every figure it promises.

A smoke test: it checks the figures are there and well formed, never how fast anything was.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
RATE = r"[\d,]+/s"
RATE_OR_ABSENT = rf"(?:{RATE}|not installed)"
RATIO = r"\d+\.\d\d"
MIB = r"\d+\.\d MiB"


def test_quick_mode_prints_every_figure() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "bench.store", "--quick"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 0, done.stderr
    out = done.stdout
    appends = rf"{RATE}\s+{RATE}\s+{RATIO}\s+{RATE_OR_ABSENT}\s+(?:{RATIO}|-)"
    expected = [
        rf"single-event appends, [\d,]+ events\s+{appends}",
        rf"batched appends \(1000/txn\), [\d,]+ events\s+{appends}",
        rf"replay \(read \+ decode \+ fold\), [\d,]+ events\s+{RATE}\s+{RATE}\s+{RATIO}",
        rf"replay \(read \+ decode\), [\d,]+ events\s+{RATE}\s+{RATE}\s+{RATIO}",
        rf"replay peak RSS, [\d,]+ events\s+{MIB}\s+{MIB}\s+{RATIO}",
        r"batched appends >= 50% of sqlite3 executemany: \d+%\s+(met|MISSED)",
        rf"replay >= 300,000 events/s: {RATE}\s+(met|MISSED)",
        r"replay memory flat in log size: peak RSS x\d+\.\d\d for x\d+ the events\s+(met|MISSED)",
        r"restart to scheduling, [\d,]+ events \(chain checked from its checkpoint\): [\d,]+ ms;"
        r" the same check from the first row \(verify-log's walk\): [\d,]+ ms; ratio \d+\.\d\d",
        r"restart to scheduling < 1 s at [\d,]+ events: [\d,]+ ms\s+(met|MISSED)",
    ]
    for pattern in expected:
        assert re.search(pattern, out), f"no line matching {pattern!r} in:\n{out}"
    assert len(re.findall(r"replay peak RSS, ", out)) == 2, out
