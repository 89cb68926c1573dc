"""Benchmark: `arenad submit` of a large campaign, memory and time against a small one.

    .venv/bin/python -m bench.submit [--small 2000] [--large 100000] [--statement-bytes 2000]

Each run is a fresh process (so its peak RSS is its own) that submits a campaign of N
instances (one arm, one rep; each row carries a problem statement of the given size, about a
SWE-bench row's) read from a JSONL file into a fresh home. The ratio of the peak RSS of
the large run to the small one's is what "memory flat in the number of cells" means here
(only the cells' ids are kept, for the campaign's record).

The large run is also measured against the store's floor in the same process: the rows the
submit wrote (the same encoded events, hashes and all) inserted into a second fresh home
with one raw ``executemany`` in one transaction (issue 33's goal: within 2x). Meanwhile a
thread with a connection of its own takes the write lock (``BEGIN IMMEDIATE``, as the daemon's
every append does) over and over: the longest it waited is how long a daemon running beside
the submit is held off (goal: at most a second).
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
import asyncio, resource, sqlite3, sys, threading, time
from pathlib import Path
from arenad.app.log import init_home
from arenad.app.submit import submit_campaign
from arenad.home import Home

class Prober(threading.Thread):
    # Takes the write lock again and again, as a daemon's appends would; keeps the
    # longest wait for it.

    def __init__(self, db):
        super().__init__(daemon=True)
        self.db, self.longest, self.stop = db, 0.0, threading.Event()

    def run(self):
        conn = sqlite3.connect(self.db, isolation_level=None, timeout=600)
        while not self.stop.is_set():
            t0 = time.perf_counter()
            conn.execute("BEGIN IMMEDIATE")
            self.longest = max(self.longest, time.perf_counter() - t0)
            conn.execute("COMMIT")
            self.stop.wait(0.005)  # a daemon appends now and then, not in a tight loop
        conn.close()

def cpu():
    # This process's CPU seconds, every thread's (SQLite works on aiosqlite's): what a
    # shared machine's neighbours disturb less than the wall.
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime

async def go():
    home = Home(Path(sys.argv[1]))
    await init_home(home)
    probe = sys.argv[3] == "probe"
    prober = Prober(str(home.db_path))
    if probe:
        prober.start()
    c0, t0 = cpu(), time.perf_counter()
    result = await submit_campaign(home, Path(sys.argv[2]))
    wall, spent = time.perf_counter() - t0, cpu() - c0
    prober.stop.set()
    if probe:
        prober.join()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # before the floor's rows
    raw = raw_cpu = -1.0
    if probe:
        # The floor: the same rows, one executemany in one transaction, in a fresh home.
        floor = Home(Path(sys.argv[1] + "-raw"))
        await init_home(floor)
        src = sqlite3.connect(home.db_path)
        cols = "seq, stream, version, tag, schema_version, recorded_at_ms, payload, hash"
        rows = src.execute(f"SELECT {cols} FROM events WHERE seq > 0 ORDER BY seq").fetchall()
        src.close()
        dst = sqlite3.connect(floor.db_path, isolation_level=None)
        dst.execute("PRAGMA journal_mode = WAL")
        dst.execute("PRAGMA synchronous = NORMAL")
        known = dst.execute("SELECT COALESCE(MAX(seq), 0) FROM events").fetchone()[0]
        rows = [r for r in rows if r[0] > known]
        c1, t1 = cpu(), time.perf_counter()
        dst.execute("BEGIN IMMEDIATE")
        dst.executemany(f"INSERT INTO events ({cols}) VALUES (?, ?, ?, ?, ?, ?, ?, ?)", rows)
        dst.execute("COMMIT")
        raw, raw_cpu = time.perf_counter() - t1, cpu() - c1
        dst.close()
    return result.added, wall, peak, raw, prober.longest, spent, raw_cpu

print(*asyncio.run(go()))
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
        '[materializer]\nkind = "git"\nsource = "https://example.invalid/org/proj.git"\n'
        '[[arms]]\nname = "SOLO"\nkind = "solo"\nmodel = "p/m"\n'
    )
    return camp


Figures = tuple[int, float, int, float, float, float, float]
"""Cells added, wall (s), peak RSS (KiB), the raw floor's wall (s), longest lock wait (s),
and the CPU seconds of the submit and of the raw floor."""


def run(root: Path, n: int, statement_bytes: int, probe: bool) -> Figures:
    camp = write(root, n, statement_bytes)
    out = subprocess.run(
        [sys.executable, "-c", CHILD, str(root / f"home{n}"), str(camp), "probe" if probe else ""],
        capture_output=True,
        text=True,
    )
    if out.returncode != 0:
        sys.exit(f"the submit of {n} cells failed:\n{out.stderr}")
    added, wall, peak, raw, held, spent, raw_cpu = out.stdout.split()
    return (
        int(added),
        float(wall),
        int(peak),
        float(raw),
        float(held),
        float(spent),
        float(raw_cpu),
    )


def _met(ok: bool) -> str:
    return "met" if ok else "MISSED"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", type=int, default=2000)
    parser.add_argument("--large", type=int, default=100_000)
    parser.add_argument("--statement-bytes", type=int, default=2000)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="arenad-bench-submit-"))
    try:
        t0 = time.perf_counter()
        figures = {
            n: run(root, n, args.statement_bytes, probe=n == args.large)
            for n in (args.small, args.large)
        }
        for n, (added, wall, peak, *_) in figures.items():
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
        _, wall, _, raw, held, spent, raw_cpu = large
        ratio = wall / raw
        print(
            f"{args.large} cells against one raw executemany of the same rows in one"
            f" transaction ({raw:.2f} s): {ratio:.2f}x (goal <= 2x: {_met(ratio <= 2)});"
            f" CPU {spent:.2f} s against {raw_cpu:.2f} s: {spent / raw_cpu:.2f}x"
        )
        print(
            f"a daemon's append waited at most {held:.2f} s for the write lock meanwhile"
            f" (goal <= 1 s: {_met(held <= 1)})"
        )
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
