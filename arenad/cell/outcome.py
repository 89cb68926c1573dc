"""A cell's outcome: what its current attempt came to, from its folded state alone.

The report's rule (:mod:`arenad.report.project` states the decisions), here below both the
report and the read models so they classify a cell the same way: the report folds the
log, the ``arm_tallies`` read model keeps a running count per outcome in the append's
transaction, and the two must agree.
"""

from __future__ import annotations

from typing import Literal

from arenad.cell.machine import CellState

Outcome = Literal[
    "resolved", "unresolved", "infra_failed", "operator_failed", "interrupted", "pending"
]
OUTCOMES: tuple[Outcome, ...] = (
    "resolved",
    "unresolved",
    "infra_failed",
    "operator_failed",
    "interrupted",
    "pending",
)
DECIDED: frozenset[str] = frozenset({"resolved", "unresolved"})


def outcome_of(state: CellState) -> tuple[Outcome, bool]:
    """(the outcome, whether the attempt was scored). Pure."""
    if state.interrupted is not None:
        # Before the interruption was recorded as such, such a run was verified (unscored):
        # it is still not the agent's result.
        return "interrupted", False
    verified = state.verified
    if verified is not None:
        if not verified.scored:
            return "unresolved", False
        verdict = state.verdict
        if verdict is not None and verdict.resolved is not None:
            return ("resolved" if verdict.resolved else "unresolved"), True
        return ("resolved" if verified.verify_pass is True else "unresolved"), True
    failed = state.failed
    if failed is not None:
        match failed.classification:
            case "infrastructure":
                return "infra_failed", False
            case "operator":
                return "operator_failed", False
            case "agent":
                return "unresolved", False
    return "pending", False
