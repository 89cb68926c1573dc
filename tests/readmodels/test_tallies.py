"""The tallies read model (kept in the append's transaction) answers as the fold does:
over random logs appended in random batches, after `rebuild`, and when a home made before
the tallies gets them from its migration's backfill."""

from __future__ import annotations

import asyncio
import sqlite3
import tempfile
from pathlib import Path

import msgspec
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from arenad.home import Home, open_store
from arenad.readmodels.tallies import Tallies
from arenad.readmodels.view import FoldedCellsView, SqliteCellsView
from arenad.store.base import AppendRequest
from events import cell as ev
from events.base import Event
from tests.events.samples import make_spec
from tests.report.arena_log import Run, Tick, run_events

RUNS: tuple[Run, ...] = ("pass", "fail", "timeout", "abort", "infra-verify")


def _scenario(run: Run, judge: bool | None, retry: bool, cost: float) -> list[Event]:
    first: list[Event] = []
    if retry:
        first = [
            ev.CellFailed(
                attempt=1,
                stage="materialize",
                error="clone failed",
                classification="infrastructure",
            ),
            ev.CellRetried(attempt=2, reason="policy", requested_by="policy"),
        ]
    attempt = 2 if retry else 1
    return [*first, *run_events(attempt, run, wall_s=1.0, cost=cost, tokens=(1, 1), judge=judge)]


cells = st.lists(
    st.tuples(
        st.sampled_from(["a", "b"]),
        st.sampled_from(["i0", "i1", "i2"]),
        st.sampled_from(["ALPHA", "BETA"]),
        st.integers(0, 2),
        st.sampled_from(RUNS),
        st.sampled_from([None, True, False]),
        st.booleans(),
        st.sampled_from([0.1, 0.25, 1e-7, 3.3333]),
        st.integers(0, 12),
    ),
    max_size=14,
    unique_by=lambda c: c[:4],
)


def _requests(drawn: list[tuple[object, ...]], split: int) -> list[list[AppendRequest]]:
    """Each cell's prefix of a scenario, appended in two parts; cells grouped into
    transactions of ``split`` requests (so one transaction moves several cells)."""
    first: list[AppendRequest] = []
    second: list[AppendRequest] = []
    for campaign, iid, arm, rep, run, judge, retry, cost, cut in drawn:
        spec = make_spec(campaign=str(campaign), instance_id=str(iid), arm=str(arm), rep=int(rep))  # type: ignore[call-overload]
        events: list[Event] = [
            ev.CellSubmitted(spec=spec),
            *_scenario(run, judge, bool(retry), float(cost)),  # type: ignore[arg-type]
        ][: 1 + int(cut)]  # type: ignore[call-overload]
        half = max(1, len(events) // 2)
        first.append(AppendRequest(f"cell/{spec.cell_id}", 0, events[:half]))
        if events[half:]:
            second.append(AppendRequest(f"cell/{spec.cell_id}", half, events[half:]))
    ordered = first + second
    return [ordered[i : i + split] for i in range(0, len(ordered), split)]


def _unstamped(t: Tallies) -> Tallies:
    # A key's latest update keeps cells that left it; the campaign's, compared apart, is
    # exact.
    return msgspec.structs.replace(
        t, arms=[msgspec.structs.replace(a, last_update_ms=0) for a in t.arms]
    )


async def _agree(home: Home) -> None:
    async with open_store(home) as store:
        sql, folded = SqliteCellsView(store), FoldedCellsView(store)
        assert _unstamped(await sql.tallies()) == _unstamped(await folded.tallies())
        assert await sql.campaign_counts() == await folded.campaign_counts()
        assert await sql.counts() == await folded.counts()


async def _check(drawn: list[tuple[object, ...]], split: int, root: Path) -> None:
    home = Home(root)
    async with open_store(home, clock=Tick(), create=True) as store:
        for batch in _requests(drawn, split):
            await store.append_many(batch)
    await _agree(home)
    async with open_store(home) as store:
        await store.rebuild()
    await _agree(home)
    # A home from before migration 0006: its tables gone, the migration applies again and
    # counts the cells from their stored states.
    with sqlite3.connect(home.db_path) as db:
        db.execute("DROP TABLE arm_tallies")
        db.execute("DROP TABLE instance_tallies")
        db.execute("DELETE FROM schema_migrations WHERE name = '0006_tallies.sql'")
    await _agree(home)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(drawn=cells, split=st.integers(1, 5))
def test_tallies_agree_with_the_fold(drawn: list[tuple[object, ...]], split: int) -> None:
    with tempfile.TemporaryDirectory() as root:
        asyncio.run(_check(drawn, split, Path(root)))


def test_an_arena_tallies_its_outcomes(tmp_path: Path) -> None:
    """The hand-worked arena (tests/report/arena_log.py): the outcomes the report gives."""
    from tests.report.arena_log import build_arena

    async def go() -> Tallies:
        await build_arena(tmp_path)
        async with open_store(Home(tmp_path)) as store:
            return await SqliteCellsView(store).tallies()

    t = asyncio.run(go())
    by_arm: dict[tuple[str, str], int] = {}
    for a in t.arms:
        by_arm[(a.arm, a.outcome)] = by_arm.get((a.arm, a.outcome), 0) + a.cells
    assert by_arm == {
        ("ALPHA", "resolved"): 5,
        ("ALPHA", "unresolved"): 2,
        ("ALPHA", "infra_failed"): 1,
        ("BETA", "resolved"): 2,
        ("BETA", "unresolved"): 6,
        ("GAMMA", "pending"): 1,
        ("GAMMA", "operator_failed"): 1,
    }
    alpha_cost = sum(a.cost_units for a in t.arms if a.arm == "ALPHA") / 10**12
    assert alpha_cost == 7 * 0.125


def test_each_arm_s_outcomes_are_the_report_s(tmp_path: Path) -> None:
    """`status --summary`'s per-arm line (from the tallies) says what the report says."""
    from arenad.readmodels.tallies import arm_outcomes
    from arenad.report.service import report_store
    from tests.report.arena_log import build_arena

    async def go() -> None:
        await build_arena(tmp_path)
        async with open_store(Home(tmp_path)) as store:
            arms = arm_outcomes(await SqliteCellsView(store).tallies())
            for name in ("arena", "side"):
                report = await report_store(store, [name])
                mine = [a for a in arms if a.campaign == name]
                assert [(a.arm, a.cells, a.resolved, a.decided, a.scored) for a in mine] == [
                    (r.arm, r.cells, r.resolved, r.decided, r.scored) for r in report.arms
                ]

    asyncio.run(go())
