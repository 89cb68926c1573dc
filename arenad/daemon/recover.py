"""Recovery: capture the cell's own opencode store as events, and its spend.

The store is read in place, read-only (its WAL is not checkpointed, so the .db
alone would miss rows). Every session row is captured with its messages and
parts, on the attempt's capture stream, in the same transaction as the
CellRecovered that sums them: the projection never needs the store again. A
store that cannot be read is a recorded gap with null figures, never zeros.
"""

from __future__ import annotations

from pathlib import Path

from arenad.cell.machine import CellState
from arenad.recovery.opencode_spend import ZERO, Spend, session_spend
from arenad.recovery.opencode_store import StoreUnavailable, capture_session_tree
from arenad.store.base import AppendRequest
from events import cell as ev
from events.capture import AgentSessionCaptured
from events.specs import CommandArm


def capture_stream(cell_id: str, attempt: int) -> str:
    return f"capture/{cell_id}/{attempt}"


def spend_figures(captures: list[AgentSessionCaptured]) -> ev.SpendFigures:
    """Spend of every captured session: a private store holds only this cell's tree,
    and child (subagent) sessions are not rolled up by opencode, so they are summed."""
    total: Spend = ZERO
    for capture in captures:
        total = total + session_spend(capture)
    return ev.SpendFigures(
        sessions=len(captures),
        tokens_in=total.tokens_input,
        tokens_out=total.tokens_output,
        tokens_reasoning=total.tokens_reasoning,
        cache_read=total.tokens_cache_read,
        cache_write=total.tokens_cache_write,
        cost_usd=round(total.usd, 10),
    )


def recover_events(
    db_path: Path, cell_id: str, state: CellState, usage: ev.SoloUsage | None
) -> tuple[list[AppendRequest], ev.CellRecovered]:
    attempt = state.attempt
    purpose = "command" if isinstance(state.spec.arm, CommandArm) else "solo"
    stream = capture_stream(cell_id, attempt)
    if not db_path.exists():
        gap = StoreUnavailable(str(db_path), "the cell's opencode store does not exist")
        captured: list[AgentSessionCaptured] | StoreUnavailable = gap
    else:
        captured = capture_session_tree(db_path, None, attempt, purpose)
    if isinstance(captured, StoreUnavailable):
        return [AppendRequest(stream, 0, [captured.event(attempt)])], ev.CellRecovered(
            attempt=attempt,
            store_path=str(db_path),
            store_available=False,
            gap=captured.error,
            spend=ev.SpendFigures(),
            usage=usage,
        )
    return [AppendRequest(stream, 0, list(captured))] if captured else [], ev.CellRecovered(
        attempt=attempt,
        store_path=str(db_path),
        store_available=True,
        spend=spend_figures(captured),
        usage=usage,
    )
