"""Reading what the campaign folds need from the log (the I/O half of :mod:`arenad.budget.spend`
and :mod:`arenad.budget.cap`, which are pure).

Spend: one tag-filtered pass over the log (runs starting and ending, recoveries, the
campaigns' arm kinds: never the bulk of ingested lines), then the ingest streams of the
attempts that started and were not recovered, whose cost is only in their lines.
Budgets: the campaign streams, which are short.

:func:`campaign_spend` answers the same from the spend read model where the store keeps
it (:mod:`arenad.readmodels.spend`): the recovered attempts' shares summed in the append's
transaction, and only the attempts still open folded here.
"""

from __future__ import annotations

from arenad.budget.cap import CampaignBudget, fold_budget
from arenad.budget.spend import SPEND_TAGS, CampaignSpend, SpendFold, units, usd
from arenad.readmodels import spend as model
from arenad.store.base import EventStore
from arenad.store.sqlite import SqliteEventStore
from events.streams import CAMPAIGN, cell_of, ingest_stream

_BATCH = 500


async def load_spend(store: EventStore, fold: SpendFold | None = None) -> SpendFold:
    fold = fold if fold is not None else SpendFold()
    async for batch in store.read_batches(0, tags=SPEND_TAGS):
        for r in batch:
            fold.apply(r.stream, r.event)
    # A batch of ingest streams per read, not a query per attempt: at 100 000 cells the
    # running and failed ones were 6 000 round trips through the reader's thread.
    streams = [ingest_stream(cell_id, attempt) for cell_id, attempt in fold.unrecovered()]
    await _feed(store, fold, streams)
    return fold


async def _feed(store: EventStore, fold: SpendFold, streams: list[str]) -> None:
    """Fold ``streams``' events, a batch of streams per read."""
    for i in range(0, len(streams), _BATCH):
        for stream, records in (await store.read_stream_groups(streams[i : i + _BATCH])).items():
            for r in records:
                fold.apply(stream, r.event)


async def campaign_spend(store: EventStore) -> dict[str, CampaignSpend]:
    """Each campaign's spend (a campaign not named: nothing spent). The fold of the log's
    runs, from the spend read model where the store keeps a complete one."""
    if isinstance(store, SqliteEventStore) and await model.is_complete(store.connection):
        return await _from_model(store)
    fold = await load_spend(store)
    return {name: fold.campaign(name) for name in fold.campaigns()}


async def _from_model(store: SqliteEventStore) -> dict[str, CampaignSpend]:
    finals = await model.finals(store.connection)
    open_ = set(await model.open_attempts(store.connection))
    # The open attempts, folded as load_spend folds them: their campaigns' arm kinds, their
    # own events (not their cells' other attempts, counted in the finals), their lines.
    fold = SpendFold()
    await _feed(store, fold, await store.streams(CAMPAIGN))
    cells, lines = await model.open_events(store.connection)
    for r in cells:
        if (cell_of(r.stream), getattr(r.event, "attempt", None)) in open_:
            fold.apply(r.stream, r.event)
    fold.apply_all(lines)
    out = {}
    for name in sorted(set(finals) | set(fold.campaigns())):
        live = fold.campaign(name)
        final = finals.get(name) or model.CampaignFinal(attempts=0, cost_units=0, unknown=0)
        out[name] = CampaignSpend(
            campaign=name,
            # Summed in pico-USD, as the fold sums (exact in any order).
            spent_usd=usd(final.cost_units + units(live.spent_usd)),
            recovered_usd=usd(final.cost_units + units(live.recovered_usd)),
            live_usd=live.live_usd,
            attempts=final.attempts + live.attempts,
            running=live.running,
            unknown_attempts=final.unknown + live.unknown_attempts,
        )
    return out


async def load_budgets(store: EventStore) -> dict[str, CampaignBudget]:
    budgets: dict[str, CampaignBudget] = {}
    for stream in await store.streams(CAMPAIGN):
        name = stream[len(CAMPAIGN) :]
        budgets[name] = fold_budget(name, await store.read_stream(stream))
    return budgets
