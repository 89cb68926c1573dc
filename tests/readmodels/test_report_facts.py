"""The report-facts read model (kept in the append's transaction) gives the report the
fold over the whole log gives, byte for byte (its JSON, table and HTML page): over random
logs appended in random batches (retried attempts, runs to each outcome, judges, unknown
costs, supervisors, cells through the gateway with its records of the calls), for every
campaign, one named campaign and pooled; after `rebuild` (in batches that split cells);
and on a home made before its table (which folds until `rebuild`)."""

from __future__ import annotations

import asyncio
import io
import json
import sqlite3
import tempfile
from pathlib import Path

import msgspec
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rich.console import Console

from arenad.home import Home, open_store
from arenad.readmodels import report_facts
from arenad.report.project import Report
from arenad.report.render import html_page, terminal
from arenad.report.service import report_store
from arenad.store.base import AppendRequest
from arenad.store.sqlite import SqliteEventStore
from events import cell as ev
from events.base import Event
from events.ingest import LineIngested
from events.specs import GatewaySpec
from tests.events.samples import make_spec
from tests.report.arena_log import Run, Tick, run_events

RUNS: tuple[Run, ...] = ("pass", "fail", "timeout", "abort", "infra-verify")


def _call(n: int, usd: float) -> LineIngested:
    raw = json.dumps(
        {
            "call": f"c{n}", "request": {"model": "m"}, "upstream": {"status": 200},
            "usage": {"input": 100, "output": 10, "reasoning": 0, "cache_read": 0},
            "cost_usd": usd,
        }
    )  # fmt: skip
    return LineIngested(
        source="gateway", path="c.jsonl", offset=n * 500, length=len(raw), raw=raw,
        kind="gateway.call",
    )  # fmt: skip


cells = st.lists(
    st.tuples(
        st.sampled_from(["a", "b"]),
        st.sampled_from(["i0", "i1", "i2"]),
        st.sampled_from(["ALPHA", "BETA", "SUP"]),
        st.integers(0, 2),
        st.sampled_from(RUNS),
        st.booleans(),  # retried: attempt 1 failed at verify
        st.sampled_from([None, 0.1, 0.25, 1e-7, 3.3333]),
        st.sampled_from([None, True, False]),  # a judge's verdict
        st.integers(0, 12),  # how many of its events are in the log
        st.booleans(),  # through the gateway (ALPHA only)
    ),
    max_size=14,
    unique_by=lambda c: c[:4],
)


def _requests(drawn: list[tuple[object, ...]], split: int) -> list[list[AppendRequest]]:
    """Each cell's prefix of a scenario in two parts (its gateway calls after its run),
    grouped into transactions of ``split`` requests."""
    first: list[AppendRequest] = []
    second: list[AppendRequest] = []
    for campaign, iid, arm, rep, run, retry, cost, judge, cut, gateway in drawn:
        spec = make_spec(
            campaign=str(campaign), instance_id=str(iid), arm=str(arm), rep=int(rep),  # type: ignore[call-overload]
            supervisor=arm == "SUP",
        )  # fmt: skip
        through = bool(gateway) and arm == "ALPHA"
        if through:
            spec = msgspec.structs.replace(spec, gateway=GatewaySpec(kind="gateway"))
        events: list[Event] = [ev.CellSubmitted(spec=spec)]
        attempt = 1
        if retry:
            events += run_events(1, "infra-verify", wall_s=2.0, cost=0.0, tokens=(1, 1))
            events.append(ev.CellRetried(attempt=2, reason="policy", requested_by="policy"))
            attempt = 2
        tail = run_events(attempt, run, wall_s=1.5, cost=0.5, tokens=(3, 2), judge=judge)  # type: ignore[arg-type]
        if isinstance(tail[-1], ev.CellRecovered):
            spend = msgspec.structs.replace(tail[-1].spend, cost_usd=cost)
            tail[-1] = msgspec.structs.replace(tail[-1], spend=spend)
        events = [*events, *tail][: 1 + int(cut)]  # type: ignore[call-overload]
        half = max(1, len(events) // 2)
        first.append(AppendRequest(f"cell/{spec.cell_id}", 0, events[:half]))
        if events[half:]:
            second.append(AppendRequest(f"cell/{spec.cell_id}", half, events[half:]))
        if through:
            for n in (1, 2):
                calls = [_call(1, 0.125), _call(2, 0.0625 * n)]
                second.append(AppendRequest(f"ingest/{spec.cell_id}/{n}", 0, calls))
    ordered = first + second
    return [ordered[i : i + split] for i in range(0, len(ordered), split)]


def _bytes(report: Report) -> tuple[bytes, str, bytes]:
    out = io.StringIO()
    Console(file=out, width=200, color_system=None).print(terminal(report, 200))
    return msgspec.json.encode(report), out.getvalue(), html_page(report)


async def _folded(store: SqliteEventStore, campaigns: list[str], pool: bool) -> Report:
    """The fold over the whole log (``as_of`` its last event always folds)."""
    report = await report_store(store, campaigns, pool=pool, as_of=await store.last_seq())
    return msgspec.structs.replace(report, as_of_seq=None)


async def _agree(home: Home, complete: bool = True) -> None:
    async with open_store(home) as store:
        assert await report_facts.is_complete(store.connection) is complete
        if await store.last_seq() == 0:
            return
        names = sorted({f.campaign for f in (await report_facts.read(store.connection))[0]})
        for campaigns, pool in (([], False), ([], True), (names[:1], False)):
            model = await report_store(store, campaigns, pool=pool)
            assert _bytes(model) == _bytes(await _folded(store, campaigns, pool))


async def _check(drawn: list[tuple[object, ...]], split: int, root: Path) -> None:
    home = Home(root)
    async with open_store(home, clock=Tick(), create=True) as store:
        for batch in _requests(drawn, split):
            await store.append_many(batch)
    await _agree(home)
    async with open_store(home) as store:
        # Batches of 3 events: a cell's stream spans several of them.
        await store.rebuild(batch_size=3)
    await _agree(home)
    # A home from before migration 0009: its table comes empty and marked incomplete (the
    # report folds) until `arenad rebuild` fills it.
    with sqlite3.connect(home.db_path) as db:
        for table in report_facts.ReportFactsProjector.tables:
            db.execute(f"DROP TABLE {table}")
        db.execute("DELETE FROM schema_migrations WHERE name = '0009_report_facts.sql'")
    await _agree(home, complete=not drawn)
    async with open_store(home) as store:
        await store.rebuild()
    await _agree(home)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(drawn=cells, split=st.integers(1, 5))
def test_the_report_facts_model_agrees_with_the_fold(
    drawn: list[tuple[object, ...]], split: int
) -> None:
    with tempfile.TemporaryDirectory() as root:
        asyncio.run(_check(drawn, split, Path(root)))


def test_a_home_before_the_model_reports_from_the_fold(tmp_path: Path) -> None:
    # The pre-0009 home's report (folded) is the one its rebuilt model gives.
    drawn = [("a", "i0", "ALPHA", 0, "pass", False, 0.25, None, 12, False)]
    asyncio.run(_check(drawn, 1, tmp_path))  # type: ignore[arg-type]
