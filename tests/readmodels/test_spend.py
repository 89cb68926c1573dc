"""The spend read model (kept in the append's transaction) answers as the spend fold
over the whole log does: over random logs appended in random batches (retries whose
first attempt stays open, live lines of open and of recovered attempts, unknown costs,
supervisors' outcomes, campaigns with and without their arms' kinds), after `rebuild`,
and on a home made before its tables (which folds until `rebuild`)."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import tempfile
from pathlib import Path

import msgspec
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from arenad.budget.spend import CampaignSpend
from arenad.home import Home, open_store
from arenad.readmodels import spend as model
from arenad.readmodels.campaigns import campaign_spend, load_spend
from arenad.store.base import AppendRequest
from arenad.store.sqlite import SqliteEventStore
from events import cell as ev
from events.base import Event
from events.control import CampaignSubmitted
from events.ingest import LineIngested
from tests.events.samples import make_spec
from tests.report.arena_log import Run, Tick, run_events

RUNS: tuple[Run, ...] = ("pass", "fail", "timeout", "abort", "infra-verify")


def _line(cost: float, offset: int) -> LineIngested:
    raw = json.dumps({"type": "step_finish", "part": {"type": "step-finish", "cost": cost}})
    return LineIngested(
        source="stdout", path="oc.jsonl", offset=offset, length=len(raw), raw=raw,
        kind="step_finish",
    )  # fmt: skip


def _attempts(run: Run, retry: bool, cost: float | None, supervisor: bool) -> list[Event]:
    first: list[Event] = []
    if retry:  # attempt 1 ran and failed at verify: never recovered, open for good
        first = [
            *run_events(1, "infra-verify", wall_s=1.0, cost=0.0, tokens=(1, 1)),
            ev.CellRetried(attempt=2, reason="policy", requested_by="policy"),
        ]
    attempt = 2 if retry else 1
    events = run_events(attempt, run, wall_s=1.0, cost=0.5, tokens=(1, 1))
    if isinstance(events[-1], ev.CellRecovered):
        spend = msgspec.structs.replace(events[-1].spend, cost_usd=cost)
        events[-1] = msgspec.structs.replace(events[-1], spend=spend)
    if supervisor:  # its driver's own total: a supervisor's cost of record
        outcome = ev.SupervisorOutcome(
            attempt=attempt, sup_run_dir=None, status="done", verdict=None, delivered=True,
            spent_tokens=None, spent_usd=cost,
        )  # fmt: skip
        events.insert(3, outcome)
    return [*first, *events]


cells = st.lists(
    st.tuples(
        st.sampled_from(["a", "b"]),
        st.sampled_from(["i0", "i1", "i2"]),
        st.sampled_from(["ALPHA", "BETA", "SUP"]),
        st.integers(0, 2),
        st.sampled_from(RUNS),
        st.booleans(),
        st.sampled_from([None, 0.1, 0.25, 1e-7, 3.3333]),
        st.integers(0, 12),
        st.lists(st.sampled_from([0.01, 0.2, 1e-6]), max_size=3),
    ),
    max_size=14,
    unique_by=lambda c: c[:4],
)


def _requests(drawn: list[tuple[object, ...]], split: int) -> list[list[AppendRequest]]:
    """Campaign a's submission (its arms' kinds: ALPHA reports cost, BETA cannot; b has
    none), each cell's prefix of a scenario in two parts, each of its attempts' lines;
    grouped into transactions of ``split`` requests."""
    kinds = {"ALPHA": "solo", "BETA": "command", "SUP": "supervisor"}
    submitted = CampaignSubmitted(
        name="a", source_path="/a.toml", spec_sha256="0", cell_ids=[], arm_kinds=kinds
    )
    first: list[AppendRequest] = [AppendRequest("campaign/a", 0, [submitted])]
    second: list[AppendRequest] = []
    for campaign, iid, arm, rep, run, retry, cost, cut, costs in drawn:
        sup = arm == "SUP"
        spec = make_spec(
            campaign=str(campaign), instance_id=str(iid), arm=str(arm), rep=int(rep),  # type: ignore[call-overload]
            supervisor=sup,
        )  # fmt: skip
        events: list[Event] = [
            ev.CellSubmitted(spec=spec),
            *_attempts(run, bool(retry), cost, sup),  # type: ignore[arg-type]
        ][: 1 + int(cut)]  # type: ignore[call-overload]
        half = max(1, len(events) // 2)
        first.append(AppendRequest(f"cell/{spec.cell_id}", 0, events[:half]))
        if events[half:]:
            second.append(AppendRequest(f"cell/{spec.cell_id}", half, events[half:]))
        for attempt in (1, 2):
            lines = [_line(c, i) for i, c in enumerate(costs)]  # type: ignore[attr-defined]
            if lines:
                second.append(AppendRequest(f"ingest/{spec.cell_id}/{attempt}", 0, lines))
    ordered = first + second
    return [ordered[i : i + split] for i in range(0, len(ordered), split)]


async def _folded(store: SqliteEventStore) -> dict[str, CampaignSpend]:
    fold = await load_spend(store)
    return {name: fold.campaign(name) for name in fold.campaigns()}


async def _agree(home: Home, complete: bool = True) -> None:
    async with open_store(home) as store:
        assert await model.is_complete(store.connection) is complete
        assert await campaign_spend(store) == await _folded(store)


async def _check(drawn: list[tuple[object, ...]], split: int, root: Path) -> None:
    home = Home(root)
    async with open_store(home, clock=Tick(), create=True) as store:
        for batch in _requests(drawn, split):
            await store.append_many(batch)
    await _agree(home)
    async with open_store(home) as store:
        await store.rebuild()
    await _agree(home)
    # A home from before migration 0008: its tables come empty and marked incomplete (the
    # fold answers) until `arenad rebuild` fills them.
    with sqlite3.connect(home.db_path) as db:
        for table in SpendProjectorTables:
            db.execute(f"DROP TABLE {table}")
        db.execute("DELETE FROM schema_migrations WHERE name = '0008_campaign_spend.sql'")
    await _agree(home, complete=False)
    async with open_store(home) as store:
        await store.rebuild()
    await _agree(home)


SpendProjectorTables = model.SpendProjector.tables


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(drawn=cells, split=st.integers(1, 5))
def test_the_spend_model_agrees_with_the_fold(drawn: list[tuple[object, ...]], split: int) -> None:
    with tempfile.TemporaryDirectory() as root:
        asyncio.run(_check(drawn, split, Path(root)))
