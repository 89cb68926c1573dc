"""The projection shared with worker processes: real processes, pipes and signals. The
same bytes as one process (any filter, any run id), the errors one process would raise,
workers that die, fail or are interrupted, and never a hang. (The golden ledger and the
proposer's candidate tally are also checked with 1, 2 and 3 processes.)"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import msgspec
import pytest

from arenad.errors import StoreError, UserError
from arenad.ledger import service
from arenad.ledger.rollout import InvalidRolloutLine
from arenad.ledger.service import MAX_JOBS, PARALLEL_MIN_CELLS, processes_for, project_store
from arenad.ledger.workers import LedgerWorkerFailed, LedgerWorkers
from arenad.store.sqlite import SqliteEventStore
from bench.ledger import build
from events import cell as ev
from tests.ledger.test_reference_lines import Log, solo_cell, supervisor_cell

ARENAD = str(Path(sys.executable).parent / "arenad")
# A hang is a failure, not a stuck CI run.
_PATIENCE_S = 120


def _log(db: Path) -> None:
    """Solo and supervisor cells in two campaigns, a supervisor journal ingested."""
    log = Log(db)
    for campaign in ("gen0-cand1", "gen0-cand2"):
        log.add(*solo_cell(campaign), *solo_cell(campaign, rep=1, scored=False))
        log.add(*supervisor_cell(campaign))


async def _project_async(db: Path, out: Path, jobs: int, **kw: object) -> dict[str, object]:
    store = await SqliteEventStore.open(db)
    try:
        return await project_store(store, out, jobs=jobs, **kw)  # type: ignore[arg-type]
    finally:
        await store.close()


def _project(db: Path, out: Path, jobs: int, **kw: object) -> dict[str, object]:
    return asyncio.run(asyncio.wait_for(_project_async(db, out, jobs, **kw), _PATIENCE_S))


def _children() -> set[int]:
    """This process's living child processes."""
    me = os.getpid()
    found: set[int] = set()
    for task in Path(f"/proc/{me}/task").iterdir():
        # A thread may end meanwhile (asyncio's child watchers come and go).
        with contextlib.suppress(FileNotFoundError):
            found.update(int(p) for p in (task / "children").read_text().split())
    return found


@pytest.fixture
def one_cell_a_batch(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(service, "READ_BATCH_CELLS", 1)


@pytest.fixture
def no_leftover_processes() -> Iterator[None]:
    before = _children()
    yield
    assert _children() <= before


@pytest.mark.usefixtures("one_cell_a_batch", "no_leftover_processes")
def test_workers_write_the_bytes_one_process_writes(tmp_path: Path) -> None:
    db = tmp_path / "events.db"
    _log(db)
    cells = [
        "gen0-cand2:astropy-7:SOLO:1",
        "gen0-cand1:astropy-7:SUP:0",
        "gen0-cand2:astropy-7:SUP:0",
    ]
    for kw in ({}, {"campaign": "gen0-cand2"}, {"cells": cells}, {"run_id": "r" * 100_000}):
        outs = {jobs: tmp_path / f"ledger-{jobs}.jsonl" for jobs in (1, 3)}
        stats = {jobs: _project(db, out, jobs, **kw) for jobs, out in outs.items()}
        assert stats[1] == stats[3], kw
        assert outs[1].read_bytes() == outs[3].read_bytes(), kw
    assert _project(db, tmp_path / "all.jsonl", 2)["lines"] == 10  # 2 agents, 1 + 2 per SUP


def _damage_a_capture(db: Path, cell_id: str) -> str:
    """A capture row whose payload is not JSON, written past the store (only UPDATE and
    DELETE are refused): what a damaged log holds. Returns its stream."""
    stream = f"capture/{cell_id}/1"
    with sqlite3.connect(db) as conn:
        (version,) = conn.execute(
            "SELECT MAX(version) FROM events WHERE stream = ?", (stream,)
        ).fetchone()
        (seq,) = conn.execute("SELECT MAX(seq) FROM events").fetchone()
        conn.execute(
            "INSERT INTO events VALUES (?, ?, ?, 'capture.opencode-session', 1, 0, ?, ?)",
            (seq + 1, stream, version + 1, b"{not json", bytes(32)),
        )
    return stream


@pytest.mark.usefixtures("one_cell_a_batch", "no_leftover_processes")
def test_a_row_a_worker_cannot_read_fails_as_in_one_process_and_writes_nothing(
    tmp_path: Path,
) -> None:
    db = tmp_path / "events.db"
    _log(db)
    # The last cell: a worker's batch with two processes.
    stream = _damage_a_capture(db, "gen0-cand2:astropy-7:SUP:0")
    messages = []
    for jobs in (1, 2):
        out = tmp_path / f"ledger-{jobs}.jsonl"
        out.write_text("kept\n")
        with pytest.raises(StoreError) as info:
            _project(db, out, jobs)
        messages.append(str(info.value))
        assert out.read_text() == "kept\n"
    assert [p.name for p in tmp_path.iterdir() if p.suffix == ".tmp"] == []
    assert messages[0] == messages[1]
    assert f"on {stream!r} cannot be read" in messages[0]


@pytest.mark.usefixtures("no_leftover_processes")
def test_a_failure_here_while_workers_hold_big_replies_does_not_hang(tmp_path: Path) -> None:
    # Three batches of 32 long transcripts, one per process; this process's own batch
    # fails while the workers' replies (about a MiB each) wait unread in their pipes.
    home = tmp_path / "home"
    asyncio.run(build(home, 0, 96, 30))
    _damage_a_capture(home / "arenad.db", "bench:inst-00000:SOLO:0")
    out = tmp_path / "ledger.jsonl"
    with pytest.raises(StoreError):
        _project(home / "arenad.db", out, 3)
    assert not out.exists()


@pytest.mark.usefixtures("one_cell_a_batch", "no_leftover_processes")
def test_an_invalid_line_a_worker_makes_fails_naming_its_cell(tmp_path: Path) -> None:
    db = tmp_path / "events.db"
    log = Log(db)
    log.add(*solo_cell("a-campaign"))
    # An empty instance id is a legal spec that breaks the schema (task.instance_id);
    # its campaign sorts second: the worker's batch, with two processes.
    bad = solo_cell("b-campaign")
    submitted = bad[0][1][0]
    assert isinstance(submitted, ev.CellSubmitted)
    spec = msgspec.structs.replace(
        submitted.spec,
        instance=msgspec.structs.replace(submitted.spec.instance, instance_id=""),
    )
    log.add(
        (f"cell/{spec.cell_id}", [ev.CellSubmitted(spec=spec), *bad[0][1][1:]]),
        (f"capture/{spec.cell_id}/1", bad[1][1]),
    )
    out = tmp_path / "ledger.jsonl"
    with pytest.raises(InvalidRolloutLine) as info:
        _project(db, out, 2)
    assert f"cell {spec.cell_id} attempt 1 agent line" in str(info.value)
    assert "task.instance_id" in str(info.value)
    assert not out.exists()


@pytest.mark.usefixtures("no_leftover_processes")
def test_a_worker_that_dies_fails_the_projection(tmp_path: Path) -> None:
    db = tmp_path / "events.db"
    _log(db)

    async def run() -> None:
        async with LedgerWorkers(1, db) as workers:
            worker = workers._workers[0].process
            worker.kill()
            with pytest.raises(LedgerWorkerFailed, match="worker 0 exited with status -9"):
                await workers.submit([("gen0-cand1:astropy-7:SOLO:0", "r")])
                await workers.result()
            with pytest.raises(LedgerWorkerFailed, match="worker 0 exited with status -9"):
                await workers.__aexit__(None, None, None)  # stopping it says so too
            workers._workers.clear()

    asyncio.run(asyncio.wait_for(run(), _PATIENCE_S))


@pytest.mark.usefixtures("one_cell_a_batch", "no_leftover_processes")
def test_a_worker_killed_mid_projection_fails_it_and_the_others_are_stopped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = tmp_path / "events.db"
    _log(db)
    submit = LedgerWorkers.submit

    async def submit_then_kill(self: LedgerWorkers, cells: list[tuple[str, str]]) -> None:
        await submit(self, cells)
        if self._sent == 3:  # the first worker's second batch: kill it under its load
            self._workers[0].process.kill()

    monkeypatch.setattr(LedgerWorkers, "submit", submit_then_kill)
    out = tmp_path / "ledger.jsonl"
    with pytest.raises(LedgerWorkerFailed, match="worker 0 exited with status -9"):
        _project(db, out, 3)
    assert not out.exists()
    assert [p.name for p in tmp_path.iterdir() if p.suffix == ".tmp"] == []


def test_a_worker_runs_the_parents_arenad_not_one_in_its_working_directory(
    tmp_path: Path,
) -> None:
    home = tmp_path / "home"
    subprocess.run([ARENAD, "--home", str(home), "init"], check=True, capture_output=True)
    asyncio.run(build(home, 0, 40, 3))  # two batches: one for a worker
    # Another arenad where the command runs: `python -m` would put it first.
    impostor = tmp_path / "cwd" / "arenad"
    impostor.mkdir(parents=True)
    (impostor / "__init__.py").write_text("raise SystemExit('the wrong arenad')\n")
    outs = []
    for jobs in ("1", "2"):
        out = tmp_path / f"ledger-{jobs}.jsonl"
        done = subprocess.run(
            [ARENAD, "--home", str(home), "project-ledger", str(out), "--jobs", jobs],
            cwd=impostor.parent,
            capture_output=True,
            text=True,
            timeout=_PATIENCE_S,
        )
        assert done.returncode == 0, done.stderr
        outs.append(out.read_bytes())
    assert outs[0] == outs[1]


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
        timeout=_PATIENCE_S,
    )
    replies = []
    data = done.stdout
    while data:
        size = int.from_bytes(data[:4], "big")
        replies.append(msgspec.msgpack.decode(data[4 : 4 + size]))
        data = data[4 + size :]
    hello, first, second = replies
    assert hello[1] is None  # its store opened
    assert first[0] is None and first[1] is None and first[2].startswith("ValidationError:")
    assert b"ValidationError" in done.stderr  # the traceback, for the bug report
    assert second[0][0] == [] and second[0][1]["lines"] == 0 and second[1] is None


def test_a_worker_whose_store_will_not_open_says_why(tmp_path: Path) -> None:
    async def run() -> None:
        with pytest.raises(LedgerWorkerFailed, match="cannot open the event store"):
            async with LedgerWorkers(1, tmp_path / "missing.db"):
                pass

    asyncio.run(asyncio.wait_for(run(), _PATIENCE_S))
    assert not (tmp_path / "missing.db").exists()


def _proc_state(pid: int) -> str:
    """The kernel's one-letter state of ``pid`` (R, S, T stopped, Z exited, ...)."""
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


def test_an_interrupt_at_the_terminal_stops_every_process_and_writes_nothing(
    tmp_path: Path,
) -> None:
    home = tmp_path / "home"
    subprocess.run([ARENAD, "--home", str(home), "init"], check=True, capture_output=True)
    asyncio.run(build(home, 0, 1500, 12))
    out = tmp_path / "out" / "ledger.jsonl"
    # The projection is quick: on a loaded machine it may end between the test seeing its
    # workers and the interrupt. So the parent is stopped (SIGSTOP) once its workers run:
    # stopped, it cannot finish; had it finished already, that attempt is not a test of
    # the interrupt and is run again.
    for _ in range(5):
        if out.exists():
            out.unlink()
        # Its own process group, as a shell gives a foreground job: ^C reaches every process.
        proc = subprocess.Popen(
            [ARENAD, "--home", str(home), "project-ledger", str(out), "--jobs", "3"],
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        children = Path(f"/proc/{proc.pid}/task/{proc.pid}/children")
        deadline = time.monotonic() + _PATIENCE_S
        while proc.poll() is None and len(children.read_text().split()) < 2:  # both workers
            assert time.monotonic() < deadline
            time.sleep(0.005)
        if proc.poll() is not None:
            proc.communicate()
            continue
        os.kill(proc.pid, signal.SIGSTOP)
        while (state := _proc_state(proc.pid)) not in ("T", "Z"):
            time.sleep(0.005)
        if state == "Z":  # it ended before the stop: not an interrupted run
            proc.communicate()
            continue
        workers = [int(p) for p in children.read_text().split()]
        os.killpg(proc.pid, signal.SIGINT)
        os.kill(proc.pid, signal.SIGCONT)
        _, stderr = proc.communicate(timeout=_PATIENCE_S)
        assert proc.returncode != 0
        assert "Traceback" not in stderr and len(stderr.strip().splitlines()) <= 1, stderr
        assert not out.exists() and list(out.parent.iterdir()) == []
        assert all(not Path(f"/proc/{pid}").exists() for pid in workers)
        return
    pytest.fail("the projection ended before it could be interrupted, five times")


def test_a_wrong_jobs_is_one_line_and_changes_nothing(tmp_path: Path) -> None:
    home = tmp_path / "home"
    subprocess.run([ARENAD, "--home", str(home), "init"], check=True, capture_output=True)
    out = tmp_path / "ledger.jsonl"
    out.write_text("kept\n")
    for jobs in ("0", str(MAX_JOBS + 1), "two"):
        done = subprocess.run(
            [ARENAD, "--home", str(home), "project-ledger", str(out), "--jobs", jobs],
            capture_output=True,
            text=True,
        )
        assert done.returncode == 2, done.stderr
        if jobs != "two":  # (typer's own message for a value that is not a number)
            assert done.stderr == f"arenad: --jobs must be 1 to {MAX_JOBS}, not {jobs}\n"
    assert out.read_text() == "kept\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["home", "ledger.jsonl"]


def test_how_many_processes_project() -> None:
    assert processes_for(10, 5, 3) == 3  # asked for
    assert processes_for(10, 2, 3) == 2  # never more than there are batches
    assert processes_for(10_000, 300, 1) == 1
    assert processes_for(PARALLEL_MIN_CELLS - 1, 100, None) == 1  # too small to gain
    cores = len(os.sched_getaffinity(0))
    assert 1 <= processes_for(PARALLEL_MIN_CELLS, 100, None) <= cores
    for wrong in (0, MAX_JOBS + 1):
        with pytest.raises(UserError, match=f"--jobs must be 1 to {MAX_JOBS}, not {wrong}"):
            processes_for(10, 5, wrong)
