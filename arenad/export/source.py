"""What every export reads: the ledger's lines of each chosen cell, with the facts a
format needs beside them (the attempt's patch, its run's times) and their lineage.

An export is a projection of the log like the ledger (``arenad.ledger``): the same log
gives the same records, read from events alone (no run dir, clock or random source), a
batch of cells at a time so memory stays flat whatever the log's size. It does not
re-derive a cell's facts: each line is the ledger's own (``cell_projection``), so an
export and the ledger never disagree on a reward, a spend or a gap.

The log is read as it stood when the export began: its head (the last row's sequence
number and chain hash) is taken first, and rows appended later are left out, so a
daemon writing meanwhile changes nothing in what is exported. Every record carries its
``Lineage``: the cell and attempt, the first and last sequence numbers of the attempt's
events, and that head, which ``arenad verify-log`` can prove the log still holds.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any, NamedTuple

import msgspec

from arenad.cell.attempts import attempts
from arenad.errors import UserError
from arenad.ledger.batch import read_cell_records
from arenad.ledger.lines import new_stats
from arenad.ledger.project import cell_projection
from arenad.ledger.service import READ_BATCH_CELLS, cell_order, default_run_id, home_id
from arenad.store.base import EventStore
from events import cell as ev
from events.base import Recorded
from events.specs import CellSpec, campaign_of
from events.streams import CELL, campaign_cells, cell_of

__all__ = ["ExportCell", "Head", "LineAttempt", "Lineage", "cells_of", "log_head"]


class Head(msgspec.Struct, frozen=True, kw_only=True):
    """The log's head when the export began: every record is of the log up to it."""

    seq: int
    # The chain hash of row ``seq`` (hex); None for a store that keeps no chain.
    hash: str | None


class Lineage(msgspec.Struct, frozen=True, kw_only=True):
    """Where an exported record came from in the log."""

    cell: str
    attempt: int
    # The first and last sequence numbers of the attempt's events (its cell stream's
    # events of that attempt, its captures, its ingested lines).
    first_seq: int
    last_seq: int
    head_seq: int
    head_hash: str | None
    rollout_id: str

    def as_dict(self) -> dict[str, Any]:
        return msgspec.structs.asdict(self)


class LineAttempt(NamedTuple):
    """One ledger line of a cell, and its attempt's facts beside it."""

    line: dict[str, Any]
    attempt: int
    lineage: Lineage


class ExportCell(NamedTuple):
    cell_id: str
    spec: CellSpec
    # The ledger's lines of the cell, in ledger order (an attempt's agent or supervisor
    # line, then its worker lines).
    lines: list[LineAttempt]
    # Each ended attempt's verification (None: never verified) and its patch as the log
    # keeps it (None: no patch was captured).
    verified: dict[int, ev.CellVerified | None]
    patches: dict[int, ev.PatchCaptured | None]
    # Each attempt's run start and end, ms since the epoch (recorded times; None unknown).
    run_times: dict[int, tuple[int | None, int | None]]


async def log_head(store: EventStore) -> Head:
    seq = await store.last_seq()
    hash_at = getattr(store, "hash_at", None)
    digest = await hash_at(seq) if hash_at is not None and seq else None
    return Head(seq=seq, hash=bytes(digest).hex() if digest is not None else None)


def _cell(cell_id: str, records: list[Recorded], run_id: str, head: Head) -> ExportCell | None:
    spec = next(
        (r.event.spec for r in records if isinstance(r.event, ev.CellSubmitted)),
        None,
    )
    if spec is None:
        return None
    by_n = {a.n: a for a in attempts(records)}
    projection = cell_projection(cell_id, records, run_id, new_stats())
    lines: list[LineAttempt] = []
    attempt = 0
    for line in projection.lines:
        if line["role"] != "worker":
            # An agent or supervisor line opens its attempt; its workers follow it.
            attempt = int(line["outcome"]["metrics"]["attempt"])
        a = by_n.get(attempt)
        first, last = (a.first_seq, a.last_seq) if a is not None else (0, 0)
        lineage = Lineage(
            cell=cell_id,
            attempt=attempt,
            first_seq=first,
            last_seq=last,
            head_seq=head.seq,
            head_hash=head.hash,
            rollout_id=line["rollout_id"],
        )
        lines.append(LineAttempt(line, attempt, lineage))
    ended = [by_n.get(n) for n in sorted({la.attempt for la in lines})]
    return ExportCell(
        cell_id,
        spec,
        lines,
        {a.n: a.verified for a in ended if a is not None},
        {a.n: a.patch for a in ended if a is not None},
        {a.n: (a.started_at_ms, a.ended_at_ms) for a in ended if a is not None},
    )


async def _chosen_cells(store: EventStore, campaigns: Sequence[str]) -> list[str]:
    if not campaigns:
        return [cell_of(s) for s in await store.streams(CELL)]
    cells: list[str] = []
    for campaign in dict.fromkeys(campaigns):
        found = [cell_of(s) for s in await store.streams(campaign_cells(campaign))]
        if not found:
            raise UserError(f"--campaign {campaign}: no such campaign")
        cells += found
    return cells


async def cells_of(
    store: EventStore,
    head: Head,
    campaigns: Sequence[str] = (),
    arms: Sequence[str] = (),
    progress: Callable[[int, int], None] | None = None,
) -> AsyncIterator[ExportCell]:
    """The chosen cells (of ``campaigns``, default all; of ``arms``, default all) in
    ledger order, each with its lines, as the log stood at ``head``; a batch of cells
    read at a time. Raises UserError for a campaign with no cell, or (at the end) an arm
    no chosen cell has."""
    chosen = sorted(await _chosen_cells(store, campaigns), key=cell_order)
    wanted = set(arms)
    seen_arms: set[str] = set()
    home = await home_id(store)
    run_ids: dict[str, str] = {}
    for lo in range(0, len(chosen), READ_BATCH_CELLS):
        batch = chosen[lo : lo + READ_BATCH_CELLS]
        read = await read_cell_records(store, batch)
        for cell_id in batch:
            # Rows appended after the head are not of the log being exported.
            records = [r for r in read.pop(cell_id) if r.seq <= head.seq]
            campaign = campaign_of(cell_id)
            run_id = run_ids.get(campaign) or run_ids.setdefault(
                campaign, default_run_id(home, campaign)
            )
            cell = _cell(cell_id, records, run_id, head)
            if cell is None:
                continue
            seen_arms.add(cell.spec.arm.name)
            if wanted and cell.spec.arm.name not in wanted:
                continue
            yield cell
        if progress is not None:
            progress(min(lo + READ_BATCH_CELLS, len(chosen)), len(chosen))
    missing = sorted(wanted - seen_arms)
    if missing:
        raise UserError(f"--arm {missing[0]}: no chosen cell has this arm")
