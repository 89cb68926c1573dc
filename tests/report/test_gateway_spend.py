"""The report's spend per source: the runs through the model gateway, the gateway's own cost
beside the agent store's, and the runs where the two disagree (a real SQLite log)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import msgspec

from arenad.readmodels.cells import CellsProjector
from arenad.readmodels.report_facts import ReportFactsProjector
from arenad.report.render import html_page, terminal
from arenad.report.service import report_store
from arenad.store.base import AppendRequest
from arenad.store.sqlite import SqliteEventStore
from events import cell as ev
from events.base import Event
from events.ingest import LineIngested
from events.specs import GatewaySpec
from tests.events.samples import make_spec
from tests.ledger.test_project import _clock, _run_events


def _call(n: int, usd: float) -> LineIngested:
    raw = json.dumps(
        {
            "call": f"c{n}",
            "request": {"model": "fixer"},
            "upstream": {"status": 200},
            "usage": {"input": 100, "output": 10, "reasoning": 0, "cache_read": 0},
            "cost_usd": usd,
        }
    )
    return LineIngested(
        source="gateway",
        path="c.jsonl",
        offset=n * 500,
        length=len(raw),
        raw=raw,
        kind="gateway.call",
    )


async def _report(db: Path) -> Any:
    # The home's read models: the gateway's cells are folded from the log beside the
    # others' facts read from the report-facts table.
    projectors = [CellsProjector(), ReportFactsProjector()]
    store = await SqliteEventStore.open(db, clock=_clock(), projectors=projectors)
    try:
        cells: list[tuple[str, float, list[LineIngested]]] = [
            # agrees with its gateway records, disagrees, and a cell not through the gateway.
            ("bug-1", 0.25, [_call(1, 0.125), _call(2, 0.125)]),
            ("bug-2", 0.30, [_call(1, 0.125), _call(2, 0.125)]),
            ("bug-3", 0.10, []),
        ]
        for iid, usd, calls in cells:
            spec = make_spec(instance_id=iid)
            if calls:
                spec = msgspec.structs.replace(spec, gateway=GatewaySpec(kind="gateway"))
            spend = ev.SpendFigures(sessions=1, tokens_in=200, tokens_out=20, cost_usd=usd)
            events: list[Event] = [ev.CellSubmitted(spec=spec), *_run_events("/r", spend=spend)]
            reqs = [AppendRequest(f"cell/{spec.cell_id}", 0, events)]
            if calls:
                reqs.append(AppendRequest(f"ingest/{spec.cell_id}/1", 0, list(calls)))
            await store.append_many(reqs)
        report = await report_store(store)
        # The same as the fold over the whole log.
        folded = await report_store(store, as_of=await store.last_seq())
        assert report == msgspec.structs.replace(folded, as_of_seq=None)
        return report
    finally:
        await store.close()


def test_spend_per_source_and_the_runs_where_they_disagree(tmp_path: Path) -> None:
    report = asyncio.run(_report(tmp_path / "log.db"))
    [arm] = report.arms
    assert arm.cost_usd == 0.65  # the agent store's, every run
    assert (arm.gateway_runs, arm.gateway_usd, arm.mismatch_runs) == (2, 0.5, 1)
    table = terminal(report)
    assert table is not None
    page = html_page(report).decode()
    assert "gateway cost" in page and "sources disagree" in page and "1 runs" in page
