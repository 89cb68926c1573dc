"""Benchmark: live ingestion of growing run-dir files into the event log, against a baseline.

    .venv/bin/python -m bench.ingest [--lines 100000] [--files 8] [--quick]

A writer subprocess appends ``--lines`` JSON lines (150-300 bytes, shaped like journal and
worker lines, each carrying its own write time ``t`` in ns) round-robin across ``--files``
files of a supervisor run dir, one ``write`` per line, as fast as it can (then, in a second
part, at a fixed ``--paced-rate``). Measured, each with its own writer run:

arenad
    The daemon's ingestion path as arenad/daemon/runner.py wires it: a RunDirWatcher over the
    supervisor selection (watchdog + rescans, one FileTailer per file) handing batches to
    IngestSink.append on a SqliteEventStore opened as the daemon opens it (WAL, synchronous
    NORMAL, hash chain, the cells projector), stream ``ingest/<cell>/<attempt>``.
watcher only
    The same watcher with a sink that does nothing: what reading, splitting and classifying
    cost without the log.
baseline
    A plain loop over the same kind of files: ``os.read`` each, split complete lines, stdlib
    ``sqlite3`` ``executemany`` of (file, offset, line) in one transaction per round (WAL,
    synchronous NORMAL). No watchdog, no events, no hash chain, no JSON parsing; it sleeps
    1 ms when a round found nothing.
store alone
    The LineIngested events of the same lines appended through IngestSink in the watcher's
    batch size, with no files and no writer: the log's own capacity for these events.

After each arenad run, outside the timing, the log is checked: the hash chain verifies and
the stream holds every line of every file exactly once, in file order (else the bench fails).

Printed: lines/s (first write to last line committed) and the lag from a line's write to its
commit (p50, p95, max; commit time = when the sink returned), and ratios arenad/baseline.
Target on the 2-core build machine: p95 lag < 250 ms and >= 50 000 lines/s at full speed.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import msgspec

from arenad.app import init_home
from arenad.arms.supervisor import supervisor_selection
from arenad.daemon.ingest_sink import IngestSink
from arenad.home import Home, open_store
from arenad.ingest import (
    RunDirWatcher,
    WatchSource,
    line_end,
    parse_lines,
)
from arenad.ingest.watcher import DEFAULT_MAX_BATCH_EVENTS
from arenad.store.sqlite import SqliteEventStore
from events.base import Event
from events.ingest import LineIngested, LineMalformed
from events.streams import ingest_stream

TARGET_P95_MS = 250.0
TARGET_LINES_PER_S = 50_000.0

# One os.write per line (how a driver appends); the write time inside the line; optionally
# paced to `rate` lines/s in total.
_WRITER = r"""
import os, sys, time
root, lines, rate, names = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), sys.argv[4:]
fds = [os.open(os.path.join(root, n), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
       for n in names]
kinds = ("message", "started", "settled", "spawned", "metered")
start = time.monotonic()
for i in range(lines):
    if rate > 0:
        delay = start + i / rate - time.monotonic()
        if delay > 0:
            time.sleep(delay)
    pad = "x" * (40 + (i * 7919) % 151)
    line = (
        '{"kind":"%s","t":%d,"seq":%d,"at":"2026-07-23T10:00:00.000Z","id":"root:s%d",'
        '"label":"worker-%d","spend":{"tokens":{"input":%d,"output":%d}},"note":"%s"}\n'
        % (kinds[i % 5], time.time_ns(), i, i % 8, i % 8, i % 997, i % 89, pad)
    )
    os.write(fds[i % len(fds)], line.encode())
"""


class _Stamp(msgspec.Struct):
    t: int


_stamp = msgspec.json.Decoder(_Stamp)

Commits = list[tuple[int, list[bytes]]]
"""Per committed batch: the commit time (ns) and the raw lines it carried."""


def file_names(files: int) -> list[str]:
    """Run-dir files the supervisor selection ingests: the journal, progress, then workers."""
    names = ["journal.jsonl", "progress.ndjson"]
    names += [f"workers/w{i}.ndjson" for i in range(max(0, files - 2))]
    return names[:files]


def start_writer(root: Path, lines: int, names: list[str], rate: float) -> subprocess.Popen[bytes]:
    (root / "workers").mkdir(parents=True, exist_ok=True)
    return subprocess.Popen(
        [sys.executable, "-c", _WRITER, str(root), str(lines), str(rate), *names],
        stdin=subprocess.DEVNULL,
    )


@dataclass(frozen=True)
class Figures:
    name: str
    lines: int
    lines_per_s: float
    p50_ms: float
    p95_ms: float
    max_ms: float


def percentile(ordered: list[float], q: float) -> float:
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def figures(name: str, commits: Commits) -> Figures:
    """Per line: its commit time minus the write time the writer put inside it."""
    lags: list[float] = []
    first_write: int | None = None
    for commit_ns, raws in commits:
        for raw in raws:
            t = _stamp.decode(raw).t
            lags.append((commit_ns - t) / 1e6)
            first_write = t if first_write is None else min(first_write, t)
    if first_write is None:
        raise RuntimeError(f"{name}: nothing was ingested")
    lags.sort()
    return Figures(
        name=name,
        lines=len(lags),
        lines_per_s=len(lags) / ((commits[-1][0] - first_write) / 1e9),
        p50_ms=percentile(lags, 0.50),
        p95_ms=percentile(lags, 0.95),
        max_ms=lags[-1],
    )


_LINE_TYPES = (LineIngested, LineMalformed)


def _raw_lines(events: list[Event]) -> list[bytes]:
    return [
        e.raw.encode()
        for e in events
        if isinstance(e, LineIngested | LineMalformed) and not e.partial
    ]


async def watch_live(
    root: Path, name: str, lines: int, names: list[str], rate: float, *, to_store: bool
) -> Figures:
    """The RunDirWatcher over a run dir a writer fills, into the store or into nothing."""
    run_dir = root / "run"
    run_dir.mkdir(parents=True)
    home = Home(root / "home")
    await init_home(home)
    delivered: list[tuple[int, list[Event]]] = []
    seen = 0
    done = asyncio.Event()
    async with open_store(home) as store:
        ingest = IngestSink(store, ingest_stream("bench:i1:SUP:0", 1))
        await ingest.open()

        async def nothing(events: Sequence[Event]) -> None:
            return None

        deliver: Callable[[Sequence[Event]], Awaitable[None]] = (
            ingest.append if to_store else nothing
        )

        async def sink(events: list[Event]) -> None:
            nonlocal seen
            await deliver(events)
            # The commit time first; the lines are picked out after the run, so the
            # bench's bookkeeping costs the ingest path nothing while it is measured.
            delivered.append((time.time_ns(), events))
            seen += sum(type(e) in _LINE_TYPES for e in events)
            if seen >= lines:
                done.set()

        watcher = RunDirWatcher([WatchSource("supervisor", run_dir, supervisor_selection())], sink)
        await watcher.start()
        writer = start_writer(run_dir, lines, names, rate)
        try:
            await done.wait()
        finally:
            await asyncio.to_thread(writer.wait)
            await watcher.close()
        if to_store:
            await check_log(store, ingest.stream, run_dir, names)
    commits = [(at, raws) for at, events in delivered if (raws := _raw_lines(events))]
    return figures(name, commits)


async def check_log(store: SqliteEventStore, stream: str, run_dir: Path, names: list[str]) -> None:
    """After a run (outside the timing): the hash chain verifies, and the stream holds
    every line of every file exactly once, in file order, up to the file's end."""
    report = await store.verify_chain()
    if not report.ok:
        raise RuntimeError(f"verify-log fails after the run: {report.problem}")
    ends = dict.fromkeys(names, 0)
    for recorded in await store.read_stream(stream):
        event = recorded.event
        if isinstance(event, _LINE_TYPES):
            if event.offset != ends[event.path]:
                raise RuntimeError(
                    f"{event.path}: a line at {event.offset}, expected one at {ends[event.path]}"
                )
            ends[event.path] = line_end(event)
    for name, end in ends.items():
        size = (run_dir / name).stat().st_size
        if end != size:
            raise RuntimeError(f"{name}: the log covers {end} of its {size} bytes")


def baseline_live(root: Path, lines: int, names: list[str], rate: float) -> Figures:
    """A plain polling tailer into stdlib sqlite3: the floor arenad is compared with."""
    run_dir = root / "run"
    con = sqlite3.connect(root / "baseline.db", isolation_level=None)
    con.execute("PRAGMA journal_mode = WAL")
    con.execute("PRAGMA synchronous = NORMAL")
    con.execute("CREATE TABLE lines (file TEXT, offset INTEGER, line TEXT, UNIQUE (file, offset))")
    fds: dict[str, int] = {}
    rest = dict.fromkeys(names, b"")
    offsets = dict.fromkeys(names, 0)
    commits: Commits = []
    seen = 0
    writer = start_writer(run_dir, lines, names, rate)
    try:
        while seen < lines:
            rows: list[tuple[str, int, str]] = []
            raws: list[bytes] = []
            for name in names:
                fd = fds.get(name)
                if fd is None:
                    try:
                        fd = fds[name] = os.open(run_dir / name, os.O_RDONLY)
                    except FileNotFoundError:
                        continue
                while chunk := os.read(fd, 1 << 20):
                    rest[name] += chunk
                data = rest[name]
                end = data.rfind(b"\n") + 1
                if not end:
                    continue
                offset = offsets[name]
                for line in data[: end - 1].split(b"\n"):
                    rows.append((name, offset, line.decode()))
                    raws.append(line)
                    offset += len(line) + 1
                offsets[name] = offset
                rest[name] = data[end:]
            if not rows:
                time.sleep(0.001)
                continue
            con.execute("BEGIN")
            con.executemany("INSERT INTO lines VALUES (?, ?, ?)", rows)
            con.execute("COMMIT")
            commits.append((time.time_ns(), raws))
            seen += len(rows)
    finally:
        writer.wait()
        for fd in fds.values():
            os.close(fd)
        con.close()
    return figures("baseline", commits)


async def store_alone(root: Path, lines: int, names: list[str]) -> float:
    """Events/s of IngestSink.append for these lines' events, in the watcher's batch size."""
    files = root / "files"
    files.mkdir()
    if start_writer(files, lines, names, 0).wait() != 0:
        raise RuntimeError("the writer failed")
    events: list[Event] = []
    for name in names:
        parsed, _consumed = parse_lines(
            "supervisor", name, (files / name).read_bytes(), 0, observed_at_ms=0
        )
        events.extend(parsed)
    home = Home(root / "home")
    await init_home(home)
    async with open_store(home) as store:
        ingest = IngestSink(store, ingest_stream("bench:i1:SUP:0", 1))
        await ingest.open()
        started = time.perf_counter()
        for i in range(0, len(events), DEFAULT_MAX_BATCH_EVENTS):
            await ingest.append(events[i : i + DEFAULT_MAX_BATCH_EVENTS])
        elapsed = time.perf_counter() - started
    return len(events) / elapsed


def print_table(title: str, rows: list[Figures], base: Figures) -> None:
    print(title)
    print(f"  {'':14s} {'lines/s':>9s} {'lag p50':>9s} {'p95':>8s} {'max':>8s}  (ms)")
    for f in rows:
        print(
            f"  {f.name:14s} {f.lines_per_s:9,.0f} {f.p50_ms:9.1f} {f.p95_ms:8.1f} {f.max_ms:8.1f}"
        )
    for f in rows:
        if f is base:
            continue
        print(
            f"  ratio {f.name}/{base.name}: lines/s {f.lines_per_s / base.lines_per_s:.2f},"
            f" p50 lag {f.p50_ms / max(base.p50_ms, 1e-3):.2f},"
            f" p95 lag {f.p95_ms / max(base.p95_ms, 1e-3):.2f},"
            f" max lag {f.max_ms / max(base.max_ms, 1e-3):.2f}"
        )


def run_all(root: Path, lines: int, files: int, paced_lines: int, paced_rate: float) -> None:
    names = file_names(files)

    def part(name: str) -> Path:
        path = root / name
        path.mkdir()
        return path

    full = [
        asyncio.run(watch_live(part("arenad"), "arenad", lines, names, 0, to_store=True)),
        asyncio.run(watch_live(part("watch"), "watcher only", lines, names, 0, to_store=False)),
        baseline_live(part("baseline"), lines, names, 0),
    ]
    print_table(f"{lines:,} lines across {files} files, writer at full speed", full, full[-1])
    capacity = asyncio.run(store_alone(part("store"), lines, names))
    print(
        f"  store alone: {capacity:,.0f} events/s"
        f" (IngestSink.append, {DEFAULT_MAX_BATCH_EVENTS:,}-event batches, no files)"
    )
    arenad = full[0]
    met = arenad.p95_ms < TARGET_P95_MS and arenad.lines_per_s >= TARGET_LINES_PER_S
    print(
        f"  target p95 lag < {TARGET_P95_MS:.0f} ms and >= {TARGET_LINES_PER_S:,.0f} lines/s:"
        f" {'met' if met else 'missed'}"
    )
    paced = [
        asyncio.run(
            watch_live(
                part("arenad-paced"), "arenad", paced_lines, names, paced_rate, to_store=True
            )
        ),
        asyncio.run(
            watch_live(
                part("watch-paced"), "watcher only", paced_lines, names, paced_rate, to_store=False
            )
        ),
        baseline_live(part("baseline-paced"), paced_lines, names, paced_rate),
    ]
    print_table(
        f"{paced_lines:,} lines across {files} files, writer paced at {paced_rate:,.0f} lines/s",
        paced,
        paced[-1],
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=100_000)
    parser.add_argument("--files", type=int, default=8)
    parser.add_argument("--paced-lines", type=int, default=30_000)
    parser.add_argument("--paced-rate", type=float, default=10_000.0, help="lines/s")
    parser.add_argument(
        "--quick", action="store_true", help="a smoke run: 2 000 lines, 2 files, 1 000 paced"
    )
    args = parser.parse_args(argv)
    if args.quick:
        args.lines, args.files, args.paced_lines = 2_000, 2, 1_000
    if min(args.lines, args.files, args.paced_lines, args.paced_rate) <= 0:
        parser.error("--lines, --files, --paced-lines and --paced-rate must be positive")
    root = Path(tempfile.mkdtemp(prefix="arenad-bench-ingest-"))
    try:
        run_all(root, args.lines, args.files, args.paced_lines, args.paced_rate)
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
