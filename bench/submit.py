"""Benchmark: `arenad submit` of a large campaign, memory and time against a small one.

    .venv/bin/python -m bench.submit [--small 2000] [--large 100000] [--statement-bytes 2000]

Each run is a fresh process (so its peak RSS is its own) that submits a campaign of N
instances (one arm, one rep; each row carries a problem statement of the given size, about a
SWE-bench row's) read from a JSONL file into a fresh home. The cells are validated in one
pass, made in a second and written in batches inside one transaction; the ratio of the
peak RSS of the large run to the small one's is what "memory flat in the number of cells"
means here (only the cells' ids are kept, for the campaign's record).
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CHILD = """
import asyncio, resource, sys, time
from pathlib import Path
from arenad.app.log import init_home
from arenad.app.submit import submit_campaign
from arenad.home import Home

async def go():
    home = Home(Path(sys.argv[1]))
    await init_home(home)
    t0 = time.perf_counter()
    result = await submit_campaign(home, Path(sys.argv[2]))
    return result.added, time.perf_counter() - t0

added, wall = asyncio.run(go())
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(added, wall, peak)
"""


def write(root: Path, n: int, statement_bytes: int) -> Path:
    rows = root / f"rows-{n}.jsonl"
    filler = "x" * statement_bytes
    with rows.open("w") as f:
        for i in range(n):
            row = {
                "instance_id": f"org__proj-{i}",
                "repo": "org/proj",
                "base_commit": f"{i:040x}",
                "problem_statement": f"bug {i}: {filler}",
                "FAIL_TO_PASS": f'["tests/test_{i}.py::t"]',
            }
            f.write(json.dumps(row) + "\n")
    camp = root / f"c{n}.toml"
    camp.write_text(
        f'name = "bench{n}"\ninstances_file = "{rows.name}"\nmax_cells = {n}\n'
        'verify_template = "true {FAIL_TO_PASS}"\n'
        '[materializer]\nkind = "git"\nsource = "/nonexistent"\n'
        '[[arms]]\nname = "SOLO"\nkind = "solo"\nmodel = "p/m"\n'
    )
    return camp


def run(root: Path, n: int, statement_bytes: int) -> tuple[int, float, int]:
    camp = write(root, n, statement_bytes)
    out = subprocess.run(
        [sys.executable, "-c", CHILD, str(root / f"home{n}"), str(camp)],
        capture_output=True,
        text=True,
        check=True,
    )
    added, wall, peak = out.stdout.split()
    return int(added), float(wall), int(peak)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", type=int, default=2000)
    parser.add_argument("--large", type=int, default=100_000)
    parser.add_argument("--statement-bytes", type=int, default=2000)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="arenad-bench-submit-"))
    try:
        t0 = time.perf_counter()
        figures = {n: run(root, n, args.statement_bytes) for n in (args.small, args.large)}
        for n, (added, wall, peak) in figures.items():
            print(
                f"{n:>7} cells: {wall:7.2f} s  {added / wall:8.0f} cells/s"
                f"  peak RSS {peak / 1024:7.1f} MiB"
            )
        small, large = figures[args.small], figures[args.large]
        per_cell = (large[1] / args.large) / (small[1] / args.small)
        print(
            f"ratio large/small: cells {args.large / args.small:.0f}x, peak RSS"
            f" {large[2] / small[2]:.2f}x, wall per cell {per_cell:.2f}x"
            f" (total {time.perf_counter() - t0:.0f} s)"
        )
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
