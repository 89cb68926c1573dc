"""The report's figures over a real SQLite log, against values worked out by hand.

The log is tests/report/arena_log.py's (its docstring has the table of cells); each
figure below says how it follows from that table.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import msgspec
import pytest

from arenad.home import Home, open_store
from arenad.report.project import (
    ArmReport,
    CellFacts,
    MatrixCell,
    Report,
    build_report,
    cell_facts,
    pool_conflicts,
)
from arenad.report.render import json_bytes
from arenad.report.service import report_store
from events import cell as ev
from events.base import Event, Recorded
from events.codec import event_tag
from tests.events.samples import make_spec
from tests.report.arena_log import T0, build_arena, run_events


async def _report(home: Path, campaigns: tuple[str, ...] = (), *, pool: bool = True) -> Report:
    # Pooled: the arena's arms (ALPHA, BETA in "arena", GAMMA in "side") compared as one
    # table, as the hand-worked figures are; reports apart: test_campaigns_report_apart.
    async with open_store(Home(home)) as store:
        return await report_store(store, campaigns, pool=pool)


@pytest.fixture(scope="module")
def arena(tmp_path_factory: pytest.TempPathFactory) -> Path:
    home = tmp_path_factory.mktemp("arena")
    asyncio.run(build_arena(home))
    return home


@pytest.fixture(scope="module")
def report(arena: Path) -> Report:
    return asyncio.run(_report(arena))


def _arm(report: Report, name: str) -> ArmReport:
    (arm,) = [a for a in report.arms if a.arm == name]
    return arm


def test_alpha_outcomes(report: Report) -> None:
    a = _arm(report, "ALPHA")
    # 8 cells; i3 r1 failed on infrastructure: not decided, not a loss. Decided 7, of which
    # resolved: i1 r0, i1 r1, i3 r0, i4 r0, i4 r1 = 5. Scored: all but the timed-out i2 r1
    # and the infra-failed i3 r1 = 6.
    assert (a.cells, a.decided, a.resolved, a.scored) == (8, 7, 5, 6)
    assert (a.infra_failed, a.operator_failed, a.pending) == (1, 0, 0)
    assert a.resolve_rate == 5 / 7
    # Clustered by instance: Wilson of p = 5/7 with n = 4 instances (not 7 cells):
    # z² = 3.841459; centre (p + z²/8) / (1 + z²/4) = 0.609311; half-width
    # z·sqrt(p(1-p)/4 + z²/64) / (1 + z²/4) = 0.333163 -> [0.276146, 0.942472].
    assert a.ci95 == (pytest.approx(0.276146, abs=1e-6), pytest.approx(0.942472, abs=1e-6))
    assert a.ci_instances == 4
    # Per instance (resolved/decided): i1 2/2, i2 0/2, i3 1/1, i4 2/2.
    # pass@1 = mean(1, 0, 1, 1) = 0.75.
    # pass@2 over the instances with 2 decided reps (i1, i2, i4):
    #   i1: 1 - C(0,2)/C(2,2) = 1;  i2: 1 - C(2,2)/C(2,2) = 0;  i4: 1  -> 2/3.
    assert a.pass_at_k == {"1": 0.75, "2": 2 / 3}
    assert (a.instances, a.reps) == (4, 2)


def test_alpha_spend_is_unknown_where_one_run_is(report: Report) -> None:
    a = _arm(report, "ALPHA")
    # 8 runs; i3 r1 ran but failed before recovery: its cost is unknown, so the totals
    # are null, never 7 x 0.125 presented as the whole. Known: 7 x 0.125 = 0.875.
    assert (a.runs, a.cost_usd, a.cost_usd_known, a.cost_unknown_runs) == (8, None, 0.875, 1)
    assert (a.mean_cost_usd, a.cost_per_resolved) == (None, None)
    assert (a.tokens_in, a.tokens_out) == (None, None)
    assert (a.tokens_in_known, a.tokens_out_known, a.tokens_unknown_runs) == (700, 70, 1)
    # Walls 10 20 30 40 50 60 70 100: median (40 + 50) / 2, p90 70 + 0.3 * 30.
    assert a.wall_s_median == 45.0
    assert a.wall_s_p90 == pytest.approx(79.0)


def test_beta_judge_overrides_verify_only_for_scored_runs(report: Report) -> None:
    b = _arm(report, "BETA")
    # Resolved: i1 r0 (verify pass, no judge) and i2 r0 (verify fail, judge yes). Not:
    # i1 r1 (verify pass, judge no) and i3 r0 (aborted: unscored, a judge's yes ignored).
    # i4 r1's first attempt failed on infrastructure, its second (current) decided.
    assert (b.cells, b.decided, b.resolved, b.scored, b.infra_failed) == (8, 8, 2, 7, 0)
    assert b.resolve_rate == 0.25
    # Clustered: Wilson of p = 0.25 with n = 4 instances (2 reps each, not 8 trials).
    lo, hi = b.ci95 or (None, None)
    assert lo == pytest.approx(0.045587, abs=1e-6) and hi == pytest.approx(0.699358, abs=1e-6)
    # Per instance: i1 1/2, i2 1/2, i3 0/2, i4 0/2. pass@1 = (0.5 + 0.5) / 4 = 0.25;
    # pass@2: i1 and i2 1 - C(1,2)/C(2,2) = 1, i3 and i4 0 -> 0.5.
    assert b.pass_at_k == {"1": 0.25, "2": 0.5}


def test_beta_spend_counts_every_run_not_every_attempt(report: Report) -> None:
    b = _arm(report, "BETA")
    # 8 runs at 0.25 (i4 r1's first attempt never ran: it cost nothing): 2.0 in all,
    # 0.25 per run, 2.0 / 2 resolved = 1.0 per resolved cell.
    assert (b.runs, b.cost_usd, b.cost_unknown_runs) == (8, 2.0, 0)
    assert (b.mean_cost_usd, b.cost_per_resolved) == (0.25, 1.0)
    assert (b.tokens_in, b.tokens_out) == (1600, 160)
    assert (b.wall_s_median, b.wall_s_p90) == (5.0, 5.0)


def test_an_arm_without_decided_cells_has_unknown_figures(report: Report) -> None:
    g = _arm(report, "GAMMA")
    assert (g.cells, g.pending, g.operator_failed, g.decided) == (2, 1, 1, 0)
    assert (g.resolve_rate, g.ci95, g.pass_at_k) == (None, None, {"1": None})
    # Nothing ran: a real zero spent, and no mean of nothing.
    assert (g.runs, g.cost_usd, g.mean_cost_usd, g.wall_s_median) == (0, 0.0, None, None)


def test_pairs(report: Report) -> None:
    ab, ag, bg = report.pairs
    assert (ab.a, ab.b, ag.b, bg.a, bg.b) == ("ALPHA", "BETA", "GAMMA", "BETA", "GAMMA")
    # Fractions ALPHA 1, 0, 1, 1 vs BETA 0.5, 0.5, 0, 0 on i1..i4: diffs +0.5 -0.5 +1 +1.
    # Wins (ALPHA higher) i1 i3 i4, loss i2. McNemar exact on b = 3, c = 1:
    # 2 * (C(4,0) + C(4,1)) / 2^4 = 10/16. diff = (0.5 - 0.5 + 1 + 1) / 4 = 0.5.
    assert (ab.instances, ab.wins, ab.losses, ab.ties) == (4, 3, 1, 0)
    assert (ab.mcnemar_p, ab.diff) == (0.625, 0.5)
    # The exact bootstrap distribution of the mean of 4 draws from {0.5, -0.5, 1, 1}:
    # P(mean <= -0.25) = 5/256 < 2.5 % <= P(mean <= -0.125) = 13/256, and
    # P(mean <= 0.875) = 240/256 < 97.5 %: so its 2.5 % and 97.5 % points are -0.125 and 1;
    # 2000 resamples of the fixed SplitMix64 stream land on them exactly.
    assert ab.diff_ci95 == (-0.125, 1.0)
    # GAMMA decided nothing: no shared instance, so nothing is known about the pair.
    for p in (ag, bg):
        assert (p.instances, p.wins, p.losses, p.ties) == (0, 0, 0, 0)
        assert (p.mcnemar_p, p.diff, p.diff_ci95) == (None, None, None)


def test_matrix(report: Report) -> None:
    rows = {row.instance: row.arms for row in report.instances}
    assert list(rows) == ["i1", "i2", "i3", "i4"]
    assert rows["i3"] == {
        "ALPHA": MatrixCell(resolved=1, decided=1, cells=2),
        "BETA": MatrixCell(resolved=0, decided=2, cells=2),
    }
    assert rows["i2"]["GAMMA"] == MatrixCell(resolved=0, decided=0, cells=1)


def test_spend_over_time(report: Report) -> None:
    points = report.spend_over_time
    assert [p.at_ms for p in points] == sorted(p.at_ms for p in points)
    alpha = [p for p in points if p.arm == "ALPHA"]
    # Every ALPHA run settled, the infra-failed one too (at its CellFailed, cost unknown).
    assert len(alpha) == 8
    assert (alpha[-1].cost_usd, alpha[-1].unknown_runs) == (0.875, 1)
    assert [p.cost_usd for p in points if p.arm == "BETA"][-1] == 2.0


def test_same_log_same_bytes(arena: Path, tmp_path: Path) -> None:
    again = tmp_path / "again"
    asyncio.run(build_arena(again))
    first = json_bytes(asyncio.run(_report(arena)))
    assert json_bytes(asyncio.run(_report(arena))) == first
    assert json_bytes(asyncio.run(_report(again))) == first


def test_a_campaign_selection(arena: Path) -> None:
    only = asyncio.run(_report(arena, ("arena",)))
    assert only.campaigns == ["arena"]
    assert [a.arm for a in only.arms] == ["ALPHA", "BETA"]
    assert asyncio.run(_report(arena)).campaigns == ["arena", "side"]


# --------------------------------------------------------------------------- one cell


def _recorded(events: list[Event]) -> list[Recorded]:
    return [
        Recorded(i + 1, "cell/x", i + 1, event_tag(e), 1, T0 + 1000 * i, e)
        for i, e in enumerate(events)
    ]


def test_a_verified_outcome_survives_a_failed_recovery() -> None:
    spec = make_spec(arm="SOLO")
    events = run_events(1, "pass", wall_s=3.0, cost=0.5, tokens=(1, 1))
    failed = ev.CellFailed(
        attempt=1, stage="recover", error="disk full", classification="infrastructure"
    )
    facts = cell_facts(_recorded([ev.CellSubmitted(spec=spec), *events[:-1], failed]))
    assert facts is not None
    # Verified and passed before recovery failed: resolved; the spend is what was lost.
    assert (facts.outcome, facts.scored) == ("resolved", True)
    (run,) = facts.runs
    assert (run.cost_usd, run.tokens_in, run.settled_at_ms) == (None, None, T0 + 5000)


def test_a_supervisor_costs_its_whole_tree() -> None:
    spec = make_spec(arm="SUP", supervisor=True)
    events = run_events(1, "pass", wall_s=3.0, cost=0.5, tokens=(1, 1))
    outcome = ev.SupervisorOutcome(
        attempt=1,
        sup_run_dir=None,
        status="done",
        verdict="winner",
        delivered=True,
        spent_tokens=99,
        spent_usd=1.75,
    )
    # The captured workers' cost_usd is 0.5; the supervisor's own total, 1.75, is the run's.
    facts = cell_facts(_recorded([ev.CellSubmitted(spec=spec), *events[:3], outcome, *events[3:]]))
    assert facts is not None and facts.arm_kind == "supervisor"
    assert facts.runs[0].cost_usd == 1.75
    # Without that total the cost is unknown, not the workers' share.
    facts = cell_facts(_recorded([ev.CellSubmitted(spec=spec), *events]))
    assert facts is not None and facts.runs[0].cost_usd is None


def test_no_cells_is_an_empty_report() -> None:
    empty = build_report([], [])
    assert (empty.arms, empty.pairs, empty.instances, empty.spend_over_time) == ([], [], [], [])


# --------------------------------------------------------------------------- campaigns apart


def _cell_facts(campaign: str, iid: str, run: str, *, model: str | None = None) -> CellFacts:
    spec = make_spec(campaign=campaign, instance_id=iid, arm="SOLO")
    if model is not None:
        spec = msgspec.structs.replace(spec, arm=msgspec.structs.replace(spec.arm, model=model))
    events = run_events(1, run, wall_s=1.0, cost=0.1, tokens=(1, 1))  # type: ignore[arg-type]
    facts = cell_facts(_recorded([ev.CellSubmitted(spec=spec), *events]))
    assert facts is not None
    return facts


def test_two_campaigns_with_a_same_named_arm_report_apart() -> None:
    # Issue 29, finding 2: a SOLO row pooling two campaigns' SOLO arms.
    facts = [_cell_facts("c1", "i1", "pass"), _cell_facts("c1", "i2", "pass")]
    facts += [_cell_facts("c2", "i1", "fail"), _cell_facts("c2", "i2", "fail")]
    apart = build_report(facts, ["c1", "c2"])
    rows = {a.arm: (a.campaign, a.resolved, a.decided) for a in apart.arms}
    assert rows == {"c1/SOLO": ("c1", 2, 2), "c2/SOLO": ("c2", 0, 2)}
    assert apart.pairs == [] and not apart.pooled
    # Pooled only when asked, and then one row.
    pooled = build_report(facts, ["c1", "c2"], pool=True)
    assert [(a.arm, a.campaign, a.resolved, a.decided) for a in pooled.arms] == [
        ("SOLO", None, 2, 4)
    ]
    assert pool_conflicts(facts) == []


def test_pooling_arms_whose_specs_differ_is_refused() -> None:
    facts = [_cell_facts("c1", "i1", "pass"), _cell_facts("c2", "i1", "pass", model="other/m")]
    assert pool_conflicts(facts) == ["arm 'SOLO' differs between campaigns c1 and c2"]


def test_interrupted_runs_are_never_decided() -> None:
    spec = make_spec(arm="SOLO")
    events = run_events(1, "pass", wall_s=1.0, cost=0.1, tokens=(1, 1))
    started = [e for e in events if isinstance(e, ev.RunStarted | ev.CellMaterialized)]
    aborted = ev.RunAborted(attempt=1, rc=130, wall_s=1.0, reason="x", cause="shutdown")
    failed = ev.CellFailed(
        attempt=1, stage="interrupted", error="x", classification="operator", retryable=True
    )
    facts = cell_facts(_recorded([ev.CellSubmitted(spec=spec), *started, aborted, failed]))
    assert facts is not None and facts.outcome == "interrupted"
    # An older arenad verified (unscored) a run its daemon's shutdown aborted: still not
    # the agent's result, read from the reason it recorded.
    old = ev.RunAborted(attempt=1, rc=130, wall_s=1.0, reason="daemon shutting down")
    verified = ev.CellVerified(attempt=1, scored=False, not_scored_reason="aborted (exit 130)")
    recovered = ev.CellRecovered(attempt=1, store_available=False, spend=ev.SpendFigures())
    facts = cell_facts(_recorded([ev.CellSubmitted(spec=spec), *started, old, verified, recovered]))
    assert facts is not None and facts.outcome == "interrupted"
    report = build_report([facts], ["demo"])
    (arm,) = report.arms
    assert (arm.interrupted, arm.decided, arm.resolve_rate) == (1, 0, None)
    assert "interrupted" in report.counting
