"""Reading what the campaign folds need from the log (the I/O half of :mod:`arenad.budget.spend`
and :mod:`arenad.budget.cap`, which are pure).

Spend: one tag-filtered pass over the log (runs starting and ending, recoveries, the
campaigns' arm kinds: never the bulk of ingested lines), then the ingest streams of the
attempts that started and were not recovered, whose cost is only in their lines.
Budgets: the campaign streams, which are short.
"""

from __future__ import annotations

from arenad.budget.cap import CampaignBudget, fold_budget
from arenad.budget.spend import SPEND_TAGS, SpendFold
from arenad.store.base import EventStore
from events.streams import CAMPAIGN, ingest_stream

_BATCH = 500


async def load_spend(store: EventStore, fold: SpendFold | None = None) -> SpendFold:
    fold = fold if fold is not None else SpendFold()
    async for batch in store.read_batches(0, tags=SPEND_TAGS):
        for r in batch:
            fold.apply(r.stream, r.event)
    # A batch of ingest streams per read, not a query per attempt: at 100 000 cells the
    # running and failed ones were 6 000 round trips through the reader's thread.
    streams = [ingest_stream(cell_id, attempt) for cell_id, attempt in fold.unrecovered()]
    for i in range(0, len(streams), _BATCH):
        for stream, records in (await store.read_stream_groups(streams[i : i + _BATCH])).items():
            for r in records:
                fold.apply(stream, r.event)
    return fold


async def load_budgets(store: EventStore) -> dict[str, CampaignBudget]:
    budgets: dict[str, CampaignBudget] = {}
    for stream in await store.streams(CAMPAIGN):
        name = stream[len(CAMPAIGN) :]
        budgets[name] = fold_budget(name, await store.read_stream(stream))
    return budgets
