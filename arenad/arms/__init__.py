"""Arms: how one kind of agent is launched in a materialized workspace and how its
outcome is judged scorable. Arms know nothing of the log or the ledger; the cell
runner turns what they return into events."""

from arenad.arms.base import Arm, ArmContext, Launch, arm_for

__all__ = ["Arm", "ArmContext", "Launch", "arm_for"]
