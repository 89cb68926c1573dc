"""What the read side knows of each arm kind: one row per kind, pure data.

The folds (spend, budget, status rows) and the campaign file look a kind up here instead
of comparing its name, so a new arm kind is a module in :mod:`arenad.arms` and one row
below. Importable without the runtime (nothing here starts a process).
"""

from __future__ import annotations

from typing import Literal, NamedTuple

__all__ = ["KINDS", "ArmKind", "kind_of"]


class ArmKind(NamedTuple):
    # Its runs report what they cost as they go (opencode's stream and store; the
    # supervisor's state.json and journal): its live spend counts against a cap.
    reports_cost: bool
    # Where a run's cost of record comes from: the agent's store ("store"), the driver's
    # own total ("driver"), or nowhere (a command runs anything: "none").
    cost_of_record: Literal["store", "driver", "none"]
    # Its status rows carry the driver's and the workers' costs under their names.
    driver_figures: bool
    # Its status rows carry the opencode usage figures (steps, largest context, ...).
    usage_figures: bool


KINDS: dict[str, ArmKind] = {
    "solo": ArmKind(
        reports_cost=True, cost_of_record="store", driver_figures=False, usage_figures=True
    ),
    "supervisor": ArmKind(
        reports_cost=True, cost_of_record="driver", driver_figures=True, usage_figures=False
    ),
    "command": ArmKind(
        reports_cost=False, cost_of_record="none", driver_figures=False, usage_figures=False
    ),
}

# A kind this version does not know (a log written by a newer one): its store is read,
# nothing else is assumed.
_UNKNOWN = ArmKind(
    reports_cost=False, cost_of_record="store", driver_figures=False, usage_figures=False
)


def kind_of(tag: str) -> ArmKind:
    """The row of the arm kind tagged ``tag`` (the arm spec's ``kind``)."""
    return KINDS.get(tag, _UNKNOWN)
