"""The cells read port: the SQLite read model and a fold over any store answer alike."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from arenad.home import Home, open_store
from arenad.readmodels.view import CellsView, FoldedCellsView, SqliteCellsView
from arenad.store.base import EventStore
from arenad.store.memory import InMemoryEventStore
from events.base import Event
from events.cell import (
    CellFailed,
    CellMaterialized,
    CellPaused,
    CellRecovered,
    CellRetried,
    CellSubmitted,
    CellVerified,
    RunCompleted,
    RunStarted,
    SpendFigures,
    SupervisorOutcome,
)
from events.streams import cell_stream
from tests.events.samples import make_spec, sample


async def _fill(store: EventStore) -> None:
    for i in range(4):
        for rep in (1, 0):
            spec = make_spec(instance_id=f"i{i}", rep=rep)
            await store.append(cell_stream(spec.cell_id), 0, [CellSubmitted(spec=spec)])
    failed = make_spec(instance_id="i1", rep=0).cell_id
    cause = "provider unreachable: Cannot connect to API\n(details)"
    await store.append(
        cell_stream(failed),
        1,
        [CellFailed(attempt=1, stage="run", error=cause, classification="infrastructure")],
    )
    retried = make_spec(instance_id="i3", rep=0).cell_id
    await store.append(
        cell_stream(retried),
        1,
        [
            CellFailed(attempt=1, stage="run", error="HTTP 503", classification="infrastructure"),
            CellRetried(attempt=2, reason="policy", requested_by="policy"),
        ],
    )
    await store.append(cell_stream(make_spec(instance_id="i2", rep=1).cell_id), 1, [CellPaused()])


async def _fill_supervisor(store: EventStore) -> None:
    # A recovered supervisor cell: its two costs, each under its name (finding 9).
    sup = make_spec(instance_id="i9", arm="SUP", supervisor=True)
    events: list[Event] = [
        CellSubmitted(spec=sup),
        *(sample(k) for k in (CellMaterialized, RunStarted, RunCompleted)),
        SupervisorOutcome(
            attempt=1,
            sup_run_dir=None,
            status="done",
            verdict="delivered",
            delivered=True,
            spent_tokens=9,
            spent_usd=0.02,
        ),
        sample(CellVerified),
        CellRecovered(
            attempt=1,
            store_available=True,
            spend=SpendFigures(sessions=2, cost_usd=0.0934, cache_read=100, cache_write=5),
        ),
    ]
    await store.append(cell_stream(sup.cell_id), 0, events)
    # A recovered solo cell: its usage figures (finding 9: recorded, shown nowhere).
    solo = make_spec(instance_id="i8")
    done = (CellMaterialized, RunStarted, RunCompleted, CellVerified, CellRecovered)
    await store.append(
        cell_stream(solo.cell_id), 0, [CellSubmitted(spec=solo), *(sample(k) for k in done)]
    )


@pytest.fixture(params=["sqlite", "folded-sqlite", "folded-memory"])
async def view(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[CellsView]:
    if request.param == "folded-memory":
        memory = InMemoryEventStore()
        await _fill(memory)
        yield FoldedCellsView(memory)
        return
    async with open_store(Home(tmp_path), create=True) as store:
        await _fill(store)
        yield SqliteCellsView(store) if request.param == "sqlite" else FoldedCellsView(store)


async def test_counts(view: CellsView) -> None:
    assert await view.counts() == [("failed", 1), ("submitted", 7)]


async def test_rows_say_why_in_one_line(view: CellsView) -> None:
    reasons = {(r["instance_id"], r["rep"]): r["reason"] for r in await view.rows()}
    assert reasons[("i1", 0)] == "provider unreachable: Cannot connect to API"
    assert reasons[("i3", 0)] == "attempt 1 failed: HTTP 503"
    assert reasons[("i0", 0)] is None


async def test_runnable_is_oldest_first_excluding_terminal_and_paused(view: CellsView) -> None:
    runnable = [cell for cell, _ in await view.runnable()]
    assert make_spec(instance_id="i1", rep=0).cell_id not in runnable
    assert make_spec(instance_id="i2", rep=1).cell_id not in runnable
    assert len(runnable) == 6
    first = runnable[0]
    assert [c for c, _ in await view.runnable(exclude=[first], limit=2)] == runnable[1:3]


async def test_rows_are_ordered_by_campaign_instance_arm_and_rep(view: CellsView) -> None:
    rows = await view.rows()
    assert [(r["instance_id"], r["rep"]) for r in rows] == [
        (f"i{i}", rep) for i in range(4) for rep in (0, 1)
    ]
    assert rows[2]["state"] == "failed" and rows[5]["paused"] == 1


async def test_state(view: CellsView) -> None:
    spec = make_spec(instance_id="i3", rep=1)
    state = await view.state(spec.cell_id)
    assert state is not None and state.spec == spec
    assert await view.state("nope:x:y:0") is None


async def test_a_held_campaign_lists_only_cells_whose_run_started(view: CellsView) -> None:
    # A campaign at its spend cap: its submitted cells wait, and must not fill the look
    # ahead; cells of other campaigns are listed as before.
    assert await view.runnable(hold_campaigns=["demo"]) == []
    assert len(await view.runnable(hold_campaigns=["other"])) == 6


async def test_states_and_campaign_counts(view: CellsView) -> None:
    ids = [make_spec(instance_id=f"i{i}", rep=0).cell_id for i in range(3)]
    states = await view.states([*ids, "nope:x:y:0"])
    assert sorted(states) == sorted(ids)
    assert states[ids[1]].status == "failed"
    counts = [(c, s, n) for c, s, n, _ in await view.campaign_counts()]
    assert counts == [("demo", "failed", 1), ("demo", "submitted", 7)]


@pytest.mark.parametrize("folded", [False, True])
async def test_a_held_campaign_still_lists_its_started_cells(tmp_path: Path, folded: bool) -> None:
    from events import cell as ev
    from tests.events.samples import sample

    async with open_store(Home(tmp_path), create=True) as store:
        specs = [make_spec(instance_id=f"i{i}") for i in range(3)]
        for spec in specs:
            await store.append(cell_stream(spec.cell_id), 0, [CellSubmitted(spec=spec)])
        materialized = sample(ev.CellMaterialized)
        await store.append(cell_stream(specs[1].cell_id), 1, [materialized])
        await store.append(cell_stream(specs[2].cell_id), 1, [materialized, sample(ev.RunStarted)])
        view: CellsView = FoldedCellsView(store) if folded else SqliteCellsView(store)
        held = await view.runnable(hold_campaigns=["demo"])
        assert held == [(specs[2].cell_id, "demo")]  # running: its runner must go on
        assert len(await view.runnable()) == 3


@pytest.mark.parametrize("kind", ["sqlite", "folded-sqlite", "folded-memory"])
async def test_rows_name_cache_tokens_and_a_supervisors_two_costs(
    kind: str, tmp_path: Path
) -> None:
    """status --json: cache tokens, and a supervisor cell's cost of record (the driver's
    whole-tree receipt, as the report and the cap count it) beside its workers' sessions."""
    if kind == "folded-memory":
        memory = InMemoryEventStore()
        await _fill(memory)
        await _fill_supervisor(memory)
        rows = {r["instance_id"]: r for r in await FoldedCellsView(memory).rows()}
    else:
        async with open_store(Home(tmp_path), create=True) as store:
            await _fill(store)
            await _fill_supervisor(store)
            found = SqliteCellsView(store) if kind == "sqlite" else FoldedCellsView(store)
            rows = {r["instance_id"]: r for r in await found.rows()}
    sup = rows["i9"]
    assert (sup["cache_read"], sup["cache_write"]) == (100, 5)
    assert (sup["driver_usd"], sup["workers_usd"], sup["cost_usd"]) == (0.02, 0.0934, 0.0934)
    solo = rows["i0"]
    assert (solo["cache_read"], solo["cache_write"]) == (None, None)
    assert "driver_usd" not in solo and solo["usage"] is None
    usage = rows["i8"]["usage"]
    assert usage == {"steps": 3, "max_ctx": 1800, "oc_cost": 0.0125, "total_io": 1540}
