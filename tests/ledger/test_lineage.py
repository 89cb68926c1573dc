"""``arenad project-ledger --lineage``: each cell line says where it came from in the log.

A real home and the real CLI: the default ledger keeps its bytes; with ``--lineage`` each
cell line carries ``provenance.arenad_lineage``, whose seq range finds exactly its
attempt's events (patch, verdict, spend among them), whose head is the head ``arenad
verify-log`` records, and whose bytes are the same twice and with worker processes."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import msgspec
import pytest

from arenad.home import Home, open_store
from arenad.ledger import service
from arenad.ledger.batch import project_batch
from arenad.ledger.lineage import LINEAGE_KEY, Head
from arenad.ledger.service import log_head, project_store
from arenad.store.anchor import read_anchor
from arenad.store.sqlite import SqliteEventStore
from events import cell as ev
from events.base import Event, Recorded
from events.streams import capture_stream, cell_stream, ingest_stream
from tests.ledger.test_reference_lines import Log, solo_cell, supervisor_cell

ARENAD = str(Path(sys.executable).parent / "arenad")
RETRIED = "retried"


def arenad(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [ARENAD, "--home", str(home), *args], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    return done


def _second_attempt(requests: list[tuple[str, list[Event]]]) -> list[tuple[str, list[Event]]]:
    """A solo cell's attempt 1 again as its attempt 2 (a retry that also settled)."""
    (cell, events), (capture, captured) = requests

    def again(events: list[Event]) -> list[Event]:
        return [
            msgspec.structs.replace(e, attempt=2)  # type: ignore[type-var]
            for e in events
            if not isinstance(e, ev.CellSubmitted)
        ]

    return [(cell, again(events)), (capture.removesuffix("/1") + "/2", again(captured))]


def _home(tmp_path: Path) -> Path:
    """A home holding a solo cell, a supervisor cell (its journal ingested) and a solo
    cell retried once, appended in that order."""
    home = tmp_path / "home"
    arenad(home, "init")
    log = Log(Home(home).db_path)
    log.add(*solo_cell(), *supervisor_cell())
    retried = solo_cell(RETRIED)
    log.add(*retried)
    log.add(*_second_attempt(retried))
    return home


def _lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_bytes().splitlines()]


async def _all_records(home: Path) -> list[Recorded]:
    async with open_store(Home(home)) as store:
        return [r async for r in store.read_all(0)]


def _events_of(records: list[Recorded], cell: str, attempt: int) -> list[Recorded]:
    """An attempt's events found from the log alone, by stream name: its cell stream's
    events naming the attempt, and its capture and ingest streams."""
    own = (capture_stream(cell, attempt), ingest_stream(cell, attempt))
    return [
        r
        for r in records
        if r.stream in own
        or (r.stream == cell_stream(cell) and getattr(r.event, "attempt", None) == attempt)
    ]


def test_lineage_is_opt_in_and_adds_one_key_under_provenance(tmp_path: Path) -> None:
    home = _home(tmp_path)
    plain, traced = tmp_path / "plain.jsonl", tmp_path / "traced.jsonl"
    plain_stats = arenad(home, "project-ledger", str(plain)).stdout
    traced_stats = arenad(home, "project-ledger", str(traced), "--lineage").stdout
    assert plain_stats == traced_stats
    assert LINEAGE_KEY.encode() not in plain.read_bytes()
    before, after = _lines(plain), _lines(traced)
    assert len(before) == len(after) == 6  # solo, supervisor + 2 workers, retried x2
    for line, with_lineage in zip(before, after, strict=True):
        assert list(with_lineage["provenance"])[-1] == LINEAGE_KEY
        del with_lineage["provenance"][LINEAGE_KEY]
        assert with_lineage == line


def test_a_lines_lineage_finds_exactly_its_attempts_events(tmp_path: Path) -> None:
    home = _home(tmp_path)
    out = tmp_path / "ledger.jsonl"
    arenad(home, "project-ledger", str(out), "--lineage")
    records = asyncio.run(_all_records(home))
    seen: set[tuple[str, int]] = set()
    for line in _lines(out):
        lineage = line["provenance"][LINEAGE_KEY]
        cell, attempt = lineage["cell"], lineage["attempt"]
        assert lineage["rollout_id"] == line["rollout_id"]
        assert line["outcome"]["metrics"].get("attempt", attempt) == attempt
        expected = _events_of(records, cell, attempt)
        assert (lineage["first_seq"], lineage["last_seq"]) == (
            expected[0].seq,
            expected[-1].seq,
        )
        # The range and (cell, attempt) select the attempt's events and no other's.
        in_range = [r for r in records if lineage["first_seq"] <= r.seq <= lineage["last_seq"]]
        assert [r for r in in_range if r in expected] == expected
        # Its verdict and spend are among them.
        kinds = {type(r.event) for r in expected}
        assert {ev.CellVerified, ev.CellRecovered} <= kinds
        seen.add((cell, attempt))
    retried = {c for c, _ in seen if c.startswith(f"{RETRIED}:")}
    (cell,) = retried
    assert {(cell, 1), (cell, 2)} <= seen
    lineages = [ln["provenance"][LINEAGE_KEY] for ln in _lines(out)]
    first, second = (lg for lg in lineages if lg["cell"] == cell)
    assert first["last_seq"] < second["first_seq"]  # two attempts, two disjoint ranges


def test_the_head_is_the_one_verify_log_records(tmp_path: Path) -> None:
    home = _home(tmp_path)
    out, anchor = tmp_path / "ledger.jsonl", tmp_path / "arenad.anchor"
    arenad(home, "project-ledger", str(out), "--lineage")
    arenad(home, "verify-log", "--anchor", str(anchor))
    recorded = read_anchor(anchor)
    assert recorded is not None and recorded.seq > 0
    for line in _lines(out):
        lineage = line["provenance"][LINEAGE_KEY]
        assert (lineage["head_seq"], lineage["head_hash"]) == (recorded.seq, recorded.hash)


def test_same_log_same_bytes_twice_and_with_workers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = _home(tmp_path)
    first, second = tmp_path / "1.jsonl", tmp_path / "2.jsonl"
    arenad(home, "project-ledger", str(first), "--lineage")
    arenad(home, "project-ledger", str(second), "--lineage", "--jobs", "2")
    assert first.read_bytes() == second.read_bytes()
    # A batch per cell, so two processes really share the projection.
    monkeypatch.setattr(service, "READ_BATCH_CELLS", 1)

    async def project(out: Path, jobs: int) -> None:
        store = await SqliteEventStore.open(Home(home).db_path)
        try:
            await project_store(store, out, jobs=jobs, lineage=True)
        finally:
            await store.close()

    shared = tmp_path / "3.jsonl"
    asyncio.run(asyncio.wait_for(project(shared, 3), 120))
    assert shared.read_bytes() == first.read_bytes()


def test_rows_after_the_head_are_left_out(tmp_path: Path) -> None:
    # The head is read first; what a daemon appends meanwhile is not of the ledger.
    home = _home(tmp_path)
    records = asyncio.run(_all_records(home))
    (cell,) = {
        r.stream.removeprefix("cell/") for r in records if r.stream.startswith(f"cell/{RETRIED}:")
    }
    second = _events_of(records, cell, 2)

    async def project(head: Head) -> list[dict[str, Any]]:
        async with open_store(Home(home)) as store:
            assert (await log_head(store)).seq == records[-1].seq
            batch = await project_batch(store, [(cell, "run")], head)
        return [json.loads(b) for b in batch.lines]

    before_retry = Head(seq=second[0].seq - 1, hash=None)
    lines = asyncio.run(project(before_retry))
    assert [ln["provenance"][LINEAGE_KEY]["attempt"] for ln in lines] == [1]
    assert lines[0]["provenance"][LINEAGE_KEY]["head_seq"] == before_retry.seq
