"""A batch of cells read from a real SQLite log and projected: what it reads, and when."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path

from arenad.ledger.batch import BatchLines, project_batch
from arenad.store.rows import StoredRow
from arenad.store.sqlite import SqliteEventStore
from events.streams import cell_of
from tests.ledger.test_reference_lines import Log, solo_cell, supervisor_cell

CAMPAIGNS = ("gen0-cand1", "gen0-cand2")


def _cell_ids(requests: Sequence[tuple[str, object]]) -> list[str]:
    return [cell_of(stream) for stream, _ in requests if stream.startswith("cell/")]


async def _project(
    db: Path, batches: Sequence[Sequence[str]]
) -> tuple[list[BatchLines], list[list[str]]]:
    """Each batch's lines, and the streams of each ``read_stream_rows`` call made."""
    store = await SqliteEventStore.open(db)
    calls: list[list[str]] = []
    read_rows = store.read_stream_rows

    async def recorded(streams: Sequence[str]) -> dict[str, list[StoredRow]]:
        calls.append(list(streams))
        return await read_rows(streams)

    store.read_stream_rows = recorded  # type: ignore[method-assign]
    try:
        out = [await project_batch(store, [(c, "run") for c in batch]) for batch in batches]
    finally:
        await store.close()
    return out, calls


def test_a_supervisor_cells_ingested_lines_are_read_for_it_alone(tmp_path: Path) -> None:
    # A long supervisor run ingests many lines (its workers' output among them): a batch
    # must not hold every one of its supervisor cells' at once, only one cell's.
    log = Log(tmp_path / "arenad.db")
    cells: list[str] = []
    for campaign in CAMPAIGNS:
        requests = [*supervisor_cell(campaign), *solo_cell(campaign)]
        log.add(*requests)
        cells += _cell_ids(requests)
    supervisors = [c for c in cells if c.endswith(":SUP:0")]
    assert len(supervisors) == 2

    [whole], calls = asyncio.run(_project(log.db, [cells]))

    ingest_reads = [[s for s in call if s.startswith("ingest/")] for call in calls]
    assert [read for read in ingest_reads if read] == [[f"ingest/{c}/1"] for c in supervisors]
    # The same lines, stats and resolutions as each cell projected in a batch of its own.
    alone, _ = asyncio.run(_project(log.db, [[c] for c in cells]))
    assert whole.lines == [line for batch in alone for line in batch.lines]
    assert whole.resolutions == [r for batch in alone for r in batch.resolutions]
    # Each supervisor line has the figures folded from its journal (read, not skipped).
    assert sum(b'"spawned":3' in line for line in whole.lines) == len(supervisors)
