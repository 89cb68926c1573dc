"""Where a ledger line came from in the log: its lineage. Pure.

A line's :class:`Lineage` names its cell and attempt, the first and last sequence numbers
of that attempt's events (its cell stream's events of the attempt, its captures, its
ingested lines: ``arenad.cell.attempts``), its rollout id, and the log's :class:`Head` (the
last row's sequence number and chain hash) the projection read the log up to. ``arenad
verify-log`` proves the log still holds that head, so a line (or a record exported from
it) can be traced to the exact events it was made of.

The ledger writes it under each cell line's ``provenance.arenad_lineage`` when asked
(``arenad project-ledger --lineage``); every export carries it (``arenad.export``). Both
derive it here, so they never disagree on where a line came from.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import msgspec

from arenad.cell.attempts import Attempt

__all__ = ["LINEAGE_KEY", "Head", "Lineage", "line_lineages", "with_lineage"]

# The key under a line's ``provenance`` (the schema never rejects an extra key there).
LINEAGE_KEY = "arenad_lineage"


class Head(msgspec.Struct, frozen=True, kw_only=True):
    """The log's head when a projection began: every line is of the log up to it."""

    seq: int
    # The chain hash of row ``seq`` (hex); None for a store that keeps no chain.
    hash: str | None


class Lineage(msgspec.Struct, frozen=True, kw_only=True):
    """Where a ledger line (and every record made from it) came from in the log."""

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


def line_lineages(
    cell_id: str,
    lines: Sequence[dict[str, Any]],
    by_n: Mapping[int, Attempt],
    head: Head,
) -> list[Lineage]:
    """The lineage of each of a cell's ledger ``lines`` (``cell_projection``'s, in its
    order), from the cell's attempts by number (``arenad.cell.attempts.attempts`` of the
    records the lines were made of), as the log stood at ``head``."""
    out: list[Lineage] = []
    attempt = 0
    for line in lines:
        if line["role"] != "worker":
            # An agent or supervisor line opens its attempt; its workers follow it.
            attempt = int(line["outcome"]["metrics"]["attempt"])
        a = by_n.get(attempt)
        first, last = (a.first_seq, a.last_seq) if a is not None else (0, 0)
        out.append(
            Lineage(
                cell=cell_id,
                attempt=attempt,
                first_seq=first,
                last_seq=last,
                head_seq=head.seq,
                head_hash=head.hash,
                rollout_id=line["rollout_id"],
            )
        )
    return out


def with_lineage(line: dict[str, Any], lineage: Lineage) -> dict[str, Any]:
    """``line`` with its lineage as the last key of its ``provenance`` (in place)."""
    line["provenance"][LINEAGE_KEY] = lineage.as_dict()
    return line
