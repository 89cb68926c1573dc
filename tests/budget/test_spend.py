"""The spend fold: recovered cost of ended attempts, live cost of running ones, unknown
apart (never 0), exact sums, and a line fed twice counted once."""

from __future__ import annotations

import json
import random

import pytest

from arenad.budget.spend import SpendFold, fold_spend
from events import cell as ev
from events.base import Event
from events.control import CampaignSubmitted
from events.ingest import FileSnapshotted, LineIngested
from tests.events.samples import sample

Fed = tuple[str, Event]


def submitted(campaign: str, kinds: dict[str, str]) -> Fed:
    return (
        f"campaign/{campaign}",
        CampaignSubmitted(
            name=campaign, source_path="/c.toml", spec_sha256="0", cell_ids=[], arm_kinds=kinds
        ),
    )


def started(cell: str, attempt: int = 1) -> Fed:
    return f"cell/{cell}", sample(ev.RunStarted, attempt)


def step(cell: str, cost: object, offset: int, attempt: int = 1) -> Fed:
    raw = json.dumps({"type": "step_finish", "part": {"type": "step-finish", "cost": cost}})
    return (
        f"ingest/{cell}/{attempt}",
        LineIngested(
            source="stdout", path="oc.jsonl", offset=offset, length=len(raw), raw=raw,
            kind="step_finish",
        ),
    )  # fmt: skip


def recovered(cell: str, cost: float | None, attempt: int = 1, oc: float | None = None) -> Fed:
    usage = None
    if oc is not None:
        usage = ev.SoloUsage(
            steps=1, tokens_in=0, tokens_out=0, reasoning=0, cache_w=0, cache_r=0, max_ctx=0,
            oc_cost=oc, total_io=0,
        )  # fmt: skip
    return (
        f"cell/{cell}",
        ev.CellRecovered(
            attempt=attempt,
            store_available=cost is not None,
            spend=ev.SpendFigures(sessions=1 if cost is not None else None, cost_usd=cost),
            usage=usage,
        ),
    )


def ended(cell: str, attempt: int = 1) -> Fed:
    return f"cell/{cell}", ev.RunCompleted(attempt=attempt, rc=0, wall_s=1.0)


def fold(items: list[Fed]) -> SpendFold:
    f = SpendFold()
    for stream, event in items:
        f.apply(stream, event)
    return f


def test_a_running_attempt_counts_what_its_stream_reported_so_far() -> None:
    a = "c:i1:SOLO:0"
    f = fold([submitted("c", {"SOLO": "solo"}), started(a)])
    s = f.campaign("c")
    # A solo arm reports cost: nothing reported yet is a known 0, not unknown.
    assert (s.spent_usd, s.running, s.unknown_attempts, s.attempts) == (0.0, 1, 0, 1)
    f.apply(*step(a, 0.1, 0))
    f.apply(*step(a, 0.2, 100))
    f.apply(*step(a, 0.2, 100))  # the same line again (a restarted reader): once
    s = f.campaign("c")
    assert s.spent_usd == pytest.approx(0.3) and s.live_usd == s.spent_usd
    assert f.unrecovered() == [(a, 1)]


def test_recovery_replaces_the_live_figure_and_retries_add_up() -> None:
    a = "c:i1:SOLO:0"
    f = fold(
        [
            started(a),
            step(a, 0.25, 0),
            ended(a),
            recovered(a, 0.3),
            started(a, 2),
            step(a, 0.5, 0, 2),
        ]
    )
    s = f.campaign("c")
    assert s.spent_usd == pytest.approx(0.8)
    assert (s.recovered_usd, s.live_usd) == (pytest.approx(0.3), pytest.approx(0.5))
    assert (s.attempts, s.running) == (2, 1)
    f.apply(*recovered(a, 0.75, 2))
    assert f.campaign("c").spent_usd == pytest.approx(1.05)
    assert f.unrecovered() == []


def test_unknown_cost_is_counted_apart_never_as_zero() -> None:
    cmd, solo = "c:i1:CMD:0", "c:i1:SOLO:0"
    f = fold([submitted("c", {"CMD": "command", "SOLO": "solo"}), started(cmd), started(solo)])
    s = f.campaign("c")
    assert (s.unknown_attempts, s.spent_usd) == (1, 0.0)
    # A store that could not be read and no stream figure: still unknown once recovered.
    f.apply(*ended(cmd))
    f.apply(*recovered(cmd, None))
    assert f.campaign("c").unknown_attempts == 1
    # A command arm whose output is opencode's stream reports cost after all.
    other = "c:i2:CMD:0"
    f.apply(*started(other))
    assert f.campaign("c").unknown_attempts == 2
    f.apply(*step(other, 0.125, 0))
    assert f.campaign("c").unknown_attempts == 1
    assert f.campaign("c").spent_usd == 0.125


def test_an_attempt_that_never_started_costs_nothing() -> None:
    a = "c:i1:SOLO:0"
    failed = ev.CellFailed(attempt=1, stage="materialize", error="x", classification="agent")
    f = fold([(f"cell/{a}", failed)])
    assert f.campaign("c").attempts == 0 and f.campaigns() == []


def test_the_recovered_figure_is_the_run_cost_rule() -> None:
    # The same rule as the report's and the live progress's (arenad.cell.spend.run_cost):
    # a supervisor's own whole-tree total, else its outcome's; a solo arm's sessions.
    sup, solo = "c:i1:SUP:0", "c:i1:SOLO:0"
    outcome = ev.SupervisorOutcome(
        attempt=1, sup_run_dir=None, status="completed", verdict=None, delivered=True,
        spent_tokens=None, spent_usd=0.75,
    )  # fmt: skip
    f = fold(
        [
            submitted("c", {"SUP": "supervisor", "SOLO": "solo"}),
            started(sup),
            (f"cell/{sup}", outcome),
            recovered(sup, 0.25),  # its workers' sessions: a part of the whole
            started(solo),
            recovered(solo, 0.5),
        ]
    )
    assert f.campaign("c").spent_usd == 1.25


def test_supervisor_live_cost_from_its_journal_and_state() -> None:
    cell = "c:i1:SUP:0"
    stream = f"ingest/{cell}/1"

    def journal(obj: dict[str, object], offset: int) -> Fed:
        raw = json.dumps(obj)
        return stream, LineIngested(
            source="supervisor", path="journal.jsonl", offset=offset, length=len(raw), raw=raw,
            kind=str(obj["kind"]),
        )  # fmt: skip

    f = fold(
        [
            submitted("c", {"SUP": "supervisor"}),
            started(cell),
            journal({"kind": "spawned", "id": "r", "label": "root"}, 0),
            journal({"kind": "spawned", "id": "r:s0", "parent": "r", "label": "a"}, 10),
            journal({"kind": "settled", "id": "r:s0", "spent": {"usd": 0.25}}, 20),
            # The root's own settled is the tree's total: not added to its workers'.
            journal({"kind": "settled", "id": "r", "spent": {"usd": 9.0}}, 30),
        ]
    )
    assert f.campaign("c").spent_usd == 0.25
    state = json.dumps({"status": "completed", "result": {"spentUsd": 0.75}})
    f.apply(
        stream,
        FileSnapshotted(
            source="supervisor", path="state.json", content=state, sha256="0", size=len(state)
        ),
    )
    assert f.campaign("c").spent_usd == 0.75  # the whole tree, larger than its workers' part


def test_the_fold_is_exact_and_the_same_in_any_interleaving() -> None:
    items: list[Fed] = []
    for n in range(40):
        cell = f"c:i{n}:SOLO:0"
        items += [started(cell), *(step(cell, 0.1, k * 10) for k in range(3))]
    expected = fold(items).campaign("c")
    rng = random.Random(7)
    for _ in range(5):
        shuffled = list(items)
        rng.shuffle(shuffled)
        assert fold(shuffled).campaign("c") == expected
    # 120 steps of 0.1: exact, not 11.999999999999...
    assert expected.spent_usd == 12.0


def test_fold_spend_reads_recorded_events() -> None:
    from events.base import Recorded

    recorded = [
        Recorded(n + 1, stream, 1, "x", 1, 0, event)
        for n, (stream, event) in enumerate([started("c:i:SOLO:0"), step("c:i:SOLO:0", 0.5, 0)])
    ]
    assert fold_spend(recorded).campaign("c").spent_usd == 0.5


def test_a_recovery_that_cannot_say_is_unknown_whatever_the_stream_said() -> None:
    # A command arm printing opencode's lines: counted live while it runs; its recovery
    # (no store) says unknown, as the report does, and unknown it is.
    a = "c:i1:CMD:0"
    f = fold([submitted("c", {"CMD": "command"}), started(a), step(a, 0.4, 0), ended(a)])
    assert f.campaign("c").spent_usd == 0.4 and f.campaign("c").unknown_attempts == 0
    f.apply(*recovered(a, None))
    assert f.campaign("c").spent_usd == 0.0 and f.campaign("c").unknown_attempts == 1
    assert f.unrecovered() == []
