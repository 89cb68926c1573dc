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

from collections.abc import Sequence
from pathlib import Path
from typing import Literal

from arenad.cell.kinds import kind_of
from arenad.recovery.bounds import (
    MAX_ATTEMPT_TOKENS,
    MAX_ATTEMPT_USD,
    MAX_REJECTED_KEPT,
    rejected,
)
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

COMMAND_STORE_GAP = (
    "a command arm's opencode store is written by the agent itself: its sessions are kept"
    " as evidence, its figures are not spend of record"
)


def spend_figures(
    captures: list[AgentSessionCaptured],
) -> tuple[ev.SpendFigures, list[ev.RejectedFigure]]:
    """Spend of every captured session: a private store holds only this cell's tree,
    and child (subagent) sessions are not rolled up by opencode, so they are summed. A
    figure some session holds out of bounds is unknown (None), with the values as read."""
    total: Spend = ZERO
    for capture in captures:
        total = total + session_spend(capture)
    unknown = set(total.unknown)
    found = list(total.rejected)
    for attr in ("usd", "tokens_input", "tokens_output", "tokens_reasoning"):
        value = getattr(total, attr)
        ceiling = MAX_ATTEMPT_USD if attr == "usd" else MAX_ATTEMPT_TOKENS
        if attr not in unknown and value > ceiling:
            unknown.add(attr)
            found.append(rejected("all sessions", attr, value, f"over {ceiling:g}", "store"))
    if len(found) > MAX_REJECTED_KEPT:
        more = len(found) - MAX_REJECTED_KEPT + 1
        found = [*found[: MAX_REJECTED_KEPT - 1], rejected("", "", more, "more", "store")]

    def known(attr: str, value: float) -> float | None:
        return None if attr in unknown else value

    usd = known("usd", total.usd)
    figures = ev.SpendFigures(
        sessions=len(captures),
        tokens_in=_int(known("tokens_input", total.tokens_input)),
        tokens_out=_int(known("tokens_output", total.tokens_output)),
        tokens_reasoning=_int(known("tokens_reasoning", total.tokens_reasoning)),
        cache_read=_int(known("tokens_cache_read", total.tokens_cache_read)),
        cache_write=_int(known("tokens_cache_write", total.tokens_cache_write)),
        cost_usd=round(usd, 10) if usd is not None else None,
    )
    return figures, found


def _int(value: float | None) -> int | None:
    return None if value is None else int(value)


def spend_gap(found: list[ev.RejectedFigure]) -> str | None:
    """The label of figures left unknown by values out of bounds (None: none were)."""
    if not found:
        return None
    fields = sorted({r.field for r in found if r.field})
    return (
        f"{len(found)} figure(s) of the agent's store out of bounds ({', '.join(fields)}):"
        " their totals are unknown; the values as read are in `rejected`"
    )


def recover_tree(
    tools: Tools,
    db_path: str,
    cell_id: str,
    attempt: int,
    purpose: Literal["solo", "command"],
    usage: ev.SoloUsage | None,
    confine: str | None = None,
    usage_rejected: Sequence[ev.RejectedFigure] = (),
) -> tuple[list[AppendRequest], ev.CellRecovered]:
    """The whole session tree of the cell's private store, and the CellRecovered summing
    it (a solo or command arm: its store holds only this cell's sessions); ``purpose``: the
    arm's kind tag, which the sessions are captured under; ``confine``: the run dir the
    store must really be inside; ``usage_rejected``: the stream's figures out of bounds
    (``usage`` is None then), kept with the store's.

    Where the kind's store is the agent's own writing (its row's ``store_figures`` is
    "evidence": a command arm may write any ``opencode.db``), its sessions are captured as
    evidence, but its figures are never spend of record. A capture that fails is a gap on
    the CellRecovered, never an exception (the verdict it joins is recorded either way)."""
    stream = capture_stream(cell_id, attempt)
    path = Path(db_path)
    captured: list[AgentSessionCaptured] | StoreUnavailable
    evidence_only = kind_of(purpose).store_figures == "evidence"
    if evidence_only and not path.exists():
        # Any agent CLI: most keep no opencode store, so none is no failure to record
        # (issue 29: a capture.store-unavailable for every command cell). Its figures would
        # not be spend of record anyway.
        return [], ev.CellRecovered(
            attempt=attempt,
            store_path=None,
            store_available=False,
            gap="no opencode store: the command kept none (none is expected of a command arm)",
            spend=ev.SpendFigures(),
            usage=usage,
            spend_gap=COMMAND_STORE_GAP,
            rejected=list(usage_rejected),
        )
    if not path.exists():
        captured = StoreUnavailable(db_path, "the cell's opencode store does not exist")
    else:
        try:
            captured = capture_session_tree(path, None, attempt, purpose, confine)
        except Exception as exc:  # a bug or a store no reader foresaw: a gap, recorded
            captured = StoreUnavailable(db_path, f"the capture failed: {type(exc).__name__}: {exc}")
    if isinstance(captured, StoreUnavailable):
        return [AppendRequest(stream, 0, [captured.event(attempt)])], ev.CellRecovered(
            attempt=attempt,
            store_path=db_path,
            store_available=False,
            gap=captured.error,
            spend=ev.SpendFigures(),
            usage=usage,
            rejected=list(usage_rejected),
        )
    requests = [AppendRequest(stream, 0, list(captured))] if captured else []
    if evidence_only:
        return requests, ev.CellRecovered(
            attempt=attempt,
            store_path=db_path,
            store_available=True,
            spend=ev.SpendFigures(sessions=len(captured)),
            usage=usage,
            spend_gap=COMMAND_STORE_GAP,
            rejected=list(usage_rejected),
        )
    figures, found = spend_figures(captured)
    return requests, ev.CellRecovered(
        attempt=attempt,
        store_path=db_path,
        store_available=True,
        spend=figures,
        usage=usage,
        spend_gap=spend_gap(found),
        rejected=[*usage_rejected, *found],
    )


def capture_worker_sessions(
    tools: Tools, db_path: str, cwds: list[str], attempt: int, confine: str | None = None
) -> tuple[list[AgentSessionCaptured], list[str]] | StoreUnavailable:
    """The sessions whose directory is one of ``cwds`` (the reference's recoverSupSpend join),
    and the cwds no session matched; or the store's gap."""
    path = Path(db_path)
    if not path.exists():
        return StoreUnavailable(db_path, "the cell's opencode store does not exist")
    return capture_sessions_by_directory(path, cwds, attempt, confine)
