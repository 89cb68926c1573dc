"""The cells read port: what the daemon and the application ask of the cells read model.

The scheduler asks which cells could move on; ``status`` asks for counts and rows;
``submit`` asks for a cell's state. They depend on :class:`CellsView`, never on a SQL
connection. :class:`SqliteCellsView` answers from the ``cells`` table (kept in the append's
transaction, :mod:`arenad.readmodels.cells`); :class:`FoldedCellsView` answers any
:class:`~arenad.store.base.EventStore` by folding the cell streams (the in-memory store's,
and the contract the SQL one must agree with).
"""

from __future__ import annotations

import abc
from collections.abc import Sequence
from typing import Any

from arenad.cell.machine import TERMINAL, CellState, CellStatus, fold
from arenad.readmodels import queries
from arenad.readmodels.cells import (
    COLUMNS,
    STATUS_COLUMNS,
    row_of,
    state_extras,
    state_reason,
)
from arenad.readmodels.tallies import Tallies, tally
from arenad.store.base import EventStore
from arenad.store.sqlite import SqliteEventStore
from events.streams import CELL, cell_stream

# States whose run has not started: what a campaign at its spend cap keeps from starting.
NOT_STARTED = frozenset({CellStatus.SUBMITTED, CellStatus.MATERIALIZED})


class CellsView(abc.ABC):
    @abc.abstractmethod
    async def runnable(
        self,
        *,
        exclude: Sequence[str] = (),
        limit: int | None = None,
        hold_campaigns: Sequence[str] = (),
        only_campaigns: Sequence[str] = (),
    ) -> list[tuple[str, str]]:
        """(cell_id, campaign) of cells a daemon could move on (not terminal, not paused),
        oldest first, but those in ``exclude`` (already running), at most ``limit``. Of the
        ``hold_campaigns`` (at their spend cap) only cells whose run started are listed;
        with ``only_campaigns``, only their cells."""

    @abc.abstractmethod
    async def counts(self) -> list[tuple[str, int]]:
        """(state, number of cells), by state name."""

    @abc.abstractmethod
    async def rows(
        self, campaign: str | None = None, limit: int | None = None, state: str | None = None
    ) -> list[dict[str, Any]]:
        """One status row per cell (``STATUS_COLUMNS`` and ``reason``: why it is where it
        is, or None), by campaign, instance, arm, rep; only those in ``state`` if given."""

    @abc.abstractmethod
    async def state(self, cell_id: str) -> CellState | None:
        """The cell's state, or None for a cell never submitted."""

    async def states(self, cell_ids: Sequence[str]) -> dict[str, CellState]:
        """The states of those of ``cell_ids`` that were submitted (a batch of lookups)."""
        found = {}
        for cell_id in cell_ids:
            state = await self.state(cell_id)
            if state is not None:
                found[cell_id] = state
        return found

    @abc.abstractmethod
    async def tallies(self) -> Tallies:
        """Per campaign × arm × state × outcome and per instance × arm × outcome counts
        (:mod:`arenad.readmodels.tallies`)."""

    async def campaign_counts(self) -> list[tuple[str, str, int, int]]:
        """(campaign, state, number of cells, the campaign's latest update in ms), by
        campaign then state."""
        counts: dict[tuple[str, str], int] = {}
        last: dict[str, int] = {}
        for t in (await self.tallies()).arms:
            counts[(t.campaign, t.state)] = counts.get((t.campaign, t.state), 0) + t.cells
            last[t.campaign] = max(last.get(t.campaign, 0), t.last_update_ms)
        return [(c, s, n, last[c]) for (c, s), n in sorted(counts.items())]


class SqliteCellsView(CellsView):
    def __init__(self, store: SqliteEventStore) -> None:
        self._store = store

    async def runnable(
        self,
        *,
        exclude: Sequence[str] = (),
        limit: int | None = None,
        hold_campaigns: Sequence[str] = (),
        only_campaigns: Sequence[str] = (),
    ) -> list[tuple[str, str]]:
        return await queries.runnable_cells(
            self._store.connection,
            exclude=exclude,
            limit=limit,
            hold_campaigns=hold_campaigns,
            only_campaigns=only_campaigns,
        )

    async def counts(self) -> list[tuple[str, int]]:
        return await queries.state_counts(self._store.connection)

    async def rows(
        self, campaign: str | None = None, limit: int | None = None, state: str | None = None
    ) -> list[dict[str, Any]]:
        return await queries.cell_rows(self._store.connection, campaign, limit, state)

    async def state(self, cell_id: str) -> CellState | None:
        return await queries.cell_state(self._store.connection, cell_id)

    async def states(self, cell_ids: Sequence[str]) -> dict[str, CellState]:
        return await queries.cell_states(self._store.connection, cell_ids)

    async def campaign_counts(self) -> list[tuple[str, str, int, int]]:
        return await queries.campaign_state_counts(self._store.connection)

    async def tallies(self) -> Tallies:
        return await queries.tallies(self._store.connection)


class FoldedCellsView(CellsView):
    """Answers by folding every cell stream on each call: for small logs and tests."""

    def __init__(self, store: EventStore) -> None:
        self._store = store

    async def _states(self) -> list[CellState]:
        states = []
        for stream in await self._store.streams(CELL):
            state = fold(await self._store.read_stream(stream))
            if state is not None:
                states.append(state)
        return states

    async def runnable(
        self,
        *,
        exclude: Sequence[str] = (),
        limit: int | None = None,
        hold_campaigns: Sequence[str] = (),
        only_campaigns: Sequence[str] = (),
    ) -> list[tuple[str, str]]:
        skip = set(exclude)
        held = set(hold_campaigns)
        only = set(only_campaigns)
        found = sorted(
            (s.submitted_at_ms, s.cell_id, s.spec.campaign)
            for s in await self._states()
            if s.status not in TERMINAL
            and not s.paused
            and s.cell_id not in skip
            and not (s.spec.campaign in held and s.status in NOT_STARTED)
            and (not only or s.spec.campaign in only)
        )
        return [(cell_id, campaign) for _, cell_id, campaign in found[:limit]]

    async def counts(self) -> list[tuple[str, int]]:
        tally: dict[str, int] = {}
        for s in await self._states():
            tally[str(s.status)] = tally.get(str(s.status), 0) + 1
        return sorted(tally.items())

    async def rows(
        self, campaign: str | None = None, limit: int | None = None, state: str | None = None
    ) -> list[dict[str, Any]]:
        states = [
            s
            for s in await self._states()
            if campaign in (None, s.spec.campaign) and state in (None, s.status.value)
        ]
        states.sort(
            key=lambda s: (
                s.spec.campaign,
                s.spec.instance.instance_id,
                s.spec.arm.name,
                s.spec.rep,
            )
        )
        out = []
        for s in states[:limit]:
            row = dict(zip(COLUMNS, row_of(s, 0), strict=True))
            out.append(
                {
                    **{c: row[c] for c in STATUS_COLUMNS},
                    "reason": state_reason(s),
                    **state_extras(s),
                }
            )
        return out

    async def state(self, cell_id: str) -> CellState | None:
        return fold(await self._store.read_stream(cell_stream(cell_id)))

    async def tallies(self) -> Tallies:
        # A tally keeps the newest time any event of its cells recorded; a stream's
        # latest event is its newest unless the clock went back.
        states = []
        last: dict[str, int] = {}
        for stream in await self._store.streams(CELL):
            records = await self._store.read_stream(stream)
            state = fold(records)
            if state is not None:
                states.append(state)
                last[state.cell_id] = max(r.recorded_at_ms for r in records)
        return tally(states, last)


def _status_order(s: CellState) -> tuple[str, str, str, int]:
    return (s.spec.campaign, s.spec.instance.instance_id, s.spec.arm.name, s.spec.rep)


def cells_view(store: EventStore) -> CellsView:
    """The cells view of a store: its read model where it keeps one, else folds."""
    if isinstance(store, SqliteEventStore):
        return SqliteCellsView(store)
    return FoldedCellsView(store)
