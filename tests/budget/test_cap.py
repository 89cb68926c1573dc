"""The budget fold: the first submission's cap, an operator's new cap, reached once per cap."""

from __future__ import annotations

from arenad.budget.cap import CampaignBudget, cap_in_force, fold_budget, is_reached
from events.base import Event, Recorded
from events.control import BudgetReached, BudgetSet, CampaignSubmitted


def rec(events: list[Event]) -> list[Recorded]:
    return [Recorded(n + 1, "campaign/c", n + 1, "x", 1, 1000 + n, e) for n, e in enumerate(events)]


def submitted(budget: float | None, abort: bool = False) -> CampaignSubmitted:
    return CampaignSubmitted(
        name="c",
        source_path="/c.toml",
        spec_sha256="0",
        cell_ids=[],
        budget_usd=budget,
        abort_running=abort,
        arm_kinds={"SOLO": "solo"},
    )


def test_the_first_submission_sets_the_cap_and_set_budget_changes_it() -> None:
    state = fold_budget("c", rec([submitted(5.0, abort=True), submitted(9.0)]))
    assert (state.cap_usd, state.abort_running, state.submitted_at_ms) == (5.0, True, 1000)
    reached = BudgetReached(max_usd=5.0, spent_usd=5.5)
    state = fold_budget("c", rec([submitted(5.0), reached]))
    assert state.reached == 5.0
    # A raised cap clears "reached": reaching the new one is recorded once more.
    state = fold_budget("c", rec([submitted(5.0), reached, BudgetSet(max_usd=8.0)]))
    assert (state.cap_usd, state.reached, state.abort_running) == (8.0, None, False)
    state = fold_budget("c", rec([submitted(None), BudgetSet(max_usd=2.0, abort_running=True)]))
    assert (state.cap_usd, state.abort_running) == (2.0, True)


def test_the_lower_of_the_campaign_and_daemon_caps_is_in_force() -> None:
    own = CampaignBudget(name="c", cap_usd=5.0)
    assert cap_in_force(own, None) == (5.0, "campaign")
    assert cap_in_force(own, 3.0) == (3.0, "daemon")
    assert cap_in_force(own, 7.0) == (5.0, "campaign")
    assert cap_in_force(CampaignBudget(name="c"), 7.0) == (7.0, "daemon")
    assert cap_in_force(None, None) is None
    assert is_reached(5.0, 5.0) and not is_reached(4.99, 5.0)
