"""The projection shared with worker processes: real processes and pipes, the same bytes
as one process, the errors one process would raise, and a worker that dies. (The golden
ledger is also checked byte for byte with 1, 2 and 3 processes: test_project_golden.)"""

from __future__ import annotations

import asyncio
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import msgspec
import pytest

from arenad.errors import StoreError
from arenad.ledger import service
from arenad.ledger.rollout import InvalidRolloutLine
from arenad.ledger.service import PARALLEL_MIN_CELLS, project_store, workers_for
from arenad.ledger.workers import LedgerWorkerFailed, LedgerWorkers
from arenad.store.sqlite import SqliteEventStore
from events import cell as ev
from tests.ledger.test_reference_lines import Log, solo_cell, supervisor_cell


def _log(db: Path) -> None:
    """Solo and supervisor cells in two campaigns, a supervisor journal ingested."""
    log = Log(db)
    for campaign in ("gen0-cand1", "gen0-cand2"):
        log.add(*solo_cell(campaign), *solo_cell(campaign, rep=1, scored=False))
        log.add(*supervisor_cell(campaign))


async def _project(db: Path, out: Path, jobs: int) -> dict[str, object]:
    store = await SqliteEventStore.open(db)
    try:
        return await project_store(store, out, jobs=jobs, db=db)
    finally:
        await store.close()


@pytest.fixture
def one_cell_a_batch(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(service, "READ_BATCH_CELLS", 1)


@pytest.mark.usefixtures("one_cell_a_batch")
def test_workers_write_the_bytes_one_process_writes(tmp_path: Path) -> None:
    db = tmp_path / "events.db"
    _log(db)
    outs = {jobs: tmp_path / f"ledger-{jobs}.jsonl" for jobs in (1, 2, 3)}
    stats = {jobs: asyncio.run(_project(db, out, jobs)) for jobs, out in outs.items()}
    assert stats[2] == stats[1] == stats[3]
    assert stats[1]["lines"] == 10  # per campaign: 2 agent lines, a supervisor, 2 workers
    assert outs[2].read_bytes() == outs[1].read_bytes() == outs[3].read_bytes()


def _append_unreadable_capture(db: Path) -> str:
    """A capture row whose payload is not JSON, written past the store (only UPDATE and
    DELETE are refused): what a damaged log holds. Returns its stream."""
    with sqlite3.connect(db) as conn:
        (stream, version) = conn.execute(
            "SELECT stream, MAX(version) FROM events WHERE stream LIKE 'capture/%'"
            " GROUP BY stream ORDER BY stream DESC LIMIT 1"
        ).fetchone()
        (seq,) = conn.execute("SELECT MAX(seq) FROM events").fetchone()
        conn.execute(
            "INSERT INTO events VALUES (?, ?, ?, 'capture.opencode-session', 1, 0, ?, ?)",
            (seq + 1, stream, version + 1, b"{not json", bytes(32)),
        )
    return str(stream)


@pytest.mark.usefixtures("one_cell_a_batch")
def test_a_row_a_worker_cannot_read_fails_as_in_one_process_and_writes_nothing(
    tmp_path: Path,
) -> None:
    db = tmp_path / "events.db"
    _log(db)
    stream = _append_unreadable_capture(db)  # the last cell's: a worker's, with 2 jobs
    messages = []
    for jobs in (1, 2):
        out = tmp_path / f"ledger-{jobs}.jsonl"
        out.write_text("kept\n")
        with pytest.raises(StoreError) as info:
            asyncio.run(_project(db, out, jobs))
        messages.append(str(info.value))
        assert out.read_text() == "kept\n"
    assert [p.name for p in tmp_path.iterdir() if p.suffix == ".tmp"] == []
    assert messages[0] == messages[1]
    assert f"on {stream!r} cannot be read" in messages[0]


@pytest.mark.usefixtures("one_cell_a_batch")
def test_an_invalid_line_a_worker_makes_fails_naming_its_cell(tmp_path: Path) -> None:
    db = tmp_path / "events.db"
    log = Log(db)
    log.add(*solo_cell("a-campaign"))
    # An empty instance id is a legal spec that breaks the schema (task.instance_id);
    # its campaign sorts second: the worker's batch, with two processes.
    bad = solo_cell("b-campaign")
    spec = bad[0][1][0]
    assert isinstance(spec, ev.CellSubmitted)
    bad_spec = msgspec.structs.replace(
        spec.spec, instance=msgspec.structs.replace(spec.spec.instance, instance_id="")
    )
    log.add(
        (f"cell/{bad_spec.cell_id}", [ev.CellSubmitted(spec=bad_spec), *bad[0][1][1:]]),
        (f"capture/{bad_spec.cell_id}/1", bad[1][1]),
    )
    out = tmp_path / "ledger.jsonl"
    with pytest.raises(InvalidRolloutLine) as info:
        asyncio.run(_project(db, out, 2))
    assert f"cell {bad_spec.cell_id} attempt 1 agent line" in str(info.value)
    assert "task.instance_id" in str(info.value)
    assert not out.exists()


def test_a_worker_that_dies_fails_the_projection(tmp_path: Path) -> None:
    db = tmp_path / "events.db"
    _log(db)

    async def run() -> None:
        async with LedgerWorkers(1, db) as workers:
            worker = workers._workers[0].process
            worker.kill()
            await worker.wait()
            with pytest.raises(LedgerWorkerFailed, match="worker 0 exited with status -9"):
                await workers.submit([("c:i:SOLO:0", "r")])
                await workers.result()

    asyncio.run(run())


def test_a_request_a_worker_cannot_read_is_named_and_the_worker_goes_on(tmp_path: Path) -> None:
    db = tmp_path / "events.db"
    _log(db)
    bad, good = b"\x01", msgspec.msgpack.encode([])
    frames = b"".join(len(body).to_bytes(4, "big") + body for body in (bad, good))
    done = subprocess.run(
        [sys.executable, "-m", "arenad.ledger.workers", str(db)],
        input=frames,
        capture_output=True,
        check=True,
    )
    size = int.from_bytes(done.stdout[:4], "big")
    first = msgspec.msgpack.decode(done.stdout[4 : 4 + size])
    second = msgspec.msgpack.decode(done.stdout[8 + size :])
    assert first[0] is None and first[1] is None and first[2].startswith("ValidationError:")
    assert b"ValidationError" in done.stderr  # the traceback, for the bug report
    assert second[0][0] == [] and second[0][1]["lines"] == 0 and second[1] is None


def test_how_many_processes_project() -> None:
    cores = len(os.sched_getaffinity(0))
    assert workers_for(10, 3) == 3  # asked for: whatever the size
    assert workers_for(10_000, 1) == 1
    assert workers_for(PARALLEL_MIN_CELLS - 1, None) == 1  # too small to gain
    assert workers_for(PARALLEL_MIN_CELLS, None) == (cores if cores > 1 else 1)
