"""Benchmark: each `arenad export FORMAT` against the ledger projection, in the same run.

    .venv/bin/python -m bench.export [--quick] [--small 2000] [--large 100000]
        [--messages 6] [--repeat 1] [--formats swebench,inspect,hf-sft,hf-rl,otel]

The synthetic log is ``bench.ledger``'s (solo and supervisor cells, real SqliteEventStore
appends), the small one built first and the large one continuing it. Each measurement is
a fresh subprocess (its own peak RSS, VmHWM): the ledger projection on one process (an
export projects on one process too) and every export, at both sizes.

Prints, per size and format: cells/s, records/s, peak RSS, and the export / ledger wall
time ratio; then each format's large / small peak RSS ratio (memory must stay flat: an
export streams a batch of cells at a time; parquet buffers one row group).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.ledger import build, peak_rss_kib

REPO = Path(__file__).resolve().parents[1]
FORMATS = ("swebench", "inspect", "hf-sft", "hf-rl", "otel")


def child(kind: str, home: Path, out: Path) -> dict[str, Any]:
    from arenad.home import Home

    t = time.perf_counter()
    if kind == "ledger":
        from arenad.ledger.service import project_ledger

        stats = asyncio.run(project_ledger(Home(home), out, jobs=1))
        records = stats["lines"]
    else:
        from arenad.export.service import export

        manifest = asyncio.run(export(Home(home), kind, out))
        records = manifest["records"]
    return {"seconds": time.perf_counter() - t, "records": records, "rss_kib": peak_rss_kib()}


def measure(kind: str, home: Path, out: Path) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-m", "bench.export", "--child", kind, str(home), str(out)],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        stdout=subprocess.PIPE,
        check=False,
    )
    if done.returncode != 0:
        raise SystemExit(f"bench child {kind} failed with status {done.returncode}")
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def _best(kind: str, home: Path, out: Path, repeat: int) -> dict[str, Any]:
    return min((measure(kind, home, out) for _ in range(repeat)), key=lambda r: r["seconds"])


def run(
    small: int, large: int, messages: int, workdir: Path, repeat: int, formats: list[str]
) -> dict[str, Any]:
    homes = {small: workdir / f"home-{small}", large: workdir / f"home-{large}"}
    t = time.perf_counter()
    asyncio.run(build(homes[small], 0, small, messages))
    shutil.copytree(homes[small], homes[large])
    asyncio.run(build(homes[large], small, large, messages))
    print(
        f"log: {large} cells ({messages} messages per transcript), built in"
        f" {time.perf_counter() - t:.1f} s; best of {repeat} run(s) each, one process each"
    )
    print(
        f"{'cells':>7} {'what':>9} {'seconds':>8} {'cells/s':>8} {'records/s':>10}"
        f" {'peak RSS':>10} {'vs ledger':>9}"
    )
    results: dict[str, Any] = {}
    for size in (small, large):
        row: dict[str, Any] = {}
        for kind in ("ledger", *formats):
            out = workdir / f"out-{size}-{kind}"
            if kind == "ledger":
                out = out.with_suffix(".jsonl")
            r = _best(kind, homes[size], out, repeat)
            r["ratio"] = r["seconds"] / row["ledger"]["seconds"] if row else 1.0
            row[kind] = r
            print(
                f"{size:>7} {kind:>9} {r['seconds']:>8.2f} {size / r['seconds']:>8.0f}"
                f" {r['records'] / r['seconds']:>10.0f} {r['rss_kib'] / 1024:>7.1f} MiB"
                f" {r['ratio']:>8.2f}x"
            )
            if out.is_dir():
                shutil.rmtree(out)
            else:
                out.unlink(missing_ok=True)
        results[str(size)] = row
    for kind in ("ledger", *formats):
        ratio = results[str(large)][kind]["rss_kib"] / results[str(small)][kind]["rss_kib"]
        results.setdefault("rss_ratio", {})[kind] = ratio
        print(f"peak RSS {large} / {small} cells, {kind}: {ratio:.2f}x")
    print("vs ledger = the export's wall time / the ledger projection's, same log, same run")
    return results


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="100 and 1 000 cells, 4 messages")
    parser.add_argument("--small", type=int, default=2000)
    parser.add_argument("--large", type=int, default=100_000)
    parser.add_argument("--messages", type=int, default=6, help="messages per transcript")
    parser.add_argument("--repeat", type=int, default=1, choices=range(1, 11), metavar="N")
    parser.add_argument("--formats", default=",".join(FORMATS))
    parser.add_argument("--keep", type=Path, help="build in this dir and keep it")
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        kind, home, out = args.child
        result = child(kind, Path(home), Path(out))
        sys.stdout.write(json.dumps(result) + "\n")
        return result
    small, large, messages = args.small, args.large, args.messages
    if args.quick:
        small, large, messages = 100, 1000, 4
    formats = [f for f in args.formats.split(",") if f]
    if not 0 < small < large:
        parser.error("need 0 < --small < --large")
    if args.keep is not None:
        args.keep.mkdir(parents=True, exist_ok=True)
        return run(small, large, messages, args.keep, args.repeat, formats)
    with tempfile.TemporaryDirectory(prefix="arenad-bench-export-") as d:
        return run(small, large, messages, Path(d), args.repeat, formats)


if __name__ == "__main__":
    main()
