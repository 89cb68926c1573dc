"""kill -9 the daemon while a supervisor cell's files are streaming in, start it again, and
check that ingestion neither lost nor repeated a line.

What a restarted daemon does with the run it finds in flight is a design choice (kill the
orphan group and record the run lost, or re-adopt the still-running driver); this test
asserts only what holds either way: the ingest stream spells every watched file byte for
byte, each line once at contiguous offsets; the cell reaches a terminal state; the log's
hash chain verifies.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from arenad.cell.machine import fold
from events import cell as ev
from events.ingest import FileTruncated, LineIngested, LineMalformed
from tests.arms.support import (
    SUP_RUN,
    assert_closed_once,
    assert_files_ingested_exactly,
    daemon_until_idle,
    supervisor_campaign,
)
from tests.conftest import make_repo
from tests.daemon.support import cli, env_with, start_daemon, submitted, wait_for

CELL = "restart:i1:SUP:0"
INGEST = f"ingest/{CELL}/1"
STREAM_LINES = 500


def _count(home: Path, sql: str, *args: str) -> int:
    """One count from the live log, read-only (the daemon keeps writing meanwhile)."""
    con = sqlite3.connect(f"file:{home / 'arenad.db'}?mode=ro", uri=True, timeout=10)
    try:
        return int(con.execute(sql, args).fetchone()[0])
    finally:
        con.close()


def _ingested_lines(home: Path) -> int:
    return _count(
        home,
        "SELECT count(*) FROM events WHERE stream = ?"
        " AND tag IN ('ingest.line', 'ingest.malformed')",
        INGEST,
    )


def test_kill_9_mid_stream_then_restart_ingests_every_line_once(tmp_path: Path) -> None:
    home = tmp_path / "home"
    repo = tmp_path / "repo"
    base = make_repo(repo, {"a.txt": "a\n"})
    loops = tmp_path / "loops"
    make_repo(loops, {"README": "loops\n"})
    camp = supervisor_campaign(
        tmp_path / "c.toml", name="restart", repo=repo, base=base, loops=loops, timeout_s=120
    )
    submitted(home, camp)
    # The driver streams STREAM_LINES lines over several seconds after its workers settle.
    env = env_with(
        FAKE_SUP_MODE="stream",
        FAKE_SUP_PAUSE="0.1",
        FAKE_SUP_STREAM_LINES=str(STREAM_LINES),
        FAKE_SUP_STREAM_S="6",
    )

    first = start_daemon(home, env=env, stderr=tmp_path / "daemon-1.err")
    try:

        def streaming() -> bool:
            assert first.poll() is None, (tmp_path / "daemon-1.err").read_text()
            started = _count(
                home,
                "SELECT count(*) FROM events WHERE stream = ? AND tag = 'run.started'",
                f"cell/{CELL}",
            )
            # Well into the stream: past the driver's opening lines (about 20).
            return started == 1 and _ingested_lines(home) >= 120

        wait_for(streaming, "the daemon to be ingesting the streamed lines")
    finally:
        first.kill()  # SIGKILL: no drain, no DaemonStopped, mid-batch if it so happens
        first.wait()
    at_kill = _ingested_lines(home)
    closed_at_kill = _count(
        home, "SELECT count(*) FROM events WHERE stream = ? AND tag = 'ingest.closed'", INGEST
    )
    assert closed_at_kill == 0

    records = daemon_until_idle(home, env, tmp_path / "daemon-2.err")

    cell = [r for r in records if r.stream == f"cell/{CELL}"]
    state = fold(cell)
    assert state is not None and state.terminal, state
    ingest = [r.event for r in records if r.stream == INGEST]
    started = next(r.event for r in cell if isinstance(r.event, ev.RunStarted))
    run_dir = Path(started.stdout_path or "").parent
    sup = run_dir / "ws" / SUP_RUN

    # Some lines were recorded before the kill, the rest after it, streamed lines among
    # them: the kill landed mid-stream. None twice, none skipped, every file byte for byte.
    lines = [e for e in ingest if isinstance(e, LineIngested | LineMalformed)]
    assert 0 < at_kill < len(lines)
    assert any('"n": ' in e.raw for e in lines[at_kill:])
    assert not any(isinstance(e, FileTruncated) for e in ingest)
    assert_files_ingested_exactly(ingest, sup, run_dir / "brain.jsonl")
    keys = [(e.source, e.path, e.offset) for e in lines]
    assert len(keys) == len(set(keys))

    # Closed once, after every line, at each file's final size.
    assert_closed_once(ingest, sup, run_dir / "brain.jsonl")

    verify = cli(home, "verify-log")
    assert verify.returncode == 0, verify.stdout + verify.stderr
