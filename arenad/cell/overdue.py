"""How long each daemon step may take, and which cells are overdue in a transient state.

The daemon steps a cell goes through each have a limit (:data:`STEP_LIMITS_S`). They are
not deadlines: a step past its limit is not stopped (the run's own deadline and the
verify timeout are what stop things); it is *reported*, so a stall is never silent:

- the daemon logs a warning naming the cell and the step when a step passes its limit,
  and again each time it has taken twice as long as at the last warning
  (:mod:`arenad.daemon.stalls`);
- ``arenad status`` lists the cells that have been in a transient state longer than its
  steps' limits allow (:func:`overdue`), whether or not a daemon is running.

:func:`overdue` is a pure rule over a cell's state and a time passed in, never a clock:
``status`` passes the time it was asked at (taken at the edge, by the CLI; ``--as-of``
pins it), so the same log and the same time give the same answer. Against the last
event's time instead, a daemon that stalled and recorded nothing would show nothing.
"""

from __future__ import annotations

import msgspec

from arenad.cell.machine import CellState, CellStatus

S = CellStatus

# Seconds each step may take before it is reported (see the module docstring). Verify and
# the judge add their own configured timeout; the run is bounded by its deadline.
STEP_LIMITS_S: dict[str, float] = {
    # A git clone or copy of the workspace, the run dir, the cell's environment.
    "materialize": 300.0,
    # Writing the arm's inputs and the wrapper's fork by the launcher (milliseconds).
    "spawn": 60.0,
    # git add -A + diff of the workspace.
    "patch": 120.0,
    # Beyond the instance's verify_timeout_s (the command's own bound).
    "verify": 60.0,
    # Beyond the judge's own timeout.
    "judge": 60.0,
    # Reading the agent's store into captures.
    "capture": 120.0,
    # One append to the log (SQLite waits up to its busy timeout, 10 s, for the lock).
    "append": 30.0,
    # Beyond the run's recorded deadline plus its kill grace.
    "run": 60.0,
}


class Overdue(msgspec.Struct, frozen=True, kw_only=True):
    cell_id: str
    state: str
    # How long the cell has been in its state, and how long its steps may take.
    for_s: float
    limit_s: float
    # What should have moved it on.
    waiting_for: str


def _limit(*steps: str) -> float:
    return sum(STEP_LIMITS_S[s] for s in steps)


def overdue(state: CellState, now_ms: int) -> Overdue | None:
    """The cell, if it has been in a transient state longer than its steps may take at
    ``now_ms``; None when it is on time, waiting for a slot, paused, or terminal."""
    if state.terminal or state.paused:
        return None
    since_ms: int
    match state.status:
        case S.MATERIALIZED:
            since_ms, limit_s, what = state.updated_at_ms, _limit("spawn", "append"), "spawn"
        case S.RUNNING:
            run = state.run
            if run is None:
                return None
            since_ms = run.started_at_ms
            bound_ms = run.deadline_ms + round((run.kill_grace_s + _limit("run")) * 1000)
            limit_s = (bound_ms - since_ms) / 1000
            what = "the run's end (its deadline has passed)"
        case S.COMPLETED | S.TIMED_OUT | S.ABORTED:
            since_ms = state.ended_at_ms if state.ended_at_ms is not None else state.updated_at_ms
            limit_s = state.spec.verify_timeout_s + _limit(
                "patch", "verify", "capture", "append", "append"
            )
            if state.spec.judge is not None:
                limit_s += state.spec.judge.timeout_s + _limit("judge")
            what = "patch, verify and recovery"
        case S.VERIFIED:
            since_ms, limit_s, what = state.updated_at_ms, _limit("capture", "append"), "recovery"
        case _:
            # Submitted: waiting for a slot is not a stall.
            return None
    for_s = (now_ms - since_ms) / 1000
    if for_s <= limit_s:
        return None
    return Overdue(
        cell_id=state.cell_id,
        state=str(state.status),
        for_s=round(for_s, 1),
        limit_s=round(limit_s, 1),
        waiting_for=what,
    )
