"""The report-facts read model: each cell's :func:`~arenad.readmodels.cell_facts.cell_facts`,
kept in the append's transaction (migrations/0009_report_facts.sql), so `arenad report`
reads one small row per cell instead of folding every cell's stream.

The row is the fold of the cell's whole stream: an append (or a `rebuild` batch) folds
each cell it touches again from its earlier events (read inside the same transaction)
and the batch's own, so the row and the report's fold over the log cannot disagree. A
cell whose runs went through the model gateway is marked: its facts also need its ingest
streams, which this projector does not follow (ingested lines are the bulk of the log),
so the report folds those few cells from the log (:func:`read`'s ``refold``).
"""

from __future__ import annotations

from collections.abc import Sequence

import aiosqlite
import msgspec

from arenad.readmodels.cell_facts import CellFacts, cell_facts
from arenad.store.rows import decode_rows
from events import cell as ev
from events.base import Recorded
from events.streams import CELL, cell_of, is_cell_stream

__all__ = ["ReportFactsProjector", "is_complete", "missing", "read"]

_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder(CellFacts)
_CHUNK = 500
_ROW = "seq, stream, version, tag, schema_version, recorded_at_ms, payload"
_UPSERT = "INSERT OR REPLACE INTO report_facts (cell_id, gateway, facts) VALUES (?, ?, ?)"


def _through_gateway(records: Sequence[Recorded], facts: CellFacts) -> bool:
    """Whether the cell's figures need its ingest streams: a run that went through the
    gateway (the report's fold reads them for exactly these cells)."""
    if not facts.runs:
        return False
    first = records[0].event
    return isinstance(first, ev.CellSubmitted) and first.spec.gateway.kind == "gateway"


class ReportFactsProjector:
    name: str = "report_facts"
    tables: tuple[str, ...] = ("report_facts", "report_facts_incomplete")

    def wants(self, stream: str) -> bool:
        return is_cell_stream(stream)

    async def apply(self, db: aiosqlite.Connection, batch: Sequence[Recorded]) -> None:
        streams: dict[str, list[Recorded]] = {}
        for r in batch:
            streams.setdefault(r.stream, []).append(r)
        # A stream whose first event is in the batch is all there (a submission's are);
        # the others' earlier events are read back, the batch's own left out (in a
        # `rebuild` the table also holds events after the batch: those too).
        earlier = sorted(s for s, rs in streams.items() if rs[0].version != 1)
        before: dict[str, list[Recorded]] = {}
        for i in range(0, len(earlier), _CHUNK):
            chunk = earlier[i : i + _CHUNK]
            rows = await db.execute_fetchall(
                f"SELECT {_ROW} FROM events WHERE stream IN ({','.join('?' * len(chunk))})"
                " ORDER BY seq",
                chunk,
            )
            for r in decode_rows(rows):
                if r.version < streams[r.stream][0].version:
                    before.setdefault(r.stream, []).append(r)
        out = []
        for stream, records in sorted(streams.items()):
            whole = [*before.get(stream, ()), *records]
            facts = cell_facts(whole)
            if facts is None:
                continue
            cell_id = cell_of(stream)
            out.append((cell_id, int(_through_gateway(whole, facts)), _encoder.encode(facts)))
        await db.executemany(_UPSERT, out)


async def is_complete(db: aiosqlite.Connection) -> bool:
    """Whether the table holds the whole log's past (a home from before it: not until
    `arenad rebuild`)."""
    rows = await db.execute_fetchall("SELECT 1 FROM report_facts_incomplete")
    return not rows


def _range(campaign: str) -> tuple[str, str]:
    """The key range of a campaign's cells: ids after "<campaign>:" and before
    "<campaign>;" (":" never occurs in a campaign's name, ";" is the next character)."""
    return f"{campaign}:", f"{campaign};"


_IN_RANGE = " AND cell_id > ? AND cell_id < ?"


async def missing(db: aiosqlite.Connection, names: Sequence[str]) -> list[str]:
    """Those of ``names`` that have no cell."""
    out = []
    for name in names:
        rows = await db.execute_fetchall(
            f"SELECT 1 FROM report_facts WHERE 1{_IN_RANGE} LIMIT 1", _range(name)
        )
        if not rows:
            out.append(name)
    return out


async def read(
    db: aiosqlite.Connection, chosen: Sequence[str] = ()
) -> tuple[list[CellFacts], list[str]]:
    """The facts of ``chosen`` campaigns' cells (every campaign's when none is), by cell
    id, and the cell streams of those the caller must fold from the log instead (through
    the gateway), by name."""
    ranges: list[tuple[str, str] | None] = [_range(name) for name in chosen] or [None]
    facts: list[CellFacts] = []
    refold: list[str] = []
    decode = _decoder.decode
    for bounds in ranges:
        where, args = ("", ()) if bounds is None else (_IN_RANGE, bounds)
        rows = await db.execute_fetchall(
            f"SELECT facts FROM report_facts WHERE gateway = 0{where}", args
        )
        facts += [decode(blob) for (blob,) in rows]
        del rows
        ids = await db.execute_fetchall(
            f"SELECT cell_id FROM report_facts WHERE gateway = 1{where}", args
        )
        refold += [CELL + str(cell_id) for (cell_id,) in ids]
    return facts, refold
