"""A by-hand throughput check of the watcher with a no-op sink (not a test).

    .venv/bin/python -m arenad.ingest.throughput [--lines 100000] [--files 8] [--rate 0]

``bulk``: the lines are written first, then one watcher ingests them all
(lines/s of pure ingestion). ``live``: a writer subprocess appends the lines
(``--rate`` lines/s in total, 0 = as fast as it can) while the watcher runs; the
lag of a line is sink-call time minus its write time, taken for the oldest line
of each batch and counted for every line of the batch (an upper bound).
"""

from __future__ import annotations

import argparse
import asyncio
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import msgspec

from arenad.ingest.watcher import GlobSelection, RunDirWatcher, WatchSource
from events.base import Event
from events.ingest import IngestionClosed, LineIngested

_WRITER = r"""
import json, os, sys, time
root, lines, files, rate = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
fds = [os.open(os.path.join(root, f"w{i}.ndjson"), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
       for i in range(files)]
pad = "x" * 120
start = time.monotonic()
for i in range(lines):
    if rate > 0:
        due = start + i / rate
        delay = due - time.monotonic()
        if delay > 0:
            time.sleep(delay)
    line = '{"kind":"message","i":%d,"t":%d,"direction":"up","message":"%s"}\n' % (
        i, time.time_ns(), pad)
    os.write(fds[i % files], line.encode())
"""


class _T(msgspec.Struct):
    t: int = 0


_t_decoder = msgspec.json.Decoder(_T)


def _line(i: int) -> bytes:
    return b'{"kind":"message","i":%d,"t":0,"direction":"up","message":"%s"}\n' % (i, b"x" * 120)


async def bulk(lines: int, files: int) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        handles = [open(root / f"w{i}.ndjson", "wb") for i in range(files)]  # noqa: SIM115
        for i in range(lines):
            handles[i % files].write(_line(i))
        for h in handles:
            h.close()
        seen = 0
        done = asyncio.Event()

        async def sink(events: list[Event]) -> None:
            nonlocal seen
            seen += len(events)
            if seen >= lines:
                done.set()

        source = WatchSource("bench", root, GlobSelection(lines=("*.ndjson",)))
        watcher = RunDirWatcher([source], sink)
        t0 = time.perf_counter()
        await watcher.start()
        await done.wait()
        elapsed = time.perf_counter() - t0
        await watcher.close()
        print(
            f"bulk: {lines} lines / {files} files in {elapsed:.3f}s"
            f" = {lines / elapsed:,.0f} lines/s ({watcher.stats.batches} batches)"
        )
        return lines / elapsed


async def live(lines: int, files: int, rate: float) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        seen = 0
        lags: list[tuple[float, int]] = []
        done = asyncio.Event()

        async def sink(events: list[Event]) -> None:
            nonlocal seen
            now = time.time_ns()
            first = next((e for e in events if isinstance(e, LineIngested)), None)
            if first is not None:
                lags.append(((now - _t_decoder.decode(first.raw).t) / 1e6, len(events)))
            seen += sum(1 for e in events if not isinstance(e, IngestionClosed))
            if seen >= lines:
                done.set()

        source = WatchSource("bench", root, GlobSelection(lines=("*.ndjson",)))
        watcher = RunDirWatcher([source], sink)
        await watcher.start()
        t0 = time.perf_counter()
        writer = subprocess.Popen(
            [sys.executable, "-c", _WRITER, str(root), str(lines), str(files), str(rate)]
        )
        await done.wait()
        elapsed = time.perf_counter() - t0
        await asyncio.to_thread(writer.wait)
        await watcher.close()
        weighted = sorted(lags)
        total = sum(n for _, n in weighted)
        acc = 0
        p50 = p95 = worst = 0.0
        for lag, n in weighted:
            acc += n
            if not p50 and acc >= total * 0.5:
                p50 = lag
            if not p95 and acc >= total * 0.95:
                p95 = lag
            worst = lag
        print(
            f"live (rate {'max' if rate <= 0 else f'{rate:,.0f}/s'}): {lines} lines in"
            f" {elapsed:.3f}s = {lines / elapsed:,.0f} lines/s; {watcher.stats.batches} batches;"
            f" write→sink lag p50 {p50:.1f} ms, p95 {p95:.1f} ms, max {worst:.1f} ms"
        )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--lines", type=int, default=100_000)
    parser.add_argument("--files", type=int, default=8)
    parser.add_argument("--rate", type=float, default=0.0)
    args = parser.parse_args()
    asyncio.run(bulk(args.lines, args.files))
    asyncio.run(live(args.lines, args.files, args.rate))


if __name__ == "__main__":
    main()
