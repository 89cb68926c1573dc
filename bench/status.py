"""Benchmark: `arenad status --summary` against the full `status` at many cells.

    .venv/bin/python -m bench.status [--cells 100000]

One campaign of N cells is submitted (bench.submit's campaign) into a fresh home; then the
real CLI is timed, each a fresh process: `status --summary` (counts per state and per
campaign: GROUP BY queries, no cell rows, no spend fold), `status --limit 50` and the full
`status` (every row). The ratio full / summary is printed beside the wall times: issue 29
asked for a summary under a second at 100 000 cells, where the full table took 15.7 s.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.submit import run as submit

ARENAD = str(Path(sys.executable).parent / "arenad")


def timed(home: Path, *args: str) -> tuple[float, int]:
    t0 = time.perf_counter()
    out = subprocess.run(
        [ARENAD, "--home", str(home), "status", *args],
        capture_output=True,
        text=True,
        check=True,
    )
    return time.perf_counter() - t0, len(out.stdout.splitlines())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cells", type=int, default=100_000)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="arenad-bench-status-"))
    try:
        added, wall, _ = submit(root, args.cells, 200)
        print(f"submitted {added} cells in {wall:.1f} s")
        home = root / f"home{args.cells}"
        # The baseline in the same run: an interpreter that starts and prints the help.
        t0 = time.perf_counter()
        subprocess.run([ARENAD, "--help"], capture_output=True, check=True)
        start = time.perf_counter() - t0
        summary, summary_lines = timed(home, "--summary")
        limited, limited_lines = timed(home, "--limit", "50")
        full, full_lines = timed(home)
        print(f"interpreter start (arenad --help): {start:6.2f} s")
        print(f"status --summary : {summary:6.2f} s ({summary_lines} lines)")
        print(f"status --limit 50: {limited:6.2f} s ({limited_lines} lines)")
        print(f"status (full)    : {full:6.2f} s ({full_lines} lines)")
        print(f"ratio full / summary: {full / summary:.1f}x")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
