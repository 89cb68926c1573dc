"""Operator commands: they travel as events through the log, so a running daemon
(another process) sees them by following it, and the audit trail shows who asked."""

from __future__ import annotations

from collections.abc import Callable

from arenad.cell.machine import CellState
from arenad.cell.writer import CellMovedOn, CellWriter
from arenad.errors import UserError
from arenad.home import Home, open_store
from events import cell as ev
from events import streams
from events.base import Event
from events.control import MaxParallelChanged


async def _append(
    home: Home, cell_id: str, decide: Callable[[CellState], list[Event]]
) -> CellState:
    async with open_store(home) as store:
        writer = CellWriter(store, cell_id)
        try:
            state = await writer.load()
        except CellMovedOn:
            raise UserError(
                f"no cell {cell_id!r} in {home.db_path} (see `arenad status`)"
            ) from None
        events: list[Event] = decide(state)
        try:
            return await writer.append(events)
        except CellMovedOn as exc:
            raise UserError(f"{cell_id}: {exc}; try again") from None


async def abort_cell(home: Home, cell_id: str, reason: str) -> CellState:
    def decide(state: CellState) -> list[Event]:
        if state.terminal:
            raise UserError(f"{cell_id} is already {state.status}; nothing to abort")
        return [ev.AbortRequested(reason=reason)]

    return await _append(home, cell_id, decide)


async def retry_cell(home: Home, cell_id: str, reason: str) -> CellState:
    def decide(state: CellState) -> list[Event]:
        if not state.terminal:
            raise UserError(
                f"{cell_id} is {state.status}; only a recovered or failed cell can be retried"
                " (abort it first)"
            )
        return [ev.CellRetried(attempt=state.attempt + 1, reason=reason, requested_by="operator")]

    return await _append(home, cell_id, decide)


async def pause_cell(home: Home, cell_id: str) -> CellState:
    def decide(state: CellState) -> list[Event]:
        if state.paused:
            raise UserError(f"{cell_id} is already paused")
        return [ev.CellPaused()]

    return await _append(home, cell_id, decide)


async def resume_cell(home: Home, cell_id: str) -> CellState:
    def decide(state: CellState) -> list[Event]:
        if not state.paused:
            raise UserError(f"{cell_id} is not paused")
        return [ev.CellResumed()]

    return await _append(home, cell_id, decide)


async def set_max_parallel(home: Home, value: int) -> None:
    if value < 1:
        raise UserError("max-parallel must be at least 1")
    async with open_store(home) as store:
        await store.append(streams.CONTROL, None, [MaxParallelChanged(max_parallel=value)])


__all__ = [
    "abort_cell",
    "pause_cell",
    "resume_cell",
    "retry_cell",
    "set_max_parallel",
]
