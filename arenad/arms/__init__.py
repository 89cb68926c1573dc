"""Arms: how one kind of agent is launched in a materialized workspace, observed, judged
scorable and recovered (:mod:`arenad.arms.base`). Arms know nothing of the log or the
ledger; the cell runner turns what they return into events.

The registry below maps each arm spec type (``events.specs``) to its arm: adding a kind
is a new module and one row here, never an edit of the base, plus what the kind is made
of elsewhere: its spec (``events.specs``), its campaign table (``arenad.campaign.load``)
and its row in :mod:`arenad.cell.kinds`, where the read side looks it up. Nothing outside
this package and that table branches on a kind (``tests/cell/test_fourth_kind.py``).
"""

from __future__ import annotations

from arenad.arms.base import (
    AgentCommand,
    Arm,
    ArmContext,
    Launch,
    Outcome,
    ProvenanceError,
    launch_for,
)
from arenad.arms.command import CommandArmRunner
from arenad.arms.solo import SoloArmRunner
from arenad.arms.supervisor import SupervisorArmRunner
from arenad.runs.executor import Tools
from events.base import Event
from events.specs import ArmSpec, CommandArm, SoloArm, SupervisorArm

ARMS: dict[type[ArmSpec], type[Arm]] = {
    SoloArm: SoloArmRunner,
    CommandArm: CommandArmRunner,
    SupervisorArm: SupervisorArmRunner,
}


def arm_for(spec: ArmSpec) -> Arm:
    try:
        kind = ARMS[type(spec)]
    except KeyError:
        raise TypeError(f"unknown arm spec {type(spec).__name__}") from None
    return kind(spec)  # type: ignore[call-arg]  # each arm takes its own spec type


def prepare_step(tools: Tools, spec: ArmSpec, ctx: ArmContext) -> Launch:
    """Site step: write the arm's inputs into the run dir and say how to start it, confined
    to the cell's sandbox (built here, so a site on another machine builds its own)."""
    return launch_for(ctx, arm_for(spec).prepare(ctx))


def before_start_step(tools: Tools, spec: ArmSpec, ctx: ArmContext) -> list[Event]:
    """Site step: the facts recorded with the run's start."""
    return arm_for(spec).before_start(ctx)


__all__ = [
    "ARMS",
    "AgentCommand",
    "Arm",
    "ArmContext",
    "Launch",
    "Outcome",
    "ProvenanceError",
    "arm_for",
    "before_start_step",
    "launch_for",
    "prepare_step",
]
