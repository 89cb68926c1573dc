"""A batch of cells: read from the store, projected, written as the ledger's bytes.

The unit of work of a projection, done by ``arenad.ledger.service`` itself or by one of
its worker processes (``arenad.ledger.workers``), which run this same function on their
own connection to the store: so the ledger is the same bytes however many processes
made it (``arenad.ledger.lines.add_stats`` sums the batches' counts in order).

Reading: three round trips per batch, each in the (stream, version) index's order
(``read_stream_rows``): the cell streams (small events), the capture streams of the
attempts they name, and which ingest streams exist of the supervisor cells and the cells
through the model gateway.
No query per stream (each a thread hop and a future), no sort of the big captures into
log order, and no stream list of the whole log: memory stays that of a batch. A
supervisor cell's ingested lines (a long run ingests many, its workers' output among
them) are read for that cell alone, when it is projected: memory holds one cell's, not a
batch's. A cell's capture and ingest rows stay encoded until the cell is projected, so
the cell is projected while its decoded captures are still in the CPU's cache (decoding
a whole batch first made every part a cache miss: a fifth of the projection's time,
measured on ``bench.ledger`` when every transcript was folded here; a capture now keeps
its session's fold, and only older ones are folded here).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import NamedTuple

import msgspec

from arenad.cell.attempts import attempt_of
from arenad.cell.kinds import kind_of_arm
from arenad.ledger.lines import LedgerStats, new_stats
from arenad.ledger.project import CellResolution, cell_projection
from arenad.ledger.rollout import serialize_rollout_line_bytes
from arenad.store.base import EventStore
from arenad.store.rows import StoredRow, decode_rows
from events.base import Recorded
from events.cell import CellSubmitted
from events.streams import capture_stream, cell_stream, ingest_stream

__all__ = ["BatchLines", "project_batch", "read_cell_records"]


class BatchLines(msgspec.Struct, frozen=True, array_like=True):
    # The batch's lines as the ledger file holds them (without their newlines), in order.
    # Not joined: a batch's one big buffer after another left the allocator's heap
    # fragmented (peak RSS grew with the ledger's size).
    lines: list[bytes]
    # This batch's counts alone (``arenad.ledger.lines.add_stats`` sums them).
    stats: LedgerStats
    # Where each cell's current attempt stands (the cells that have a spec), in order.
    resolutions: list[CellResolution]


def _attempts(records: Iterable[Recorded]) -> list[int]:
    """The attempts a cell stream names (the ones whose capture streams can matter: a
    capture of an attempt its cell never opened gives no line)."""
    return sorted({n for r in records if (n := attempt_of(r.stream, r.event)) is not None})


def _reads_ingest(records: Sequence[Recorded]) -> bool:
    """A supervisor cell (its journal) or a cell whose calls went through the model gateway
    (its records are the steps): the cells whose ingested lines make their lines."""
    return any(
        isinstance(r.event, CellSubmitted)
        and (kind_of_arm(r.event.spec.arm).journal_lines or r.event.spec.gateway.kind == "gateway")
        for r in records
    )


class _Cell(NamedTuple):
    # Its own stream, decoded (small: its attempts and arm are read from it).
    records: list[Recorded]
    # Its capture streams, decoded when the cell is projected.
    captured: list[StoredRow]
    # Its ingest streams that have events (supervisor cells), read when it is projected.
    ingested: list[str]


async def _read(store: EventStore, cell_ids: Sequence[str]) -> dict[str, _Cell]:
    own = await store.read_stream_groups([cell_stream(c) for c in cell_ids])
    attempts = {c: _attempts(own[cell_stream(c)]) for c in cell_ids}
    capture_streams = [(c, capture_stream(c, n)) for c in cell_ids for n in attempts[c]]
    ingest_streams = [
        (c, ingest_stream(c, n))
        for c in cell_ids
        if _reads_ingest(own[cell_stream(c)])
        for n in attempts[c]
    ]
    captured = await store.read_stream_rows([s for _, s in capture_streams])
    ingested = await store.stream_versions([s for _, s in ingest_streams])
    cells = {c: _Cell(own[cell_stream(c)], [], []) for c in cell_ids}
    for c, s in capture_streams:
        cells[c].captured.extend(captured[s])
    for c, s in ingest_streams:
        if s in ingested:
            cells[c].ingested.append(s)
    return cells


async def project_batch(store: EventStore, cells: Sequence[tuple[str, str]]) -> BatchLines:
    """The lines of ``cells`` (each a cell id and its lines' run id), validated; raises
    ``InvalidRolloutLine`` (naming its cell) for a line that breaks the schema, a bug."""
    read = await _read(store, [cell_id for cell_id, _ in cells])
    stats = new_stats()
    out: list[bytes] = []
    resolutions: list[CellResolution] = []
    for cell_id, run_id in cells:
        cell = read.pop(cell_id)
        records = cell.records + decode_rows(cell.captured)
        if cell.ingested:
            ingested = await store.read_stream_rows(cell.ingested)
            records += decode_rows([row for s in cell.ingested for row in ingested[s]])
        lines, resolution = cell_projection(cell_id, records, run_id, stats)
        out += map(serialize_rollout_line_bytes, lines)
        if resolution is not None:
            resolutions.append(resolution)
    return BatchLines(out, stats, resolutions)


async def read_cell_records(
    store: EventStore, cell_ids: Sequence[str]
) -> dict[str, list[Recorded]]:
    """Each cell's records as ``cell_projection`` takes them (its stream, its captures,
    a supervisor cell's ingested lines), read as a batch is: for a projection of the
    ledger's facts into another form (``arenad.export``)."""
    read = await _read(store, cell_ids)
    out: dict[str, list[Recorded]] = {}
    for cell_id in cell_ids:
        cell = read.pop(cell_id)
        records = cell.records + decode_rows(cell.captured)
        if cell.ingested:
            ingested = await store.read_stream_rows(cell.ingested)
            records += decode_rows([row for s in cell.ingested for row in ingested[s]])
        out[cell_id] = records
    return out
