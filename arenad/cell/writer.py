"""Appending to one cell's stream with optimistic concurrency.

The runner appends with the version it last saw. If someone else wrote to the
cell meanwhile (an operator's abort request, a pause), the append fails; the
writer reloads, and if only side facts arrived (state and attempt unchanged) and
the event is still legal, appends again. If the cell moved on, the runner loses
the race: ``CellMovedOn`` tells it to stop, and nothing is written twice.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence

from arenad.cell.machine import CellState, apply, fold
from arenad.errors import ArenadError, ConcurrencyError
from arenad.store.base import AppendRequest, EventStore
from events.base import Event, Recorded
from events.streams import cell_stream


class CellMovedOn(ArenadError):
    """Another writer moved the cell to another state or attempt."""


AppendMany = Callable[[Sequence[AppendRequest]], Awaitable[list[list[Recorded]]]]


class CellWriter:
    """``append_many``: how appends reach the store (default ``store.append_many``; the
    daemon passes its group commit, so cells that step together share a transaction)."""

    def __init__(
        self, store: EventStore, cell_id: str, *, append_many: AppendMany | None = None
    ) -> None:
        self.store = store
        self._append_many = append_many if append_many is not None else store.append_many
        self.cell_id = cell_id
        self.stream = cell_stream(cell_id)
        self.state: CellState | None = None

    async def load(self) -> CellState:
        state = fold(await self.store.read_stream(self.stream))
        if state is None:
            raise CellMovedOn(f"cell {self.cell_id} does not exist")
        self.state = state
        return state

    async def append(
        self, events: Sequence[Event], also: Sequence[AppendRequest] = ()
    ) -> CellState:
        """Append ``events`` to the cell (and ``also`` to other streams, atomically)."""
        state = self.state or await self.load()
        for _ in range(20):
            # Check legality before writing (each event against the state the ones before
            # it lead to); the store's projector checks again in the transaction, so a
            # refused event is never written either way.
            probe = state
            for event in events:
                probe = apply(probe, event, 0)
            try:
                recorded = await self._append_many(
                    [AppendRequest(self.stream, state.version, list(events)), *also]
                )
            except ConcurrencyError as exc:
                if exc.stream != self.stream:
                    raise
                fresh = await self.load()
                if fresh.status != state.status or fresh.attempt != state.attempt:
                    raise CellMovedOn(
                        f"cell {self.cell_id} moved to {fresh.status} (attempt {fresh.attempt})"
                        f" while this step ran in {state.status}"
                    ) from None
                state = fresh
                continue
            self.state = _fold_onto(state, recorded[0])
            return self.state
        raise CellMovedOn(f"cell {self.cell_id}: too many concurrent writers")


def _fold_onto(state: CellState, recorded: list[Recorded]) -> CellState:
    for r in recorded:
        state = apply(state, r.event, r.recorded_at_ms)
    return state
