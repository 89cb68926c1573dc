"""Recovery: capture the cell's own opencode store as events, and its spend.

The store is read in place, read-only (its WAL is not checkpointed, so the .db
alone would miss rows). Every session row is captured with its messages and
parts, on the attempt's capture stream, in the same transaction as the
CellRecovered that sums them: the projection never needs the store again. A
store that cannot be read is a recorded gap with null figures, never zeros.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

from arenad.arms import supervisor_figures as figures
from arenad.cell.machine import CellState
from arenad.recovery.opencode_spend import ZERO, Spend, session_spend, sup_spend
from arenad.recovery.opencode_store import (
    StoreUnavailable,
    capture_session_tree,
    capture_sessions_by_directory,
)
from arenad.store.base import AppendRequest
from events import cell as ev
from events.base import Event, Recorded
from events.capture import AgentSessionCaptured, WorkerCwdUnmatched
from events.specs import CommandArm
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


def recover_events(
    db_path: Path, cell_id: str, state: CellState, usage: ev.SoloUsage | None
) -> tuple[list[AppendRequest], ev.CellRecovered]:
    attempt = state.attempt
    purpose: Literal["solo", "command"] = (
        "command" if isinstance(state.spec.arm, CommandArm) else "solo"
    )
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


def recover_supervisor_events(
    db_path: Path, cell_id: str, state: CellState, ingested: Sequence[Recorded | Event]
) -> tuple[list[AppendRequest], ev.CellRecovered]:
    """Worker sessions joined on the ingested ``started.cwd`` values (the seed's
    recoverSupSpend): captures + unmatched cwds on the capture stream, and the figures."""
    attempt = state.attempt
    stream = capture_stream(cell_id, attempt)
    cwds = figures.worker_cwds(ingested)
    tok_journal = figures.worker_tok_journal(ingested)
    summary = figures.summarize(ingested)
    if not db_path.exists():
        result: tuple[list[AgentSessionCaptured], list[str]] | StoreUnavailable = StoreUnavailable(
            str(db_path), "the cell's opencode store does not exist"
        )
    else:
        result = capture_sessions_by_directory(db_path, cwds, attempt)
    capture_events: list[Event]
    if isinstance(result, StoreUnavailable):
        captures: list[AgentSessionCaptured] | None = None
        capture_events = [result.event(attempt)]
        gap: str | None = result.error
    else:
        captures, unmatched = result
        capture_events = [
            *captures,
            *(WorkerCwdUnmatched(attempt=attempt, cwd=c) for c in unmatched),
        ]
        gap = None
    sup = sup_spend(captures, cwds)
    base = spend_figures(captures) if captures is not None else ev.SpendFigures()
    spend = ev.SpendFigures(
        sessions=base.sessions,
        tokens_in=base.tokens_in,
        tokens_out=base.tokens_out,
        tokens_reasoning=base.tokens_reasoning,
        cache_read=base.cache_read,
        cache_write=base.cache_write,
        cost_usd=base.cost_usd,
        worker_tok_journal=tok_journal,
        worker_cwds=sup.worker_cwds,
        worker_sessions=sup.worker_sessions,
        worker_tok_sqlite=sup.worker_tok_sqlite,
        worker_tok_in=sup.worker_tok_in,
        worker_tok_out=sup.worker_tok_out,
        spent_tokens=summary.spent_tokens,
        spent_usd=summary.spent_usd,
    )
    requests = [AppendRequest(stream, 0, capture_events)] if capture_events else []
    return requests, ev.CellRecovered(
        attempt=attempt,
        store_path=str(db_path),
        store_available=captures is not None,
        gap=gap,
        spend=spend,
    )


def result_json(
    state: CellState, ingested: Sequence[Recorded | Event], recovered: ev.CellRecovered
) -> dict[str, Any]:
    """The seed's SupervisorArmResult (minus ``ws``), from events only."""
    summary = figures.summarize(ingested)
    verified = state.verified
    prov = state.provenance
    sp = recovered.spend
    return {
        "arm": state.spec.arm.name,
        "iid": state.spec.instance.instance_id,
        "driver_rc": state.run_rc,
        "wall_s": round(state.wall_s) if state.wall_s is not None else None,
        "patch_lines": verified.patch_lines if verified else None,
        "verify_rc": verified.verify_rc if verified else None,
        "verify_pass": verified.verify_pass if verified else None,
        "sup_status": summary.status,
        "sup_verdict": summary.verdict,
        "delivered": summary.delivered,
        "spentTokens": summary.spent_tokens,
        "spentUsd": summary.spent_usd,
        "spawned": summary.spawned,
        "workers": summary.workers,
        "settled": summary.settled,
        "subtasks": summary.subtasks,
        "patchPath": verified.patch_path if verified else None,
        "provenance": (
            {"repo": prov.repo, "commit": prov.commit, "envKnobs": prov.env_knobs} if prov else None
        ),
        "recoveredSpend": {
            "workerTokJournal": sp.worker_tok_journal,
            "workerCwds": sp.worker_cwds,
            "workerSessions": sp.worker_sessions,
            "workerTokSqlite": sp.worker_tok_sqlite,
            "workerTokIn": sp.worker_tok_in,
            "workerTokOut": sp.worker_tok_out,
        },
    }
