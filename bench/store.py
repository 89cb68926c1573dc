"""Benchmark: the event store's append and replay paths beside raw SQLite and `eventsourcing`.

    .venv/bin/python -m bench.store [--quick]      (or: .venv/bin/python bench/store.py)

Every figure is measured in this run, on the same machine and the same schema (arenad's
migrations), WAL and synchronous=NORMAL everywhere:

- appends/s, one event per transaction, and batched (1 000 events per transaction: ten
  streams of 100, grouped by stream as the ingest path writes them), through arenad's
  SqliteEventStore (aiosqlite; encode, hash chain, version check, read-back decode, head
  row) beside stdlib ``sqlite3`` inserting the same encoded rows (``executemany`` for a
  batch; no chain, no checks: the raw ceiling) and beside the ``eventsourcing`` library's
  SQLiteApplicationRecorder (its notification log is the same global order);
- replay events/s over a log of 1 000 000 events (read + decode + fold: the cell state
  machine over cell streams, a line and byte count over ingest streams) beside stdlib
  ``sqlite3`` doing the same read (``fetchmany``), decode and fold;
- peak RSS of each replay at 100 000 and 1 000 000 events, each in a fresh subprocess so
  the peak is that run's alone; a store that replays in bounded batches stays flat;
- restart to scheduling at 1 000 000 events: what a daemon does before its first
  scheduling pass (open the store with its read model, read the head, the campaigns' and
  control streams, append ``daemon.started`` — where the chain is checked, incrementally
  from its checkpoint — and ask the cells port what is runnable), beside the same chain
  check walked from the first row (what ``verify-log`` does, and a check without a
  checkpoint would have to).

``--quick`` shrinks every size (a smoke run: the figures print, they mean little).
``eventsourcing`` comes with ``pip install -e '.[bench]'``; without it its column says so.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import resource
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec

from arenad.cell.machine import CellState, apply
from arenad.readmodels.cells import CellsProjector
from arenad.readmodels.view import cells_view
from arenad.store.base import AppendRequest
from arenad.store.sqlite import SqliteEventStore
from events import cell as ev
from events import streams
from events.base import Event
from events.codec import decode_event, encode_event, event_tag, event_version
from events.control import DaemonStarted
from events.ingest import LineIngested
from events.specs import CellSpec, InstanceSpec, MaterializerSpec, SoloArm
from events.streams import is_cell_stream

BATCH = 1000  # events per transaction in the batched figures
STREAMS_PER_BATCH = 10
STREAMS = 100  # ingest streams the append figures rotate over
NOW_MS = 1_700_000_000_000


class Sizes(msgspec.Struct, frozen=True):
    single: int  # events appended one per transaction, per contender
    batched: int  # events appended 1 000 per transaction, per contender
    replay_small: int
    replay_large: int
    cells: int  # cells in each replay log (the fold's state: the same at both sizes)


FULL = Sizes(
    single=5_000, batched=200_000, replay_small=100_000, replay_large=1_000_000, cells=1000
)
QUICK = Sizes(single=200, batched=5_000, replay_small=5_000, replay_large=20_000, cells=50)


# -- the workload -------------------------------------------------------------------------


def line(stream_no: int, n: int) -> LineIngested:
    """One line of an opencode JSON stream, ~200 bytes: the high-rate event of a run."""
    raw = (
        f'{{"type":"text","timestamp":{NOW_MS + n},"sessionID":"ses_{stream_no:04d}",'
        f'"part":{{"id":"prt_{n:08d}","type":"text",'
        '"text":"Reading the widget module to find where the lever is handled."}}'
    )
    return LineIngested(
        source="stdout", path="oc.jsonl", offset=n * 200, length=len(raw), raw=raw, kind="text"
    )


def ingest_stream(cell_no: int) -> str:
    return streams.ingest_stream(f"bench:i{cell_no:05d}:SOLO:0", 1)


# A pool of distinct events reused across batches (the database stores bytes; building a
# fresh object per row would only time msgspec's constructor).
POOL = [line(i % STREAMS, i) for i in range(BATCH)]


def batches(total: int) -> Iterator[list[tuple[str, list[Event]]]]:
    """``total`` events as transactions of BATCH: STREAMS_PER_BATCH streams of equal share."""
    per_stream = BATCH // STREAMS_PER_BATCH
    for b in range(total // BATCH):
        yield [
            (
                ingest_stream((b * STREAMS_PER_BATCH + s) % STREAMS),
                list(POOL[s * per_stream : (s + 1) * per_stream]),
            )
            for s in range(STREAMS_PER_BATCH)
        ]


def singles(total: int) -> Iterator[tuple[str, Event]]:
    for i in range(total):
        yield ingest_stream(i % STREAMS), POOL[i % BATCH]


# -- contenders: arenad, stdlib sqlite3, eventsourcing --------------------------------------


async def open_arenad(path: Path) -> SqliteEventStore:
    # The store alone: read models (the cells projector) are not the store's cost.
    return await SqliteEventStore.open(path, projectors=(), synchronous="NORMAL")


async def arenad_appends(path: Path, sizes: Sizes, batched: bool) -> float:
    store = await open_arenad(path)
    versions: dict[str, int] = defaultdict(int)
    try:
        started = time.perf_counter()
        if batched:
            for batch in batches(sizes.batched):
                requests = [AppendRequest(s, versions[s], events) for s, events in batch]
                await store.append_many(requests)
                for s, events in batch:
                    versions[s] += len(events)
        else:
            for s, event in singles(sizes.single):
                await store.append(s, versions[s], [event])
                versions[s] += 1
        return time.perf_counter() - started
    finally:
        await store.close()


_INSERT = (
    "INSERT INTO events (seq, stream, version, tag, schema_version, recorded_at_ms, payload, hash)"
    " VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
)
_NO_HASH = bytes(32)


def connect_sqlite3(path: Path) -> sqlite3.Connection:
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("PRAGMA journal_mode = WAL")
    db.execute("PRAGMA synchronous = NORMAL")
    return db


def sqlite3_appends(path: Path, sizes: Sizes, batched: bool) -> float:
    db = connect_sqlite3(path)
    versions: dict[str, int] = defaultdict(int)
    seq = 0
    try:
        started = time.perf_counter()
        if batched:
            for batch in batches(sizes.batched):
                rows = []
                for s, events in batch:
                    version = versions[s]
                    for event in events:
                        seq += 1
                        version += 1
                        rows.append(
                            (
                                seq,
                                s,
                                version,
                                event_tag(event),
                                event_version(event),
                                NOW_MS,
                                encode_event(event),
                                _NO_HASH,
                            )
                        )
                    versions[s] = version
                db.execute("BEGIN")
                db.executemany(_INSERT, rows)
                db.execute("COMMIT")
        else:
            for s, event in singles(sizes.single):
                seq += 1
                versions[s] += 1
                row = (
                    seq,
                    s,
                    versions[s],
                    event_tag(event),
                    event_version(event),
                    NOW_MS,
                    encode_event(event),
                    _NO_HASH,
                )
                db.execute("BEGIN")
                db.execute(_INSERT, row)
                db.execute("COMMIT")
        return time.perf_counter() - started
    finally:
        db.close()


def eventsourcing_appends(path: Path, sizes: Sizes, batched: bool) -> float | None:
    try:
        from eventsourcing.persistence import StoredEvent
        from eventsourcing.sqlite import SQLiteApplicationRecorder, SQLiteDatastore
    except ImportError:
        return None
    # One connection (this is one writer), the same WAL + NORMAL as the others: the
    # library switches WAL on itself but leaves synchronous at SQLite's default (FULL).
    datastore = SQLiteDatastore(str(path), pool_size=1, max_overflow=0, originator_id_type="text")
    try:
        with datastore.get_connection(commit=True) as conn:
            conn.cursor().execute("PRAGMA synchronous = NORMAL")
        recorder = SQLiteApplicationRecorder(datastore)
        recorder.create_table()
        versions: dict[str, int] = defaultdict(int)
        started = time.perf_counter()
        if batched:
            for batch in batches(sizes.batched):
                stored = []
                for s, events in batch:
                    for event in events:
                        versions[s] += 1
                        stored.append(
                            StoredEvent(
                                originator_id=s,
                                originator_version=versions[s],
                                topic=event_tag(event),
                                state=encode_event(event),
                            )
                        )
                recorder.insert_events(stored)
        else:
            for s, event in singles(sizes.single):
                versions[s] += 1
                recorder.insert_events(
                    [
                        StoredEvent(
                            originator_id=s,
                            originator_version=versions[s],
                            topic=event_tag(event),
                            state=encode_event(event),
                        )
                    ]
                )
        return time.perf_counter() - started
    finally:
        datastore.close()


# -- the replay log and its fold ----------------------------------------------------------


def cell_spec(cell_no: int) -> CellSpec:
    return CellSpec(
        campaign="bench",
        instance=InstanceSpec(
            instance_id=f"i{cell_no:05d}",
            repo="example/widgets",
            base_commit="0123456789abcdef0123456789abcdef01234567",
            problem_statement="The widget frobnicates twice when the lever is pulled once.",
            verify_cmd="python -m pytest -q tests/test_widget.py",
        ),
        arm=SoloArm(name="SOLO", model="local/scripted"),
        rep=0,
        materializer=MaterializerSpec(kind="git", source="/srv/repos/widgets"),
    )


def cell_start(spec: CellSpec) -> list[Event]:
    run_dir = f"/h/campaigns/bench/rep-0/attempt-1/runs/{spec.instance.instance_id}/SOLO"
    return [
        ev.CellSubmitted(spec=spec),
        ev.CellMaterialized(
            attempt=1,
            run_dir=run_dir,
            workspace=f"{run_dir}/ws",
            head=spec.instance.base_commit,
            clean=True,
            materializer="git",
        ),
        ev.RunStarted(
            attempt=1,
            argv=["opencode", "run", "--format", "json", "-m", "local/scripted"],
            cwd=f"{run_dir}/ws",
            pid=4242,
            pgid=4242,
            started_at_ms=NOW_MS,
            deadline_ms=NOW_MS + 1_000_000,
            timeout_s=1000.0,
            kill_grace_s=1.0,
        ),
    ]


def cell_end() -> list[Event]:
    return [
        ev.RunCompleted(attempt=1, rc=0, wall_s=42.0),
        ev.CellVerified(attempt=1, scored=True, patch_lines=12, verify_rc=0, verify_pass=True),
        ev.CellRecovered(
            attempt=1,
            store_available=True,
            spend=ev.SpendFigures(sessions=1, tokens_in=12_000, tokens_out=900, cost_usd=0.0),
        ),
    ]


def replay_log_requests(total: int, cells: int) -> Iterator[list[AppendRequest]]:
    """A daemon's log in miniature: ``cells`` cells, ten at a time, each submitted,
    materialized and started, then its run's lines, then completed, verified, recovered.
    The same cells at every size: only the lines per run grow, so the fold's state does
    not, and peak RSS measures the store's replay alone."""
    per_cell_lines = (total - 6 * cells) // cells
    assert per_cell_lines > 0, "a replay log needs more events than 6 per cell"
    chunk = BATCH // STREAMS_PER_BATCH
    for first in range(0, cells, STREAMS_PER_BATCH):
        group = range(first, min(first + STREAMS_PER_BATCH, cells))
        yield [
            AppendRequest(streams.cell_stream(cell_spec(c).cell_id), 0, cell_start(cell_spec(c)))
            for c in group
        ]
        for start in range(0, per_cell_lines, chunk):
            count = min(chunk, per_cell_lines - start)
            yield [
                AppendRequest(ingest_stream(c), start, [line(c, start + i) for i in range(count)])
                for c in group
            ]
        yield [
            AppendRequest(streams.cell_stream(cell_spec(c).cell_id), 3, cell_end()) for c in group
        ]
    # Round up to exactly ``total`` on one more stream (the daemon's own notes).
    written = cells * (6 + per_cell_lines)
    for start in range(0, total - written, BATCH):
        count = min(BATCH, total - written - start)
        yield [AppendRequest(streams.DAEMON, start, [POOL[i % BATCH] for i in range(count)])]


async def build_replay_log(path: Path, total: int, cells: int) -> float:
    store = await open_arenad(path)
    try:
        started = time.perf_counter()
        for requests in replay_log_requests(total, cells):
            await store.append_many(requests)
        seconds = time.perf_counter() - started
        assert await store.last_seq() == total
        return seconds
    finally:
        await store.close()


class Fold:
    """A realistic consumer: the cell machine over cell streams (what `arenad rebuild` and
    recovery fold), a line and byte count per ingest stream."""

    def __init__(self) -> None:
        self.cells: dict[str, CellState] = {}
        self.lines: dict[str, int] = defaultdict(int)
        self.line_bytes = 0
        self.events = 0

    def feed(self, stream: str, event: Event, at_ms: int) -> None:
        self.events += 1
        if is_cell_stream(stream):
            self.cells[stream] = apply(self.cells.get(stream), event, at_ms)
        else:
            self.lines[stream] += 1
            if isinstance(event, LineIngested):
                self.line_bytes += event.length

    def summary(self) -> dict[str, Any]:
        states: dict[str, int] = defaultdict(int)
        for state in self.cells.values():
            states[str(state.status)] += 1
        return {
            "events": self.events,
            "states": dict(states),
            "lines": sum(self.lines.values()),
            "line_bytes": self.line_bytes,
        }


class Count(Fold):
    """No fold: each event is only counted (read + decode alone)."""

    def feed(self, stream: str, event: Event, at_ms: int) -> None:
        self.events += 1


async def replay_arenad(path: Path, fold: Fold) -> None:
    store = await SqliteEventStore.open(path, migrate=False)
    try:
        feed = fold.feed
        async for batch in store.read_batches(0):
            for r in batch:
                feed(r.stream, r.event, r.recorded_at_ms)
    finally:
        await store.close()


def replay_sqlite3(path: Path, fold: Fold) -> None:
    db = sqlite3.connect(path)
    try:
        cursor = db.execute(
            "SELECT stream, tag, schema_version, recorded_at_ms, payload FROM events ORDER BY seq"
        )
        feed = fold.feed
        while rows := cursor.fetchmany(BATCH):
            for stream, tag, schema_version, at_ms, payload in rows:
                feed(stream, decode_event(payload, tag, schema_version), at_ms)
    finally:
        db.close()


def replay_child(reader: str, mode: str, path: Path) -> None:
    """Run in a fresh process: one replay, its time, and this process's peak RSS."""
    fold = Fold() if mode == "fold" else Count()
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    started, cpu_started = time.perf_counter(), time.process_time()
    if reader == "arenad":
        asyncio.run(replay_arenad(path, fold))
    else:
        replay_sqlite3(path, fold)
    seconds = time.perf_counter() - started
    # Every thread's CPU (aiosqlite's too): on a shared machine the wall time also
    # measures the neighbours, the CPU time much less so.
    cpu_seconds = time.process_time() - cpu_started
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
    print(
        json.dumps(
            {
                "seconds": seconds,
                "cpu_seconds": cpu_seconds,
                "peak_rss_kib": peak,
                "rss_before_kib": rss_before,
                "summary": fold.summary(),
            }
        )
    )


def run_replay(reader: str, mode: str, path: Path) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, str(Path(__file__).resolve()), "--replay-child", reader, mode, str(path)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise SystemExit(f"replay child ({reader}) failed:\n{done.stderr}")
    result: dict[str, Any] = json.loads(done.stdout)
    return result


# -- the report ---------------------------------------------------------------------------


async def restart_to_scheduling(path: Path) -> float:
    """Seconds from opening the store to the daemon's first scheduling query (see the
    module docstring; the daemon's own steps, in its order)."""
    started = time.perf_counter()
    store = await SqliteEventStore.open(path, projectors=[CellsProjector()])
    try:
        await store.last_seq()
        for stream in await store.streams(streams.CAMPAIGN):
            await store.read_stream(stream)
        await store.read_stream(streams.CONTROL)
        await store.append(
            streams.DAEMON,
            None,
            [DaemonStarted(pid=os.getpid(), hostname="bench", max_parallel=4, version="bench")],
        )
        await cells_view(store).runnable(exclude=[], limit=32)
        return time.perf_counter() - started
    finally:
        await store.close()


async def full_chain_walk(path: Path) -> float:
    started = time.perf_counter()
    store = await open_arenad(path)
    try:
        report = await store.verify_chain()
        if not report.ok:
            raise SystemExit(f"the bench's log fails its chain: {report}")
        return time.perf_counter() - started
    finally:
        await store.close()


def rate(count: int, seconds: float | None) -> float | None:
    return None if seconds is None else count / seconds


def fmt_rate(value: float | None) -> str:
    return "not installed" if value is None else f"{value:,.0f}/s"


def fmt_ratio(ours: float | None, theirs: float | None) -> str:
    return "-" if ours is None or theirs is None else f"{ours / theirs:.2f}"


def mib(kib: int) -> str:
    return f"{kib / 1024:.1f} MiB"


def row(*cells: str) -> str:
    widths = (48, 14, 14, 6, 14, 6)
    padded = (
        c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(cells, widths, strict=True))
    )
    return "  ".join(padded)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes: a smoke run")
    parser.add_argument(
        "--repeat",
        type=int,
        default=None,
        help="runs of each figure, best kept (default 3; 1 quick)",
    )
    parser.add_argument("--replay-child", nargs=3, help=argparse.SUPPRESS)  # READER MODE DB
    args = parser.parse_args()
    if args.replay_child:
        reader, mode, db = args.replay_child
        replay_child(reader, mode, Path(db))
        return
    sizes = QUICK if args.quick else FULL
    repeat = args.repeat or (1 if args.quick else 3)
    root = Path(tempfile.mkdtemp(prefix="arenad-bench-store-"))
    try:
        report(root, sizes, args.quick, repeat)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def fresh_db(root: Path, name: str) -> Path:
    """An empty store file with arenad's schema (its migrations), for any contender."""
    path = root / f"{name}.db"
    for stale in root.glob(f"{name}.db*"):
        stale.unlink()

    async def create() -> None:
        await (await open_arenad(path)).close()

    asyncio.run(create())
    return path


def best(times: list[float | None]) -> float | None:
    measured = [t for t in times if t is not None]
    return min(measured) if measured else None


def report(root: Path, sizes: Sizes, quick: bool, repeat: int) -> None:
    load = os.getloadavg()[0]
    print(
        f"arenad store benchmark{' (--quick: smoke sizes)' if quick else ''}:"
        f" Python {platform.python_version()}, SQLite {sqlite3.sqlite_version},"
        f" WAL, synchronous=NORMAL; {os.cpu_count()} CPUs, load {load:.1f};"
        f" best of {repeat} interleaved runs"
    )
    print(row("figure", "arenad", "sqlite3", "ratio", "eventsourcing", "ratio"))
    appends: dict[str, float | None] = {}
    for batched, count, label in (
        (False, sizes.single, "single-event appends"),
        (True, sizes.batched, f"batched appends ({BATCH}/txn)"),
    ):
        kind = "batched" if batched else "single"
        runs: dict[str, list[float | None]] = defaultdict(list)
        # Interleaved, so a burst of load elsewhere on the machine hits every contender.
        for _ in range(repeat):
            db = fresh_db(root, "arenad")
            runs["arenad"].append(asyncio.run(arenad_appends(db, sizes, batched)))
            db = fresh_db(root, "sqlite3")
            runs["sqlite3"].append(sqlite3_appends(db, sizes, batched))
            for stale in root.glob("eventsourcing.db*"):
                stale.unlink()
            runs["lib"].append(eventsourcing_appends(root / "eventsourcing.db", sizes, batched))
        ours = rate(count, best(runs["arenad"]))
        raw = rate(count, best(runs["sqlite3"]))
        lib = rate(count, best(runs["lib"]))
        appends[kind], appends[f"{kind}_sqlite3"] = ours, raw
        print(
            row(
                f"{label}, {count:,} events",
                fmt_rate(ours),
                fmt_rate(raw),
                fmt_ratio(ours, raw),
                fmt_rate(lib),
                fmt_ratio(ours, lib),
            )
        )

    # Per (reader, size): the best time, and the highest peak RSS of its runs.
    seconds: dict[tuple[str, str, int], float] = {}
    cpu: dict[tuple[str, str, int], float] = {}
    peak_kib: dict[tuple[str, str, int], int] = {}
    restart_s = walk_s = float("inf")
    for total in (sizes.replay_small, sizes.replay_large):
        log = fresh_db(root, f"replay-{total}")
        build_s = asyncio.run(build_replay_log(log, total, sizes.cells))
        label = f"  (replay log: {total:,} events written)"
        print(row(label, fmt_rate(total / build_s), "", "", "", ""))
        summaries = []
        # read + decode alone on the large log only: the fold's share of the replay.
        modes = ("fold", "decode") if total == sizes.replay_large else ("fold",)
        for _ in range(repeat):
            for mode in modes:
                for reader in ("arenad", "sqlite3"):
                    result = run_replay(reader, mode, log)
                    key = (reader, mode, total)
                    seconds[key] = min(seconds.get(key, float("inf")), result["seconds"])
                    cpu[key] = min(cpu.get(key, float("inf")), result["cpu_seconds"])
                    peak_kib[key] = max(peak_kib.get(key, 0), result["peak_rss_kib"])
                    if mode == "fold":
                        summaries.append(result["summary"])
        if any(summary != summaries[0] for summary in summaries):
            raise SystemExit(f"the replays of {total} events folded different states")
        if total == sizes.replay_large:
            # After the replays: each restart appends its daemon.started.
            for _ in range(repeat):
                restart_s = min(restart_s, asyncio.run(restart_to_scheduling(log)))
                walk_s = min(walk_s, asyncio.run(full_chain_walk(log)))
        for stale in root.glob(f"{log.name}*"):
            stale.unlink()

    large, small = sizes.replay_large, sizes.replay_small
    for mode, label in (("fold", "read + decode + fold"), ("decode", "read + decode")):
        ours = large / seconds[("arenad", mode, large)]
        raw = large / seconds[("sqlite3", mode, large)]
        cells = (fmt_rate(ours), fmt_rate(raw), fmt_ratio(ours, raw), "-", "-")
        print(row(f"replay ({label}), {large:,} events", *cells))
        ours = large / cpu[("arenad", mode, large)]
        raw = large / cpu[("sqlite3", mode, large)]
        cells = (fmt_rate(ours), fmt_rate(raw), fmt_ratio(ours, raw), "-", "-")
        print(row("  the same, events per CPU-second", *cells))
    ours = large / seconds[("arenad", "fold", large)]
    for total in (small, large):
        a, s = peak_kib[("arenad", "fold", total)], peak_kib[("sqlite3", "fold", total)]
        print(row(f"replay peak RSS, {total:,} events", mib(a), mib(s), f"{a / s:.2f}", "-", "-"))
    growth = peak_kib[("arenad", "fold", large)] / peak_kib[("arenad", "fold", small)]
    print(
        f"restart to scheduling, {large:,} events (chain checked from its checkpoint):"
        f" {restart_s * 1000:,.0f} ms; the same check from the first row (verify-log's"
        f" walk): {walk_s * 1000:,.0f} ms; ratio {restart_s / walk_s:.2f}"
    )

    print("targets:")
    batched_share = (appends["batched"] or 0) / (appends["batched_sqlite3"] or 1)
    print(
        f"  batched appends >= 50% of sqlite3 executemany: {batched_share:.0%}"
        f"  {'met' if batched_share >= 0.5 else 'MISSED'}"
    )
    print(f"  replay >= 300,000 events/s: {ours:,.0f}/s  {'met' if ours >= 300_000 else 'MISSED'}")
    print(
        f"  replay memory flat in log size: peak RSS x{growth:.2f}"
        f" for x{large / small:.0f} the events  {'met' if growth <= 1.25 else 'MISSED'}"
    )
    print(
        f"  restart to scheduling < 1 s at {large:,} events: {restart_s * 1000:,.0f} ms"
        f"  {'met' if restart_s < 1 else 'MISSED'}"
    )


if __name__ == "__main__":
    main()
