"""The cell state machine.

    submitted -> materialized -> running -> completed | timedOut | aborted
              -> verified -> recovered                 (terminal)
    any non-terminal state -> failed                   (terminal)
    recovered | failed | materialized -> submitted     (a new attempt, attempt + 1)
    materialized -> materialized                       (re-materialized after a crash)

The transitions are one table (``TRANSITIONS``); facts that do not move the
state (an abort request, a verdict, a hang) are allowed per state by
``SIDE_EVENTS``. ``apply`` is pure: the event's time arrives as an argument.
"""

from __future__ import annotations

from enum import StrEnum

import msgspec

from arenad.errors import IllegalTransition
from events import cell as ev
from events.base import Event, Recorded
from events.codec import event_tag
from events.specs import CellSpec


class CellStatus(StrEnum):
    SUBMITTED = "submitted"
    MATERIALIZED = "materialized"
    RUNNING = "running"
    COMPLETED = "completed"
    TIMED_OUT = "timedOut"
    ABORTED = "aborted"
    VERIFIED = "verified"
    RECOVERED = "recovered"
    FAILED = "failed"


S = CellStatus
TERMINAL: frozenset[CellStatus] = frozenset({S.RECOVERED, S.FAILED})
RUN_ENDED: frozenset[CellStatus] = frozenset({S.COMPLETED, S.TIMED_OUT, S.ABORTED})
_NON_TERMINAL = frozenset(set(S) - TERMINAL)

# (state before, event tag) -> state after. None = the stream does not exist yet.
TRANSITIONS: dict[tuple[CellStatus | None, str], CellStatus] = {
    (None, "cell.submitted"): S.SUBMITTED,
    (S.SUBMITTED, "cell.materialized"): S.MATERIALIZED,
    # Re-materialized in place: a daemon died between materializing and starting the run,
    # so the workspace is made afresh; the attempt (one agent run) is still unused.
    (S.MATERIALIZED, "cell.materialized"): S.MATERIALIZED,
    (S.MATERIALIZED, "run.started"): S.RUNNING,
    (S.RUNNING, "run.completed"): S.COMPLETED,
    (S.RUNNING, "run.timed_out"): S.TIMED_OUT,
    (S.RUNNING, "run.aborted"): S.ABORTED,
    (S.COMPLETED, "cell.verified"): S.VERIFIED,
    (S.TIMED_OUT, "cell.verified"): S.VERIFIED,
    (S.ABORTED, "cell.verified"): S.VERIFIED,
    (S.VERIFIED, "cell.recovered"): S.RECOVERED,
    **{(state, "cell.failed"): S.FAILED for state in _NON_TERMINAL},
    # A new attempt: after an end (or, in logs of arenad before re-materializing in
    # place, when a daemon died between materializing and starting).
    (S.RECOVERED, "cell.retried"): S.SUBMITTED,
    (S.FAILED, "cell.retried"): S.SUBMITTED,
    (S.MATERIALIZED, "cell.retried"): S.SUBMITTED,
}

# Events that record a fact without moving the state, and where they may occur.
SIDE_EVENTS: dict[str, frozenset[CellStatus]] = {
    "cell.abort-requested": _NON_TERMINAL,
    "cell.paused": frozenset(S),
    "cell.resumed": frozenset(S),
    "cell.hang-detected": frozenset({S.RUNNING}),
    "run.adopted": frozenset({S.RUNNING}),
    "cell.provenance": frozenset({S.SUBMITTED, S.MATERIALIZED, S.RUNNING}),
    "cell.supervisor-outcome": RUN_ENDED,
    "run.output-capped": RUN_ENDED,
    "cell.judge-verdict": frozenset({S.VERIFIED, S.RECOVERED}),
    # What verify saw (the patch, the log's end), appended right after the CellVerified.
    "cell.patch-captured": frozenset({S.VERIFIED}),
    # A recovered attempt re-graded on its stored patch (``arenad reverify``): the new
    # verdict (a CellVerified: it replaces ``verified``), its log's end, a new judge verdict.
    "cell.verify-log-captured": frozenset({S.VERIFIED, S.RECOVERED}),
    "cell.reverified": frozenset({S.RECOVERED}),
    # An interrupted run's spend, captured before its failure is recorded (never verified:
    # ``apply`` allows it only after an interruption).
    "cell.recovered": frozenset({S.ABORTED}),
}


class CellState(msgspec.Struct, frozen=True, kw_only=True):
    cell_id: str
    spec: CellSpec
    status: CellStatus
    attempt: int
    version: int = 0
    paused: bool = False
    abort_requested: bool = False
    abort_reason: str | None = None
    submitted_at_ms: int
    updated_at_ms: int
    # The current attempt's facts; reset when a new attempt opens.
    run_dir: str | None = None
    workspace: str | None = None
    head: str | None = None
    materialized: ev.CellMaterialized | None = None
    run: ev.RunStarted | None = None
    run_rc: int | None = None
    wall_s: float | None = None
    # How the current attempt's run ended (kept past verify and recovery, for selecting
    # cells by it); None: not ended, or folded by an arenad before it was kept.
    run_end: CellStatus | None = None
    # The cell's limit that ended the current attempt's run ("memory", "pids", "disk":
    # RunAborted.limit); None: none did.
    run_limit: str | None = None
    ended_at_ms: int | None = None
    # The attempt's newest verdict (a reverify's replaces the run's).
    verified: ev.CellVerified | ev.CellReverified | None = None
    recovered: ev.CellRecovered | None = None
    failed: ev.CellFailed | None = None
    provenance: ev.ProvenanceRecorded | None = None
    supervisor: ev.SupervisorOutcome | None = None
    verdict: ev.JudgeVerdictRecorded | None = None
    hangs: int = 0
    # The current attempt's output files that the wrapper's cap cut (RunOutputCapped).
    capped_outputs: tuple[str, ...] = ()
    # Attempts that ended in an infrastructure failure (for the retry policy).
    infra_failures: int = 0
    # A policy retry's backoff: the current attempt starts no earlier than this.
    not_before_ms: int | None = None
    # Why the attempt before this one failed (its CellFailed error), if it did.
    previous_failure: str | None = None
    # Who interrupted the current attempt's run, when it was not the agent's doing
    # (interrupt_cause): "operator", "shutdown" or "infrastructure"; None: not interrupted.
    # An interrupted run is never scored and never in a report's denominator.
    interrupted: str | None = None

    @property
    def terminal(self) -> bool:
        return self.status in TERMINAL


# The daemon's reason for the runs it aborts as it stops, in logs from before RunAborted
# had a cause.
SHUTDOWN_REASON = "daemon shutting down"


def interrupt_cause(event: ev.RunAborted, *, abort_requested: bool = False) -> str | None:
    """Who interrupted an aborted run, when the agent did not bring it on itself; None when
    the abort is the agent's result (a hang cut short).

    A RunAborted recorded before causes were is read from the log: after an operator's
    abort request (``abort_requested``), the operator's; the daemon's shutdown reason; or
    no exit code at all (its wrapper or node was lost: nothing the agent returned) for the
    infrastructure. Anything else stays the agent's, as it was."""
    if event.cause is not None:
        return None if event.cause == "agent" else event.cause
    if abort_requested:
        return "operator"
    if event.reason == SHUTDOWN_REASON:
        return "shutdown"
    if event.rc is None:
        return "infrastructure"
    return None


def next_status(status: CellStatus | None, tag: str) -> CellStatus | None:
    """The state after ``tag``; the same state for a side event; None if illegal."""
    after = TRANSITIONS.get((status, tag))
    if after is not None:
        return after
    if status is not None and status in SIDE_EVENTS.get(tag, frozenset()):
        return status
    return None


def refusal(state: CellState, tag: str) -> str | None:
    """Why ``tag`` is refused in ``state`` although its status allows it; None if it is not.

    The one rule the status table cannot state, because it needs a fact of the attempt:
    an aborted run's spend is recovered without a verdict only when the run was
    interrupted (an agent's own abort is verified first). Stated here once, for ``apply``
    and for whoever asks whether an event is legal before appending it."""
    if tag == "cell.recovered" and state.status == S.ABORTED and state.interrupted is None:
        return "a run that was not interrupted"
    return None


def apply(state: CellState | None, event: Event, at_ms: int) -> CellState:
    """Fold one event into a cell's state. Raises IllegalTransition, never guesses."""
    tag = event_tag(event)
    before = state.status if state is not None else None
    after = next_status(before, tag)
    if after is None:
        raise IllegalTransition(before, tag, state.cell_id if state else "")
    if isinstance(event, ev.CellSubmitted):
        if event.attempt < 1:
            raise IllegalTransition(before, f"{tag} (attempt {event.attempt})", event.spec.cell_id)
        return CellState(
            cell_id=event.spec.cell_id,
            spec=event.spec,
            status=after,
            attempt=event.attempt,
            version=1,
            submitted_at_ms=at_ms,
            updated_at_ms=at_ms,
        )
    assert state is not None
    attempt = getattr(event, "attempt", None)
    if isinstance(event, ev.CellRetried):
        if event.attempt != state.attempt + 1:
            raise IllegalTransition(before, f"{tag} (attempt {event.attempt})", state.cell_id)
    elif attempt is not None and attempt != state.attempt:
        raise IllegalTransition(
            before, f"{tag} (attempt {attempt}, current {state.attempt})", state.cell_id
        )
    why = refusal(state, tag)
    if why is not None:
        raise IllegalTransition(before, f"{tag} ({why})", state.cell_id)
    changes = _changes(state, event, at_ms)
    return msgspec.structs.replace(
        state, status=after, version=state.version + 1, updated_at_ms=at_ms, **changes
    )


def _changes(state: CellState, event: Event, at_ms: int) -> dict[str, object]:
    match event:
        case ev.CellMaterialized():
            return {
                "run_dir": event.run_dir,
                "workspace": event.workspace,
                "head": event.head,
                "materialized": event,
            }
        case ev.RunStarted():
            return {"run": event}
        case ev.RunCompleted() | ev.RunTimedOut() | ev.RunAborted():
            end = (
                S.COMPLETED
                if isinstance(event, ev.RunCompleted)
                else S.TIMED_OUT
                if isinstance(event, ev.RunTimedOut)
                else S.ABORTED
            )
            return {
                "run_rc": event.rc,
                "wall_s": event.wall_s,
                "ended_at_ms": at_ms,
                "run_end": end,
                "run_limit": event.limit if isinstance(event, ev.RunAborted) else None,
                "interrupted": (
                    interrupt_cause(event, abort_requested=state.abort_requested)
                    if isinstance(event, ev.RunAborted)
                    else None
                ),
            }
        case ev.CellVerified():
            return {"verified": event}
        case ev.CellRecovered():
            return {"recovered": event, "abort_requested": False}
        case ev.CellFailed():
            infra = state.infra_failures + (event.classification == "infrastructure")
            ended = state.ended_at_ms if state.ended_at_ms is not None else at_ms
            return {
                "failed": event,
                "infra_failures": infra,
                "ended_at_ms": ended,
                "abort_requested": False,
            }
        case ev.CellRetried():
            return {
                "attempt": event.attempt,
                "previous_failure": state.failed.error if state.failed is not None else None,
                "not_before_ms": event.not_before_ms,
                "run_dir": None,
                "workspace": None,
                "head": None,
                "materialized": None,
                "run": None,
                "run_rc": None,
                "wall_s": None,
                "run_end": None,
                "run_limit": None,
                "ended_at_ms": None,
                "verified": None,
                "recovered": None,
                "failed": None,
                "provenance": None,
                "supervisor": None,
                "verdict": None,
                "abort_requested": False,
                "abort_reason": None,
                "hangs": 0,
                "capped_outputs": (),
                "interrupted": None,
            }
        case ev.AbortRequested():
            return {"abort_requested": True, "abort_reason": event.reason}
        case ev.CellPaused():
            return {"paused": True}
        case ev.CellResumed():
            return {"paused": False}
        case ev.HangDetected():
            return {"hangs": state.hangs + 1}
        case ev.RunOutputCapped():
            return {"capped_outputs": (*state.capped_outputs, event.path)}
        case ev.ProvenanceRecorded():
            return {"provenance": event}
        case ev.SupervisorOutcome():
            return {"supervisor": event}
        case ev.JudgeVerdictRecorded():
            return {"verdict": event}
    return {}


def fold(events: list[Recorded] | list[tuple[Event, int]]) -> CellState | None:
    """Fold a whole stream (Recorded, or (event, at_ms) pairs) from the beginning."""
    state: CellState | None = None
    for item in events:
        if isinstance(item, Recorded):
            state = apply(state, item.event, item.recorded_at_ms)
        else:
            state = apply(state, item[0], item[1])
    return state
