"""The results table: the SQL read model and a fold of the log page alike, whatever the
filter, the order and the page; a result reads the report's outcome rule."""

from __future__ import annotations

import itertools
from pathlib import Path

import msgspec

from arenad.cell.machine import fold
from arenad.home import Home, open_store
from arenad.readmodels.result_pages import campaign_results, sql_page
from arenad.readmodels.results import (
    RESULTS,
    SORTS,
    ResultQuery,
    ResultRow,
    row_of,
    select,
)
from arenad.store.base import EventStore
from arenad.store.sqlite import SqliteEventStore
from events import cell as ev
from events.base import Event
from events.streams import CELL, cell_stream
from tests.events.samples import make_spec, sample

DONE = [sample(ev.CellMaterialized), sample(ev.RunStarted), sample(ev.RunCompleted)]


def _verified(
    passed: bool, scored: bool = True, cost: float | None = 0.01, judged: bool | None = None
) -> list[Event]:
    judge: list[Event] = (
        []
        if judged is None
        else [
            ev.JudgeVerdictRecorded(
                attempt=1, judge="j", verdict_json="{}", resolved=judged, score=None
            )
        ]
    )
    return [
        *DONE,
        ev.CellVerified(
            attempt=1,
            scored=scored,
            not_scored_reason=None if scored else "timed out <b>at 120 s</b>",
            verify_rc=0 if passed else 1,
            verify_pass=passed,
        ),
        *judge,
        ev.CellRecovered(
            attempt=1, store_available=True, spend=ev.SpendFigures(sessions=1, cost_usd=cost)
        ),
    ]


# (instance, arm, the events after its submission, its result)
CELLS: list[tuple[str, str, list[Event], str]] = [
    ("a-1", "SOLO", _verified(True, cost=0.5), "resolved"),
    ("a-2", "SOLO", _verified(False, cost=0.02), "unresolved"),
    ("b_1", "SOLO", _verified(True, scored=False, cost=None), "not_scored"),
    ("B-2", "CLI", DONE[:2], "running"),
    ("c-1", "CLI", [], "pending"),
    ("c-2", "CLI", [sample(ev.CellMaterialized)], "pending"),
    (
        "c-3",
        "CLI",
        [
            ev.CellFailed(
                attempt=1, stage="run", error="HTTP 503\nmore", classification="infrastructure"
            )
        ],
        "not_scored",
    ),
    ("d%1", "SOLO", _verified(True, judged=False), "unresolved"),
    ("d-2", "SOLO", _verified(True, cost=0.1), "resolved"),
    (
        "e-1",
        "SOLO",
        [
            *DONE[:2],
            ev.RunAborted(attempt=1, reason="operator stop", cause="operator"),
            ev.CellRecovered(attempt=1, store_available=True, spend=ev.SpendFigures(sessions=1)),
        ],
        "not_scored",
    ),
    (
        "e-2",
        "CLI",
        [
            *DONE[:2],
            ev.RunAborted(attempt=1, reason="hung", cause="agent"),
            ev.CellVerified(attempt=1, scored=True, verify_rc=0, verify_pass=True),
        ],
        "resolved",
    ),
    # Its instance's data has a key named as the state's: the byte test cannot decide.
    ("verdict-in-extra", "CLI", _verified(False), "unresolved"),
]


async def _fill(store: EventStore) -> None:
    for i, (instance, arm, events, _) in enumerate(CELLS):
        spec = make_spec(campaign="web", instance_id=instance, arm=arm, rep=i % 2)
        if instance == "verdict-in-extra":
            extra = {"verdict": {"resolved": True}, "interrupted": None}
            spec = msgspec.structs.replace(
                spec, instance=msgspec.structs.replace(spec.instance, extra=extra)
            )
        await store.append(cell_stream(spec.cell_id), 0, [ev.CellSubmitted(spec=spec), *events])
    other = make_spec(campaign="other", instance_id="a-1")
    await store.append(cell_stream(other.cell_id), 0, [ev.CellSubmitted(spec=other)])


async def _folded(store: EventStore) -> list[ResultRow]:
    groups = await store.read_stream_groups(await store.streams(f"{CELL}web:"))
    return [row_of(s) for g in groups.values() if (s := fold(g)) is not None]


async def test_sql_and_the_fold_page_alike(tmp_path: Path) -> None:
    async with open_store(Home(tmp_path), create=True) as store:
        await _fill(store)
        assert isinstance(store, SqliteEventStore)
        rows = await _folded(store)
        assert {r.instance_id: r.result for r in rows} == {c[0]: c[3] for c in CELLS}
        queries = [
            ResultQuery(campaign="web", sort=sort, desc=desc)
            for sort, desc in itertools.product(SORTS, (False, True))
        ]
        queries += [ResultQuery(campaign="web", result=r) for r in RESULTS]
        queries += [
            ResultQuery(campaign="web", state="recovered", arm="SOLO"),
            ResultQuery(campaign="web", text="b"),
            ResultQuery(campaign="web", instance="b_1"),
            ResultQuery(campaign="web", instance="b"),
            ResultQuery(campaign="web", text="%"),
            ResultQuery(campaign="web", text="_"),
            ResultQuery(campaign="web", per_page=2, page=2, sort="cost", desc=True),
            ResultQuery(campaign="web", per_page=4, page=3),
            ResultQuery(campaign="web", per_page=4, page=9),
        ]
        for q in queries:
            folded = select(rows, q)
            in_sql = await sql_page(store.connection, q)
            assert msgspec.to_builtins(in_sql) == msgspec.to_builtins(folded), q


async def test_a_page_reads_its_filters(tmp_path: Path) -> None:
    async with open_store(Home(tmp_path), create=True) as store:
        await _fill(store)
        assert isinstance(store, SqliteEventStore)
        db = store.connection
        page = await sql_page(db, ResultQuery(campaign="web"))
        assert page.counts == {
            "resolved": 3,
            "unresolved": 3,
            "not_scored": 3,
            "running": 1,
            "pending": 2,
        }
        assert page.arms == ["CLI", "SOLO"] and page.matching == len(CELLS)
        # The instance filter is a part of the id, case aside; % and _ are themselves.
        found = await sql_page(db, ResultQuery(campaign="web", text="B"))
        assert sorted(r.instance_id for r in found.rows) == ["B-2", "b_1"]
        found = await sql_page(db, ResultQuery(campaign="web", text="_"))
        assert [r.instance_id for r in found.rows] == ["b_1"]
        # Why a result does not count, in one line.
        why = {r.instance_id: r.why for r in page.rows}
        assert why["b_1"] == "timed out <b>at 120 s</b>"
        assert why["c-3"] == "infrastructure failure: HTTP 503"
        assert why["a-1"] is None
        by_cost = await sql_page(db, ResultQuery(campaign="web", sort="cost", desc=True))
        assert [r.instance_id for r in by_cost.rows[:2]] == ["a-1", "d-2"]
        missing = await sql_page(db, ResultQuery(campaign="nope"))
        assert missing.arms == [] and missing.rows == []


async def test_as_of_the_last_event_is_now_and_earlier_is_a_prefix(tmp_path: Path) -> None:
    async with open_store(Home(tmp_path), create=True) as store:
        await _fill(store)
        assert isinstance(store, SqliteEventStore)
        head = await store.last_seq()
        q = ResultQuery(campaign="web", sort="result")
        now = await sql_page(store.connection, q)
        folded = await campaign_results(store, q, as_of=head)
        assert msgspec.to_builtins(folded) == msgspec.to_builtins(now)
        # After the first append (one cell, all its events): that cell alone.
        first = await campaign_results(store, q, as_of=1)
        assert first is not None and first.matching == 1 and first.counts["pending"] == 1
        assert await campaign_results(store, ResultQuery(campaign="other"), as_of=1) is None
