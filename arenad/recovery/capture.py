"""Recovery: capture the cell's own opencode store as events, and its spend.

The store is read in place, read-only (its WAL is not checkpointed, so the .db
alone would miss rows). Every session row is captured with its messages and
parts, on the attempt's capture stream, in the same transaction as the
CellRecovered that sums them: the projection never needs the store again. A
store that cannot be read is a recorded gap with null figures, never zeros.

:func:`recover_tree` and :func:`capture_worker_sessions` are site steps (their first
argument is the site's tools): they read the store where the cell lives.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from arenad.recovery.opencode_spend import ZERO, Spend, session_spend
from arenad.recovery.opencode_store import (
    StoreUnavailable,
    capture_session_tree,
    capture_sessions_by_directory,
)
from arenad.runs.executor import Tools
from arenad.store.base import AppendRequest
from events import cell as ev
from events.capture import AgentSessionCaptured
from events.streams import capture_stream


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


def recover_tree(
    tools: Tools,
    db_path: str,
    cell_id: str,
    attempt: int,
    purpose: Literal["solo", "command"],
    usage: ev.SoloUsage | None,
    confine: str | None = None,
) -> tuple[list[AppendRequest], ev.CellRecovered]:
    """The whole session tree of the cell's private store, and the CellRecovered summing
    it (a solo or command arm: its store holds only this cell's sessions); ``confine``:
    the run dir the store must really be inside."""
    stream = capture_stream(cell_id, attempt)
    path = Path(db_path)
    if not path.exists():
        captured: list[AgentSessionCaptured] | StoreUnavailable = StoreUnavailable(
            db_path, "the cell's opencode store does not exist"
        )
    else:
        captured = capture_session_tree(path, None, attempt, purpose, confine)
    if isinstance(captured, StoreUnavailable):
        return [AppendRequest(stream, 0, [captured.event(attempt)])], ev.CellRecovered(
            attempt=attempt,
            store_path=db_path,
            store_available=False,
            gap=captured.error,
            spend=ev.SpendFigures(),
            usage=usage,
        )
    return [AppendRequest(stream, 0, list(captured))] if captured else [], ev.CellRecovered(
        attempt=attempt,
        store_path=db_path,
        store_available=True,
        spend=spend_figures(captured),
        usage=usage,
    )


def capture_worker_sessions(
    tools: Tools, db_path: str, cwds: list[str], attempt: int, confine: str | None = None
) -> tuple[list[AgentSessionCaptured], list[str]] | StoreUnavailable:
    """The sessions whose directory is one of ``cwds`` (the seed's recoverSupSpend join),
    and the cwds no session matched; or the store's gap."""
    path = Path(db_path)
    if not path.exists():
        return StoreUnavailable(db_path, "the cell's opencode store does not exist")
    return capture_sessions_by_directory(path, cwds, attempt, confine)
