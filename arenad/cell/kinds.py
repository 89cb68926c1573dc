"""What the read side knows of each arm kind: one row per kind, pure data.

The folds (spend, budget, status rows), the campaign file and the recovery of a run's
store look a kind up here instead of comparing its name, so a new arm kind is a module in
:mod:`arenad.arms` and one row below. Importable without the runtime (nothing here starts
a process).
"""

from __future__ import annotations

from typing import Literal, NamedTuple

from events.specs import ArmSpec

__all__ = [
    "AGENT_SESSION_PURPOSES",
    "KINDS",
    "ArmKind",
    "harness_of",
    "kind_of",
    "kind_of_arm",
    "run_model",
    "tag_of",
]


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
    # The ledger's lines of an attempt: one agent line ("agent"), or a supervisor line and
    # a line per worker session ("supervisor").
    ledger: Literal["agent", "supervisor"]
    # The harness its agent (or supervisor) line names; ``{name}`` is the arm's name.
    harness: str
    # The arm spec's field naming the model its work runs on (a supervisor's workers', not
    # its driver's: the reference's ``resolvedModel``).
    model_field: str
    # Its ingested journal makes its ledger lines (read with the cell when projecting).
    journal_lines: bool
    # Recovery writes the reference's result.json into its run dir.
    result_document: bool
    # What the figures of the opencode store in its run dir are: its own agent's spend
    # ("spend": a missing store is a recorded gap), or the agent's own writing ("evidence":
    # a command runs any CLI, which may write any ``opencode.db``: its sessions are kept,
    # its figures are never spend of record, and none is no failure).
    store_figures: Literal["spend", "evidence"]
    # Its agent is pointed at the model gateway when the campaign has one (its [gateway]
    # applies); the others keep reaching their provider themselves.
    gateway: bool


KINDS: dict[str, ArmKind] = {
    "solo": ArmKind(
        reports_cost=True,
        cost_of_record="store",
        driver_figures=False,
        usage_figures=True,
        ledger="agent",
        harness="opencode",
        model_field="model",
        journal_lines=False,
        result_document=False,
        store_figures="spend",
        gateway=True,
    ),
    "supervisor": ArmKind(
        reports_cost=True,
        cost_of_record="driver",
        driver_figures=True,
        usage_figures=False,
        ledger="supervisor",
        harness="pi-loops",
        model_field="worker_model",
        journal_lines=True,
        result_document=True,
        store_figures="spend",
        # Its workers' opencode config names the gateway (issue 31).
        gateway=True,
    ),
    "command": ArmKind(
        reports_cost=False,
        cost_of_record="none",
        driver_figures=False,
        usage_figures=False,
        ledger="agent",
        harness="command:{name}",
        model_field="model",
        journal_lines=False,
        result_document=False,
        store_figures="evidence",
        # With uses_model: the conventional env variables name the gateway (issue 31).
        gateway=True,
    ),
}

# A kind this version does not know (a log written by a newer one): its store is read,
# nothing else is assumed.
_UNKNOWN = ArmKind(
    reports_cost=False,
    cost_of_record="store",
    driver_figures=False,
    usage_figures=False,
    ledger="agent",
    harness="{name}",
    model_field="model",
    journal_lines=False,
    result_document=False,
    store_figures="spend",
    gateway=False,
)

# The purposes of the store sessions that are an agent line's own (recovery names a run's
# sessions by the kind that made them; a supervisor's are its workers').
AGENT_SESSION_PURPOSES: frozenset[str] = frozenset(
    tag for tag, row in KINDS.items() if row.ledger == "agent"
)


def kind_of(tag: str) -> ArmKind:
    """The row of the arm kind tagged ``tag`` (the arm spec's ``kind``)."""
    return KINDS.get(tag, _UNKNOWN)


def tag_of(arm: ArmSpec) -> str:
    """The arm spec's kind tag (``kind = "..."`` in the campaign file)."""
    return str(arm.__struct_config__.tag)


def kind_of_arm(arm: ArmSpec) -> ArmKind:
    """The row of ``arm``'s kind."""
    return kind_of(tag_of(arm))


def harness_of(arm: ArmSpec) -> str:
    """The harness the arm's ledger line names."""
    return kind_of_arm(arm).harness.format(name=arm.name)


def run_model(arm: ArmSpec) -> str | None:
    """The ``provider/model`` the arm's work runs on, if the arm names one."""
    model = getattr(arm, kind_of_arm(arm).model_field, None)
    return model if isinstance(model, str) else None
