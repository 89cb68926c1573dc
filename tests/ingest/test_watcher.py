from __future__ import annotations

import asyncio
import json
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from arenad.arms.supervisor import supervisor_run_dir, supervisor_selection, supervisor_source
from arenad.ingest.inotify import Inotify
from arenad.ingest.offsets import fold_positions
from arenad.ingest.watcher import (
    GlobSelection,
    RunDirWatcher,
    WatchSource,
    file_source,
)
from events.base import Event
from events.ingest import (
    FileRefused,
    FileSnapshotted,
    FileTruncated,
    IngestionClosed,
    InotifyEventsLost,
    InotifyWatchFailed,
    LineIngested,
    LineMalformed,
)
from tests.ingest._util import Recorder, append, rebuild, tiny_inotify_queue, until


def _line(kind: str, i: int) -> bytes:
    return json.dumps({"kind": kind, "i": i}).encode() + b"\n"


def _thread(target: Callable[[], None]) -> threading.Thread:
    t = threading.Thread(target=target, daemon=True)
    t.start()
    return t


async def _join(t: threading.Thread) -> None:
    await asyncio.to_thread(t.join, 30)
    assert not t.is_alive()


def test_supervisor_selection() -> None:
    sel = supervisor_selection()
    assert sel.classify("journal.jsonl") == "lines"
    assert sel.classify("progress.ndjson") == "lines"
    assert sel.classify("workers/root_s1.ndjson") == "lines"
    assert sel.classify("state.json") == "snapshot"
    assert sel.classify("workers/root_s1.inbox.ndjson") is None
    assert sel.classify("workers/root_s1.patch") is None
    assert sel.classify("workers/x/deep.ndjson") is None
    assert sel.classify("brain.jsonl") is None
    assert sel.classify("steers/a.ndjson") is None
    assert sel.recursive


def test_scan_finds_selected_regular_files(tmp_path: Path) -> None:
    (tmp_path / "workers" / "deep").mkdir(parents=True)
    for rel in [
        "journal.jsonl",
        "state.json",
        "workers/a.ndjson",
        "workers/a.inbox.ndjson",
        "workers/a.patch",
        "workers/deep/b.ndjson",
    ]:
        (tmp_path / rel).write_bytes(b"")
    (tmp_path / "progress.ndjson").mkdir()  # a directory is not a file
    assert supervisor_selection().scan(tmp_path) == {
        "state.json": "snapshot",
        "journal.jsonl": "lines",
        "workers/a.ndjson": "lines",
    }
    assert not GlobSelection(lines=("brain.jsonl",)).recursive


def test_supervisor_run_dir_prefers_agent_then_first_subdir(tmp_path: Path) -> None:
    resolve = supervisor_run_dir(tmp_path)
    assert resolve() is None
    (tmp_path / ".loops" / "supervisor" / "zz").mkdir(parents=True)
    (tmp_path / ".loops" / "supervisor" / "aa").mkdir(parents=True)
    assert resolve() == tmp_path / ".loops" / "supervisor" / "aa"
    (tmp_path / ".agent" / "supervisor" / "r1").mkdir(parents=True)
    assert resolve() == tmp_path / ".agent" / "supervisor" / "r1"


async def test_run_dir_end_to_end(tmp_path: Path) -> None:
    """Lines byte for byte, new workers mid-watch, inboxes ignored, snapshots, close."""
    run = tmp_path / "run"
    (run / "workers").mkdir(parents=True)
    (run / "journal.jsonl").write_bytes(_line("spawned", 0))
    (run / "state.json").write_text(json.dumps({"status": "running"}))
    sink = Recorder()
    source = WatchSource("supervisor", run, supervisor_selection())
    watcher = RunDirWatcher([source], sink, rescan_interval=0.2)
    await watcher.start()
    await until(lambda: len(sink.lines("journal.jsonl")) == 1, what="first journal line")

    def write() -> None:
        for i in range(1, 40):
            append(run / "journal.jsonl", _line("metered", i))
            append(run / "workers" / "a.ndjson", _line("message", i))
            append(run / "workers" / "a.inbox.ndjson", _line("message", i))
            if i == 10:
                append(run / "workers" / "b.ndjson", b"not json at all\n")  # a new worker
            if i > 10:
                append(run / "workers" / "b.ndjson", _line("started", i))
            if i == 20:
                append(run / "progress.ndjson", b'{"kind":"\xff\xfe"}\n\n')
                (run / "state.json").write_text(json.dumps({"status": "running", "n": 20}))
            time.sleep(0.002)
        append(run / "journal.jsonl", b'{"kind":"settled"}')  # no newline: partial at close
        (run / "state.json").write_text(json.dumps({"status": "completed"}))

    await _join(_thread(write))
    await until(lambda: len(sink.lines("workers/b.ndjson")) == 30, what="worker b")
    final = await watcher.close()

    events = sink.events
    for rel in ["journal.jsonl", "workers/a.ndjson", "workers/b.ndjson", "progress.ndjson"]:
        assert rebuild(events, rel) == (run / rel).read_bytes(), rel
    assert not sink.lines("workers/a.inbox.ndjson")
    (tail,) = [e for e in sink.lines("journal.jsonl") if e.partial]
    assert isinstance(tail, LineIngested) and tail.kind == "settled"
    bad = sink.lines("progress.ndjson")
    assert isinstance(bad[0], LineMalformed) and bad[0].encoding == "base64"
    assert isinstance(bad[1], LineMalformed) and bad[1].error == "empty line"
    malformed = sink.lines("workers/b.ndjson")[0]
    assert isinstance(malformed, LineMalformed) and malformed.raw == "not json at all"
    snaps = [e for e in events if isinstance(e, FileSnapshotted)]
    contents = [json.loads(s.content) for s in snaps]
    assert contents[0] == {"status": "running"} and contents[-1] == {"status": "completed"}
    assert len({s.sha256 for s in snaps}) == len(snaps)  # a snapshot per change, no repeats
    closed = events[-1]
    assert isinstance(closed, IngestionClosed)
    assert closed.files == {
        "supervisor:journal.jsonl": (run / "journal.jsonl").stat().st_size,
        "supervisor:workers/a.ndjson": (run / "workers/a.ndjson").stat().st_size,
        "supervisor:workers/b.ndjson": (run / "workers/b.ndjson").stat().st_size,
        "supervisor:progress.ndjson": (run / "progress.ndjson").stat().st_size,
        "supervisor:state.json": (run / "state.json").stat().st_size,
    }
    assert final == fold_positions(events) and final.closed
    assert all(len(b) <= 5000 for b in sink.batches)


async def test_inotify_wakes_without_rescans(tmp_path: Path) -> None:
    """With rescans an hour apart, only watchdog can deliver: a line in two halves is one line."""
    f = tmp_path / "journal.jsonl"
    f.write_bytes(b"")
    sink = Recorder()
    watcher = RunDirWatcher(
        [WatchSource("supervisor", tmp_path, supervisor_selection())], sink, rescan_interval=3600
    )
    await watcher.start()
    await until(lambda: ("supervisor", "journal.jsonl") in watcher.files, what="initial scan")
    append(f, _line("a", 1) + b'{"kind":"half", "p": "')
    await until(lambda: len(sink.lines("journal.jsonl")) == 1, what="first line")
    append(f, b'second half"}\n')
    await until(lambda: len(sink.lines("journal.jsonl")) == 2, what="joined line")
    (tmp_path / "workers").mkdir()
    append(tmp_path / "workers" / "w.ndjson", _line("started", 0))  # created after start
    await until(lambda: len(sink.lines("workers/w.ndjson")) == 1, what="new worker")
    await watcher.close()
    lines = sink.lines("journal.jsonl")
    assert [e.partial for e in lines] == [False, False]
    assert lines[1].raw == '{"kind":"half", "p": "second half"}'
    assert rebuild(sink.events, "journal.jsonl") == f.read_bytes()


async def test_rescans_alone_lose_nothing(tmp_path: Path) -> None:
    sink = Recorder()
    watcher = RunDirWatcher(
        [WatchSource("supervisor", tmp_path, supervisor_selection())],
        sink,
        rescan_interval=0.05,
        inotify=False,
    )
    await watcher.start()
    (tmp_path / "workers").mkdir()
    append(tmp_path / "workers" / "w.ndjson", _line("a", 0) + b'{"kind":')
    await until(lambda: len(sink.lines("workers/w.ndjson")) == 1, what="rescan")
    append(tmp_path / "workers" / "w.ndjson", b'"b"}\n')
    await until(lambda: len(sink.lines("workers/w.ndjson")) == 2, what="rescan 2")
    await watcher.close()
    assert rebuild(sink.events, "workers/w.ndjson") == (tmp_path / "workers/w.ndjson").read_bytes()


async def test_discovers_the_run_dir_and_extra_files(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    run = tmp_path / "runDir"
    sink = Recorder()
    watcher = RunDirWatcher(
        [supervisor_source(ws), file_source("brain", run / "brain.jsonl")],
        sink,
        rescan_interval=0.05,
    )
    await watcher.start()
    sup = ws / ".loops" / "supervisor" / "20250101-abc"
    (sup / "workers").mkdir(parents=True)
    append(sup / "journal.jsonl", _line("spawned", 0))
    append(sup / "workers" / "root_s1.ndjson", _line("started", 0))
    run.mkdir()
    append(run / "brain.jsonl", b'{"finish_reason":"length"}\n')
    append(run / "other.jsonl", _line("x", 0))
    await until(lambda: len(sink.lines("brain.jsonl", "brain")) == 1, what="brain")
    await until(lambda: len(sink.lines("workers/root_s1.ndjson")) == 1, what="worker")
    await until(lambda: len(sink.lines("journal.jsonl", "supervisor")) == 1, what="journal")
    await watcher.close()
    assert {(e.source, e.path) for e in sink.events if isinstance(e, LineIngested)} == {
        ("supervisor", "journal.jsonl"),
        ("supervisor", "workers/root_s1.ndjson"),
        ("brain", "brain.jsonl"),
    }
    closed = sink.events[-1]
    assert isinstance(closed, IngestionClosed) and "brain:brain.jsonl" in closed.files


async def test_batches_are_bounded(tmp_path: Path) -> None:
    for n in range(3):
        (tmp_path / f"w{n}.ndjson").write_bytes(b"".join(_line("m", i) for i in range(4000)))
    sink = Recorder()
    watcher = RunDirWatcher(
        [WatchSource("s", tmp_path, GlobSelection(lines=("*.ndjson",)))],
        sink,
        max_batch_events=1000,
        max_batch_bytes=20_000,
    )
    await watcher.start()
    await until(lambda: len(sink.events) == 12_000, what="all lines")
    await watcher.close()
    longest = max(len(_line("m", 3999)), 1)
    for batch in sink.batches[:-1]:
        assert len(batch) <= 1000
        size = sum(e.length for e in batch if isinstance(e, LineIngested | LineMalformed))
        assert size <= 20_000 + longest
    for n in range(3):
        assert rebuild(sink.events, f"w{n}.ndjson") == (tmp_path / f"w{n}.ndjson").read_bytes()


async def test_truncation_and_replacement(tmp_path: Path) -> None:
    f = tmp_path / "journal.jsonl"
    f.write_bytes(_line("a", 0) + _line("a", 1))
    sink = Recorder()
    watcher = RunDirWatcher([WatchSource("s", tmp_path, supervisor_selection())], sink)
    await watcher.start()
    await until(lambda: len(sink.lines("journal.jsonl")) == 2, what="lines")
    f.write_bytes(_line("b", 0))  # in place, shorter
    await until(lambda: len(sink.lines("journal.jsonl")) == 3, what="after shrink")
    tmp = tmp_path / "journal.tmp"
    tmp.write_bytes(_line("c", 0) + _line("c", 1) + _line("c", 2))
    os.replace(tmp, f)
    await until(lambda: len(sink.lines("journal.jsonl")) == 6, what="after replace")
    await watcher.close()
    truncations = [e for e in sink.events if isinstance(e, FileTruncated)]
    assert [t.reason for t in truncations] == ["shrunk", "replaced"]
    assert rebuild(sink.events, "journal.jsonl") == f.read_bytes()
    n = len(_line("c", 0))
    assert [e.offset for e in sink.lines("journal.jsonl")] == [0, n, 0, 0, n, 2 * n]


def _busy_writer(
    root: Path, files: int, lines: int, stop_at: threading.Event | None = None
) -> None:
    """Append ``lines`` lines round-robin, some in two halves with a pause."""
    for i in range(lines):
        path = root / "workers" / f"w{i % files}.ndjson"
        data = _line("message", i)
        if i % 97 == 0:
            append(path, data[:7])
            time.sleep(0.003)
            append(path, data[7:])
        else:
            append(path, data)
        if i % 50 == 0:
            time.sleep(0.002)


async def test_crash_and_restart_is_exactly_once(tmp_path: Path) -> None:
    (tmp_path / "workers").mkdir()
    sources = [WatchSource("supervisor", tmp_path, supervisor_selection())]
    first = Recorder()
    watcher = RunDirWatcher(sources, first, rescan_interval=0.05, max_batch_events=200)
    await watcher.start()
    writer = _thread(lambda: _busy_writer(tmp_path, 4, 6000))
    await until(lambda: len(first.events) >= 1500, what="some lines")
    await watcher.abort()  # a crash: no drain, no close
    crashed_at = len(first.events)
    assert watcher.positions == fold_positions(first.events)

    second = Recorder()
    restarted = RunDirWatcher(
        sources, second, positions=fold_positions(first.events), rescan_interval=0.05
    )
    await restarted.start()
    await _join(writer)
    await restarted.close()
    assert len(first.events) == crashed_at  # the crashed watcher really stopped
    union = first.events + second.events
    for n in range(4):
        rel = f"workers/w{n}.ndjson"
        assert rebuild(union, rel) == (tmp_path / rel).read_bytes(), rel
    assert not any(isinstance(e, FileTruncated) for e in union)
    assert not any(e.partial for e in union if isinstance(e, LineIngested | LineMalformed))


async def test_sink_failure_leaves_positions_unadvanced(tmp_path: Path) -> None:
    (tmp_path / "workers").mkdir()
    f = tmp_path / "workers" / "w.ndjson"
    f.write_bytes(_line("a", 0))
    sources = [WatchSource("supervisor", tmp_path, supervisor_selection())]
    sink = Recorder(fail_on=2)
    watcher = RunDirWatcher(sources, sink)
    await watcher.start()
    await until(lambda: len(sink.events) == 1, what="first batch")
    before = watcher.positions
    append(f, _line("a", 1) + _line("a", 2))
    await until(lambda: watcher.failure is not None, what="the failing call")
    assert sink.calls == 2 and len(sink.events) == 1
    assert watcher.positions == before == fold_positions(sink.events)
    with pytest.raises(RuntimeError, match="sink failed"):
        await watcher.wait()
    with pytest.raises(RuntimeError, match="sink failed"):
        await watcher.close()
    retry = Recorder()
    restarted = RunDirWatcher(sources, retry, positions=watcher.positions)
    await restarted.start()
    await restarted.close()
    assert rebuild(sink.events + retry.events, "workers/w.ndjson") == f.read_bytes()


async def test_close_flags_a_trailing_partial_line(tmp_path: Path) -> None:
    f = tmp_path / "journal.jsonl"
    f.write_bytes(_line("a", 0) + b'{"kind":"b"}')
    sink = Recorder()
    async with RunDirWatcher([WatchSource("s", tmp_path, supervisor_selection())], sink) as w:
        await until(lambda: len(sink.lines("journal.jsonl")) == 1, what="line")
        assert w.positions.get("s", "journal.jsonl").offset == len(_line("a", 0))
    a, b = sink.lines("journal.jsonl")
    assert not a.partial
    assert isinstance(b, LineIngested) and b.partial and b.kind == "b" and b.length == 12
    closed = sink.events[-1]
    assert isinstance(closed, IngestionClosed)
    assert closed.files == {"s:journal.jsonl": f.stat().st_size}
    with pytest.raises(ValueError, match="closed"):
        RunDirWatcher([], sink, positions=fold_positions(sink.events))


async def test_busy_mode_polls_then_watches_again(tmp_path: Path) -> None:
    (tmp_path / "workers").mkdir()
    sink = Recorder()
    watcher = RunDirWatcher(
        [WatchSource("supervisor", tmp_path, supervisor_selection())],
        sink,
        rescan_interval=3600,
        busy_rate=500,
    )
    await watcher.start()
    (tmp_path / "workers" / "w0.ndjson").write_bytes(b"")
    await until(lambda: bool(watcher.files), what="initial scan")
    writer = _thread(lambda: _busy_writer(tmp_path, 1, 3000))
    await _join(writer)
    await until(lambda: len(sink.events) == 3000, what="the burst")
    assert watcher.stats.busy_periods >= 1
    # once quiet, the watches are back: a single line arrives without any rescan
    await until(lambda: not watcher._busy, what="quiet again")
    append(tmp_path / "workers" / "w0.ndjson", _line("late", 0))
    await until(lambda: len(sink.events) == 3001, what="late line")
    await watcher.close()
    assert (
        rebuild(sink.events, "workers/w0.ndjson") == (tmp_path / "workers/w0.ndjson").read_bytes()
    )


async def test_watchers_sharing_an_observer_keep_their_own_watches(tmp_path: Path) -> None:
    # A daemon shares one inotify instance between every run it follows: closing one
    # watcher must leave the others' watches in place. A long rescan interval means only
    # inotify can deliver the second watcher's lines in time.
    observer = Inotify()
    try:
        a_dir, b_dir = tmp_path / "a", tmp_path / "b"
        a_dir.mkdir()
        b_dir.mkdir()
        a_sink, b_sink = Recorder(), Recorder()
        a = RunDirWatcher([file_source("stdout", a_dir / "out.jsonl")], a_sink, observer=observer)
        b = RunDirWatcher(
            [file_source("stdout", b_dir / "out.jsonl"), file_source("brain", b_dir / "x.jsonl")],
            b_sink,
            observer=observer,
            rescan_interval=3600,
        )
        await a.start()
        await b.start()
        append(a_dir / "out.jsonl", _line("a", 1))
        append(b_dir / "out.jsonl", _line("b", 1))
        await until(
            lambda: len(a_sink.lines("out.jsonl")) == 1 and len(b_sink.lines("out.jsonl")) == 1
        )
        await a.close()
        assert not observer.closed and observer.directories == 1
        append(b_dir / "out.jsonl", _line("b", 2))
        await until(lambda: len(b_sink.lines("out.jsonl")) == 2, timeout=5, what="inotify")
        await b.close()
        assert observer.directories == 0
    finally:
        observer.close()


async def test_a_root_deleted_and_made_again_is_watched_again(tmp_path: Path) -> None:
    # While every root is watched, rescans are rare (an hour here): a root whose
    # directory went away loses its watch, so rescans come back until it is watched again.
    run = tmp_path / "run"
    run.mkdir()
    sink = Recorder()
    watcher = RunDirWatcher(
        [file_source("stdout", run / "out.jsonl")],
        sink,
        rescan_interval=0.05,
        watched_rescan_interval=3600,
    )
    await watcher.start()
    try:
        append(run / "out.jsonl", _line("a", 1))
        await until(lambda: len(sink.lines("out.jsonl")) == 1, what="the first line")
        (run / "out.jsonl").unlink()
        run.rmdir()
        run.mkdir()
        append(run / "out.jsonl", _line("a", 2))
        await until(lambda: len(sink.lines("out.jsonl")) == 2, timeout=10, what="the new file")
        # Watched again: a line written now arrives by inotify, not by an hourly rescan.
        await until(lambda: watcher._next_rescan_in() == 3600, what="the new watch")
        append(run / "out.jsonl", _line("a", 3))
        await until(lambda: len(sink.lines("out.jsonl")) == 3, timeout=10, what="inotify")
    finally:
        await watcher.close()


async def test_links_out_of_the_workspace_are_refused_once_and_never_read(tmp_path: Path) -> None:
    # The supervisor's run dir is in the agent's workspace: a link it makes to a host file
    # (a journal, a worker file, state.json, or the workers dir itself) must not make the
    # daemon, which runs outside the sandbox, copy that file into the log.
    ws, host = tmp_path / "ws", tmp_path / "host"
    run = ws / ".loops" / "supervisor" / "s1"
    run.mkdir(parents=True)
    (host / "workers").mkdir(parents=True)
    secret = host / "id_rsa"
    secret.write_bytes(b'{"secret": 1}\n')
    (host / "workers" / "w9.ndjson").write_bytes(b'{"secret": 2}\n')
    (run / "journal.jsonl").symlink_to(secret)
    (run / "state.json").symlink_to(secret)
    (run / "workers").symlink_to(host / "workers")
    # A link that stays inside the workspace is read like the file it names.
    (ws / "progress.real").write_bytes(_line("tick", 0))
    (run / "progress.ndjson").symlink_to(ws / "progress.real")
    sink = Recorder()
    watcher = RunDirWatcher([supervisor_source(ws)], sink, rescan_interval=0.05)
    await watcher.start()
    await until(lambda: len(sink.lines("progress.ndjson")) == 1, what="the inside link's line")
    await asyncio.sleep(0.3)  # several rescans: the refusals are not repeated
    await watcher.close()
    refused = [e for e in sink.events if isinstance(e, FileRefused)]
    assert sorted(e.path for e in refused) == ["journal.jsonl", "state.json", "workers/w9.ndjson"]
    assert all(str(ws) in e.reason for e in refused)
    assert not [e for e in sink.events if isinstance(e, FileSnapshotted)]
    assert not any("secret" in getattr(e, "raw", "") for e in sink.events)
    assert not [
        e for e in sink.events if isinstance(e, LineIngested) and e.path != "progress.ndjson"
    ]


async def test_a_real_overflow_loses_and_repeats_no_line(tmp_path: Path) -> None:
    # 12 runs share one instance whose kernel queue holds 8 events, and all their files grow
    # at once: the kernel drops notifications. Rescans an hour apart, so only the overflow's
    # rescan (and inotify) can deliver: every line arrives exactly once *before* close (whose
    # final drain would hide a loss), and the overflow is reported.
    reports: list[Event] = []
    with tiny_inotify_queue(8):
        observer = Inotify(report=reports.append)
    runs, lines_per_file = 12, 40
    try:
        dirs = [tmp_path / f"run{i}" for i in range(runs)]
        sinks = [Recorder() for _ in dirs]
        watchers = []
        for d, sink in zip(dirs, sinks, strict=True):
            d.mkdir()
            w = RunDirWatcher(
                [WatchSource("supervisor", d, supervisor_selection())],
                sink,
                observer=observer,
                rescan_interval=3600,
            )
            await w.start()
            watchers.append(w)

        def grow() -> None:
            for d in dirs:
                (d / "workers").mkdir()
            for i in range(lines_per_file):
                for d in dirs:
                    append(d / "journal.jsonl", _line("a", i))
                    append(d / "workers" / f"w{i % 3}.ndjson", _line("w", i))

        await _join(_thread(grow))

        def complete() -> bool:
            for d, sink in zip(dirs, sinks, strict=True):
                for f in [d / "journal.jsonl", *(d / "workers").glob("*.ndjson")]:
                    rel = f.relative_to(d).as_posix()
                    if rebuild(sink.events, rel) != f.read_bytes():
                        return False
            return True

        await until(complete, timeout=60, what="every line of every file, before close")
        assert any(isinstance(e, InotifyEventsLost) for e in reports), "no real overflow"
        for w in watchers:
            await w.close()
        for d, sink in zip(dirs, sinks, strict=True):
            for f in [d / "journal.jsonl", *(d / "workers").glob("*.ndjson")]:
                rel = f.relative_to(d).as_posix()
                assert rebuild(sink.events, rel) == f.read_bytes()  # contiguous: no repeats
    finally:
        observer.close()


async def test_a_watcher_with_its_own_instance_records_a_failed_watch_and_rescans(
    tmp_path: Path,
) -> None:
    # A watcher's notify that raises (a bug) must not stop ingestion: the watch is dropped,
    # the failure goes into the watcher's own batches, and rescans deliver the lines.
    class Broken(RunDirWatcher):
        def _notify(self, rescan: bool) -> None:
            raise RuntimeError("notify bug")

    sink = Recorder()
    watcher = Broken([file_source("stdout", tmp_path / "out.jsonl")], sink, rescan_interval=0.05)
    await watcher.start()
    append(tmp_path / "out.jsonl", _line("a", 1))
    await until(lambda: len(sink.lines("out.jsonl")) == 1, what="the line, by a rescan")
    append(tmp_path / "out.jsonl", _line("a", 2))
    await until(lambda: len(sink.lines("out.jsonl")) == 2, what="the next line, by a rescan")
    await watcher.close()
    failed = [e for e in sink.events if isinstance(e, InotifyWatchFailed)]
    assert len(failed) == 1 and "RuntimeError: notify bug" in failed[0].error
    assert isinstance(sink.events[-1], IngestionClosed)
