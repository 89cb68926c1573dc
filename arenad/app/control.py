"""Operator commands: they travel as events through the log, so a running daemon
(another process) sees them by following it, and the audit trail shows who asked."""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal, get_args

from arenad.cell.machine import CellState, CellStatus
from arenad.cell.writer import CellMovedOn, CellWriter
from arenad.errors import ConcurrencyError, IllegalTransition, UserError
from arenad.home import Home, open_store
from arenad.readmodels.view import cells_view
from arenad.report.project import cell_outcome
from arenad.store.base import AppendRequest
from events import cell as ev
from events import streams
from events.base import Event
from events.control import MaxParallelChanged

RetryWhere = Literal[
    "failed", "infra", "timedOut", "unscored", "unresolved", "verify-failed", "interrupted"
]
RETRY_WHERE: tuple[str, ...] = get_args(RetryWhere)


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


def retry_matches(state: CellState, where: RetryWhere) -> bool:
    """Whether a cell is one ``retry --where`` selects: a finished or failed cell (only those
    can be retried) whose current attempt failed (``failed``), failed for an infrastructure
    reason (``infra``), ran out of time (``timedOut``, whatever came after), was recovered
    without a result that counts (``unscored``), is decided and not resolved
    (``unresolved``: the report's outcome), was scored but its verify command failed
    (``verify-failed``), or was interrupted by what was not the agent (``interrupted``:
    the daemon's shutdown, an operator's abort, a lost node; also an abort before the run
    started)."""
    if not state.terminal:
        return False
    failed = state.status == CellStatus.FAILED
    match where:
        case "failed":
            return failed
        case "infra":
            return (
                failed
                and state.failed is not None
                and (state.failed.classification == "infrastructure")
            )
        case "timedOut":
            if state.run_end is not None:
                return state.run_end == CellStatus.TIMED_OUT
            # Folded before run_end was kept: the verdict says why it did not count.
            reason = state.verified.not_scored_reason if state.verified is not None else None
            return reason is not None and reason.startswith("timed out")
        case "unscored":
            return (
                state.status == CellStatus.RECOVERED
                and state.verified is not None
                and not state.verified.scored
            )
        case "unresolved":
            return cell_outcome(state) == "unresolved"
        case "verify-failed":
            verified = state.verified
            return (
                state.interrupted is None
                and verified is not None
                and verified.scored
                and verified.verify_pass is not True
            )
        case "interrupted":
            return state.interrupted is not None or (
                failed and state.failed is not None and state.failed.stage == "abort"
            )


async def _campaign_append(
    home: Home,
    campaign: str,
    decide: Callable[[CellState], list[Event]],
    *,
    selection: str,
    verb: str,
    allow_empty: bool,
) -> list[str]:
    """``decide``'s events for every cell of ``campaign`` (none: the cell is not selected),
    in one transaction: all of them or none, each at the version it was decided on (a cell
    that moved on meanwhile fails the whole). The ids written. Nothing selected is a user
    error (naming the ``selection`` and the ``verb``) unless ``allow_empty``."""
    async with open_store(home) as store:
        cells = cells_view(store)
        ids = [str(row["cell_id"]) for row in await cells.rows(campaign)]
        if not ids:
            raise UserError(f"no campaign {campaign!r} in {home.db_path} (see `arenad campaigns`)")
        requests: list[AppendRequest] = []
        for i in range(0, len(ids), 500):
            states = await cells.states(ids[i : i + 500])
            for cell_id in ids[i : i + 500]:
                state = states.get(cell_id)
                if state is not None and (events := decide(state)):
                    requests.append(
                        AppendRequest(streams.cell_stream(cell_id), state.version, events)
                    )
        if not requests:
            if allow_empty:
                return []
            raise UserError(
                f"no cell of campaign {campaign!r} matches{' ' if selection else ''}{selection};"
                f" nothing to {verb}"
                " (--allow-empty makes that not an error)"
            )
        try:
            await store.append_many(requests)
        except (ConcurrencyError, IllegalTransition) as exc:
            raise UserError(f"{campaign}: a cell moved on meanwhile ({exc}); try again") from None
    return [streams.cell_of(r.stream) for r in requests]


async def retry_campaign(
    home: Home, campaign: str, where: RetryWhere, reason: str, *, allow_empty: bool = False
) -> list[str]:
    """A new attempt of every cell of ``campaign`` that ``where`` selects, in one
    transaction (all of them or none); the ids retried. Nothing matching is a user error
    unless ``allow_empty``."""
    if where not in RETRY_WHERE:
        raise UserError(f"--where must be one of {', '.join(RETRY_WHERE)}, not {where!r}")

    def decide(state: CellState) -> list[Event]:
        if not retry_matches(state, where):
            return []
        return [ev.CellRetried(attempt=state.attempt + 1, reason=reason, requested_by="operator")]

    return await _campaign_append(
        home,
        campaign,
        decide,
        selection=f"--where {where}",
        verb="retry",
        allow_empty=allow_empty,
    )


CampaignAction = Literal["abort", "pause", "resume"]
# What ``abort|pause|resume --campaign C --where S`` selects by: the cell's state, or
# "queued" (submitted or materialized: its agent has not started).
CONTROL_WHERE: tuple[str, ...] = ("queued", *(s.value for s in CellStatus))


def _state_matches(state: CellState, where: str | None) -> bool:
    if where is None:
        return True
    if where == "queued":
        return state.status in (CellStatus.SUBMITTED, CellStatus.MATERIALIZED)
    return state.status.value == where


async def control_campaign(
    home: Home,
    campaign: str,
    action: CampaignAction,
    *,
    where: str | None = None,
    reason: str = "operator request",
    allow_empty: bool = False,
) -> list[str]:
    """Abort, pause or resume every cell of ``campaign`` the action applies to (abort: not
    finished and not already asked; pause: not finished and not paused; resume: paused),
    narrowed by ``where`` (a state, or "queued"), in one transaction; the ids written."""
    if where is not None and where not in CONTROL_WHERE:
        raise UserError(f"--where must be one of {', '.join(CONTROL_WHERE)}, not {where!r}")

    def decide(state: CellState) -> list[Event]:
        if not _state_matches(state, where):
            return []
        match action:
            case "abort":
                live = not state.terminal and not state.abort_requested
                return [ev.AbortRequested(reason=reason)] if live else []
            case "pause":
                pausable = not (state.terminal or state.paused)
                return [ev.CellPaused(reason=reason)] if pausable else []
            case "resume":
                return [ev.CellResumed()] if state.paused else []

    return await _campaign_append(
        home,
        campaign,
        decide,
        selection=f"--where {where}" if where is not None else "",
        verb=action,
        allow_empty=allow_empty,
    )


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
    "CONTROL_WHERE",
    "RETRY_WHERE",
    "abort_cell",
    "control_campaign",
    "pause_cell",
    "resume_cell",
    "retry_campaign",
    "retry_cell",
    "retry_matches",
    "set_max_parallel",
]
