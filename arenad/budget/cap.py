"""A campaign's spend cap: a pure fold of its stream (``campaign/<name>``), and the rule.

    campaign.submitted      the first one with a budget sets the cap (and abort_running)
    campaign.budget-set     an operator's new cap (``arenad set-budget``)
    campaign.budget-reached the daemon saw the spend reach the cap in force

The cap reached is recorded once per cap: ``reached`` holds the cap of the last
``budget-reached`` and is cleared when the cap changes, so raising it lets the daemon go on
(and, if the spend reaches the new cap too, record that once more). A daemon's
``--max-usd`` caps every campaign as well; the lower of the two is in force
(:func:`cap_in_force`).

The spend the cap is held against is :mod:`arenad.budget.spend`'s known spend: attempts whose cost
is unknown (a command arm) do not count, and are shown as unknown.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Literal

import msgspec

from events.base import Event, Recorded
from events.control import BudgetReached, BudgetSet, CampaignSubmitted

CapSource = Literal["campaign", "daemon"]


class CampaignBudget(msgspec.Struct, frozen=True, kw_only=True):
    name: str
    cap_usd: float | None = None
    abort_running: bool = False
    # The cap of the last budget-reached since the cap last changed.
    reached: float | None = None
    submitted_at_ms: int | None = None
    # Arm name -> kind, from the submissions (whether each arm can report cost).
    arm_kinds: dict[str, str] = msgspec.field(default_factory=dict)


def apply_budget(
    state: CampaignBudget | None, name: str, event: Event, at_ms: int
) -> CampaignBudget:
    state = state if state is not None else CampaignBudget(name=name)
    if isinstance(event, CampaignSubmitted):
        changes: dict[str, object] = {"arm_kinds": {**state.arm_kinds, **event.arm_kinds}}
        if state.submitted_at_ms is None:
            changes["submitted_at_ms"] = at_ms
            if event.budget_usd is not None:
                changes.update(cap_usd=event.budget_usd, abort_running=event.abort_running)
        return msgspec.structs.replace(state, **changes)
    if isinstance(event, BudgetSet):
        abort = state.abort_running if event.abort_running is None else event.abort_running
        return msgspec.structs.replace(
            state, cap_usd=event.max_usd, abort_running=abort, reached=None
        )
    if isinstance(event, BudgetReached):
        return msgspec.structs.replace(state, reached=event.max_usd)
    return state


def fold_budget(name: str, events: Iterable[Recorded]) -> CampaignBudget:
    state = CampaignBudget(name=name)
    for r in events:
        state = apply_budget(state, name, r.event, r.recorded_at_ms)
    return state


def cap_in_force(
    budget: CampaignBudget | None, daemon_max_usd: float | None
) -> tuple[float, CapSource] | None:
    """The lower of the campaign's cap and the daemon's, and whose it is (None: no cap)."""
    own = budget.cap_usd if budget is not None else None
    if own is None and daemon_max_usd is None:
        return None
    if daemon_max_usd is not None and (own is None or daemon_max_usd < own):
        return daemon_max_usd, "daemon"
    assert own is not None
    return own, "campaign"


def is_reached(spent_usd: float, cap_usd: float) -> bool:
    """Reached means spent at least the cap: the next cell would spend past it."""
    return spent_usd >= cap_usd
