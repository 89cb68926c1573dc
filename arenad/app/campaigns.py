"""`arenad campaigns` and `arenad set-budget`: each campaign's cells, spend and cap.

The figures are the folds' (:mod:`arenad.budget.spend`, :mod:`arenad.budget.cap`) over what the log
holds; the cells by state come from the cells read model. Unknown spend is counted apart,
never as 0.
"""

from __future__ import annotations

import math

import msgspec

from arenad.budget.cap import CampaignBudget, apply_budget, cap_in_force, is_reached
from arenad.budget.spend import CampaignSpend
from arenad.errors import UserError
from arenad.home import Home, open_store
from arenad.readmodels.campaigns import campaign_spend, load_budgets
from arenad.readmodels.view import cells_view
from arenad.store.base import EventStore
from events import streams
from events.control import BudgetSet


class CampaignFigures(msgspec.Struct, frozen=True, kw_only=True):
    name: str
    cells: dict[str, int]
    total: int
    spent_usd: float
    recovered_usd: float
    live_usd: float
    attempts: int
    running: int
    unknown_attempts: int
    cap_usd: float | None
    abort_running: bool
    # The spend is at the cap (no new cell of it starts).
    at_cap: bool
    submitted_at_ms: int | None
    last_event_ms: int | None


async def campaign_figures(store: EventStore, only: str | None = None) -> list[CampaignFigures]:
    budgets = await load_budgets(store)
    spend = await campaign_spend(store)
    by_state: dict[str, dict[str, int]] = {}
    last: dict[str, int] = {}
    for campaign, state, count, updated in await cells_view(store).campaign_counts():
        by_state.setdefault(campaign, {})[state] = count
        last[campaign] = max(last.get(campaign, 0), updated)
    for name in budgets:
        for r in await store.read_stream(streams.campaign_stream(name)):
            last[name] = max(last.get(name, 0), r.recorded_at_ms)
    out = []
    for name in sorted(set(budgets) | set(by_state)):
        if only is not None and name != only:
            continue
        budget = budgets.get(name) or CampaignBudget(name=name)
        figures = spend.get(name) or CampaignSpend(campaign=name)
        cap = cap_in_force(budget, None)
        cells = dict(sorted(by_state.get(name, {}).items()))
        out.append(
            CampaignFigures(
                name=name,
                cells=cells,
                total=sum(cells.values()),
                spent_usd=figures.spent_usd,
                recovered_usd=figures.recovered_usd,
                live_usd=figures.live_usd,
                attempts=figures.attempts,
                running=figures.running,
                unknown_attempts=figures.unknown_attempts,
                cap_usd=budget.cap_usd,
                abort_running=budget.abort_running,
                at_cap=cap is not None and is_reached(figures.spent_usd, cap[0]),
                submitted_at_ms=budget.submitted_at_ms,
                last_event_ms=last.get(name),
            )
        )
    return out


async def campaigns(home: Home) -> list[CampaignFigures]:
    async with open_store(home) as store:
        return await campaign_figures(store)


async def set_budget(
    home: Home, name: str, max_usd: float, abort_running: bool | None = None
) -> CampaignBudget:
    """Record a new spend cap for ``name``; a running daemon follows it at once."""
    if not (math.isfinite(max_usd) and max_usd > 0):
        raise UserError(f"set-budget: {max_usd} is not a finite number of USD > 0")
    async with open_store(home) as store:
        stream = streams.campaign_stream(name)
        version = await store.stream_version(stream)
        if version == 0:
            raise UserError(f"no campaign {name!r} in {home.db_path} (see `arenad campaigns`)")
        event = BudgetSet(max_usd=max_usd, abort_running=abort_running)
        budget = await load_budgets(store)
        # Expected version: a concurrent budget change is refused, not silently overwritten.
        recorded = await store.append(stream, version, [event])
        return apply_budget(budget.get(name), name, event, recorded[0].recorded_at_ms)


__all__ = ["CampaignFigures", "campaign_figures", "campaigns", "set_budget"]
