"""The report as a pure projection of the log: cells' streams in, a ``Report`` out.

Two folds, so memory is bounded by one cell, never the log: ``cell_facts(records)`` turns
ONE cell's ``cell/<id>`` stream into a small ``CellFacts`` (its runs from the attempts
fold, :mod:`arenad.cell.attempts`; its outcome from the machine's state);
``build_report(facts)`` turns every selected cell's facts into the figures. Neither reads
a file, a store, a clock or a random source (the bootstrap's PRNG is seeded by a
constant); times come from ``recorded_at_ms``. Everything is sorted, so the same log
gives the same bytes.

Decisions (where the issue is silent):

- **A cell's outcome** is read from its *current* attempt (the machine's fold):
  ``resolved`` / ``unresolved`` once the attempt is verified; ``infra_failed`` when it
  ended in an infrastructure ``CellFailed`` *before* being verified (a verified attempt
  whose recovery then failed keeps its verified outcome: only its spend is lost);
  ``operator_failed`` for an operator's failure before the run (an abort of a queued
  cell: the agent never ran); ``interrupted`` when its run was ended by what was not the
  agent (the daemon's shutdown, an operator's abort, a lost wrapper or node:
  ``CellState.interrupted``, also for such runs that an older arenad verified);
  ``unresolved`` for an agent-classified failure;
  ``pending`` otherwise. Earlier attempts (retried away) have no outcome.
- **Resolved** = the attempt was scored (``CellVerified.scored``) and passed: a judge
  verdict's ``resolved`` (the latest of the attempt), when it is not null, overrides the
  verify command's pass/fail, as the ledger's reward does; an unscored run is never
  resolved, whatever a judge said. An unscored run (timed out, aborted, non-zero exit)
  is an unresolved outcome: the agent had its chance.
- **The resolve rate** is resolved / decided, decided = resolved + unresolved cells. A
  verdict made in the agent's own workspace (``[verify] verify_in = "workspace"``) is
  self-reported: an arm's rate over any such verdict is labeled so, with their count
  (verdicts recorded before grading checkouts carry no ``verify_in`` and are not labeled).
  Infrastructure and operator failures, interrupted and pending cells are counted apart
  and are not in the denominator (``COUNTING`` says so in the report itself). Its 95 %
  interval is clustered by instance: reps of one instance are not independent trials, so
  it is Wilson's interval of the pooled rate with n = the instances that have a decided
  rep (``ci_instances``), not the cells (instances × reps). That is conservative (as if
  an instance's reps always agreed); with one rep per instance it is Wilson's over the
  cells. Deterministic, no resampling.
- **Campaigns** are reported apart: a report of several campaigns names each arm
  "campaign/arm" and pairs arms only inside a campaign. ``pool`` counts same-named arms
  of the campaigns together; the service refuses it when their specs differ
  (``pool_conflicts``).
- **pass@k** (k = 1..reps, reps = the most cells the arm has on one instance) averages
  the unbiased estimator over the instances with at least k decided reps; null when none
  has.
- **Spend** counts every attempt that started a run (retried ones too: that money is
  spent); an attempt that never started cost nothing. A run's cost is the recorded one:
  for solo and command arms ``spend.cost_usd`` of its ``CellRecovered`` (the captured
  opencode sessions); for a supervisor, its own whole-tree total (``spend.spent_usd``,
  else the ``SupervisorOutcome``'s ``spent_usd``), because the captured sessions are only
  its workers and would undercount it against a solo arm (:mod:`arenad.cell.spend`).
  Totals (``cost_usd``, ``tokens_in``, ``tokens_out``) are null as soon as one run's
  figure is unknown; the sum of the known figures and the count of unknown runs are given
  beside them. Tokens are the captured sessions' (for a supervisor, its workers': the
  driver's tokens are not split in/out).
  ``mean_cost_usd`` is per run; ``cost_per_resolved`` is the total over resolved cells.
- **Wall time** (median, p90 by linear interpolation) is over the runs that ended with
  a known ``wall_s``.
- **Pairs** (a < b by name) are compared over the instances where both arms have a
  decided rep, on each instance's resolve fraction (resolved / decided reps): a win when
  a's is higher, a loss when lower, else a tie. ``mcnemar_p`` is the exact two-sided
  test on the discordant instances (b = wins, c = losses): with one rep per instance it
  is exactly McNemar's test; with several it is the sign test on the fractions, which
  keeps the instance, not the rep, as the independent unit. Null when no instance is
  discordant. ``diff`` is the mean over those instances of a's fraction minus b's;
  ``diff_ci95`` the percentile bootstrap over instances (``BOOTSTRAP_RESAMPLES`` draws,
  seed ``BOOTSTRAP_SEED``); over more than ``BOOTSTRAP_MAX_INSTANCES`` instances, the
  normal interval the bootstrap tends to (mean ± 1.96·σ/√n): the bootstrap costs
  resamples × instances draws in pure Python (100 million, minutes, at 50 000
  instances), and at that many instances the two agree to well under a rate's last
  printed digit.
- **Instances** are grouped by id across the selected campaigns.
- **Spend over time**: one point per run as it settled (its ``CellRecovered``, else the
  ``CellFailed`` that ended it), the arm's cumulative known cost at that recorded time;
  a run of unknown cost adds nothing and is counted beside it. Sums are ``math.fsum``
  (exact, so the total does not depend on the order of the cells).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from operator import attrgetter

import msgspec

from arenad.cell.machine import CellState
from arenad.cell.outcome import DECIDED, Outcome, outcome_of
from arenad.readmodels.cell_facts import CellFacts, RunFacts, cell_facts
from arenad.report.stats import (
    bootstrap_mean_ci,
    mcnemar_exact,
    normal_mean_ci,
    pass_at_k,
    quantile,
    wilson,
    wilson_rate,
)

__all__ = [
    "BOOTSTRAP_RESAMPLES",
    "BOOTSTRAP_SEED",
    "ArmReport",
    "CellFacts",
    "MatrixCell",
    "Outcome",
    "PairReport",
    "Report",
    "RunFacts",
    "SpendPoint",
    "build_report",
    "cell_facts",
    "cell_outcome",
    "pool_conflicts",
]

BOOTSTRAP_RESAMPLES = 2000
BOOTSTRAP_SEED = 0x5EED_A2E4AD
# Past this many paired instances, the normal interval (the module's docstring says why).
BOOTSTRAP_MAX_INSTANCES = 1000


class ArmReport(msgspec.Struct, frozen=True, kw_only=True):
    # The arm's name; "campaign/name" in a report of several campaigns not pooled.
    arm: str
    kind: str
    # Its campaign; None when pooled across campaigns.
    campaign: str | None = None
    cells: int
    instances: int
    reps: int
    decided: int
    scored: int
    resolved: int
    infra_failed: int
    operator_failed: int
    # Runs ended by what was not the agent (the daemon's shutdown, an operator's abort, a
    # lost node): never scored, never decided, whatever came after them in older logs.
    interrupted: int = 0
    pending: int
    resolve_rate: float | None
    # Clustered by instance (the instance-level Wilson, see the module's docstring).
    ci95: tuple[float, float] | None
    # The interval's n: the instances with a decided rep (reps inside one are not
    # independent trials); beside it, ``instances`` × ``reps`` cells.
    ci_instances: int = 0
    pass_at_k: dict[str, float | None]
    runs: int
    cost_usd: float | None
    cost_usd_known: float
    cost_unknown_runs: int
    mean_cost_usd: float | None
    cost_per_resolved: float | None
    tokens_in: int | None
    tokens_out: int | None
    tokens_in_known: int
    tokens_out_known: int
    tokens_unknown_runs: int
    wall_s_median: float | None
    wall_s_p90: float | None
    # Decided cells whose verdict was made in the agent's workspace: a resolve rate over
    # any of them is labeled self-reported.
    self_reported: int = 0
    # Cells whose agent changed excluded paths or runner config (recorded, not graded).
    tampered: int = 0
    # Spend per source: the runs that went through the model gateway, the gateway's total
    # for them (None as soon as one is unknown) beside the agent store's ``cost_usd``, and
    # the runs where the two disagree beyond rounding (``RunFacts.mismatch``).
    gateway_runs: int = 0
    gateway_usd: float | None = None
    mismatch_runs: int = 0


class PairReport(msgspec.Struct, frozen=True, kw_only=True):
    a: str
    b: str
    instances: int
    wins: int
    losses: int
    ties: int
    mcnemar_p: float | None
    diff: float | None
    diff_ci95: tuple[float, float] | None


class MatrixCell(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    resolved: int
    decided: int
    cells: int


class InstanceRow(msgspec.Struct, frozen=True, kw_only=True):
    instance: str
    # Arm name -> its reps on this instance; an arm without a cell here is absent.
    arms: dict[str, MatrixCell]


class SpendPoint(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    at_ms: int
    arm: str
    cost_usd: float
    unknown_runs: int


class Report(msgspec.Struct, frozen=True, kw_only=True):
    campaigns: list[str]
    # Same-named arms of the campaigns counted together (``--pool``); else each campaign's
    # arms apart.
    pooled: bool = False
    # The log as it stood after this event (``--as-of``); None: the whole log.
    as_of_seq: int | None = None
    # How each kind of cell is counted (said once, in the report itself).
    counting: str = ""
    bootstrap_resamples: int
    bootstrap_seed: int
    arms: list[ArmReport]
    pairs: list[PairReport]
    instances: list[InstanceRow]
    spend_over_time: list[SpendPoint]

    def __repr__(self) -> str:
        # Short: at exit, Python 3.11's asyncio.run formats its main task (whose result is
        # the report) into an error message it discards; the whole repr of a 100 000-cell
        # report cost the CLI 0.7 s of CPU.
        return (
            f"Report(campaigns={self.campaigns!r}, arms={[a.arm for a in self.arms]!r},"
            f" instances={len(self.instances)}, as_of_seq={self.as_of_seq!r})"
        )


# --------------------------------------------------------------------------- one cell


def cell_outcome(state: CellState) -> Outcome:
    """The outcome the report gives a cell of this state (its current attempt's)."""
    return outcome_of(state)[0]


# --------------------------------------------------------------------------- the figures


def _tally(cells: Iterable[CellFacts]) -> MatrixCell:
    # One pass, not one per count: the report makes a tally per instance × arm (100 000
    # of them at 50 000 instances).
    resolved = decided = n = 0
    for c in cells:
        n += 1
        if c.outcome in DECIDED:
            decided += 1
            resolved += c.outcome == "resolved"
    return MatrixCell(resolved=resolved, decided=decided, cells=n)


def _ratio(num: float | None, den: float) -> float | None:
    return num / den if num is not None and den else None


def _arm(
    name: str, campaign: str | None, cells: list[CellFacts], by_instance: dict[str, MatrixCell]
) -> ArmReport:
    tally = _tally(cells)
    clusters = sum(m.decided > 0 for m in by_instance.values())
    reps = max((m.cells for m in by_instance.values()), default=0)
    pass_k: dict[str, float | None] = {}
    for k in range(1, reps + 1):
        estimates = [
            pass_at_k(m.decided, m.resolved, k) for m in by_instance.values() if m.decided >= k
        ]
        pass_k[str(k)] = sum(estimates) / len(estimates) if estimates else None
    runs = [r for c in cells for r in c.runs]
    costs = [r.cost_usd for r in runs if r.cost_usd is not None]
    cost_unknown = len(runs) - len(costs)
    cost = math.fsum(costs) if cost_unknown == 0 else None
    gw_runs = [r for r in runs if r.gateway_calls]
    gw_usd = [r.gateway_usd for r in gw_runs if r.gateway_usd is not None]
    tok_in = [r.tokens_in for r in runs if r.tokens_in is not None]
    tok_out = [r.tokens_out for r in runs if r.tokens_out is not None]
    tok_unknown = sum(r.tokens_in is None or r.tokens_out is None for r in runs)
    walls = [r.wall_s for r in runs if r.wall_s is not None]
    return ArmReport(
        arm=name,
        kind=",".join(sorted({c.arm_kind for c in cells})),
        campaign=campaign,
        cells=len(cells),
        instances=len(by_instance),
        reps=reps,
        decided=tally.decided,
        scored=sum(c.scored for c in cells),
        resolved=tally.resolved,
        infra_failed=sum(c.outcome == "infra_failed" for c in cells),
        operator_failed=sum(c.outcome == "operator_failed" for c in cells),
        interrupted=sum(c.outcome == "interrupted" for c in cells),
        pending=sum(c.outcome == "pending" for c in cells),
        resolve_rate=_ratio(tally.resolved, tally.decided),
        ci95=_clustered_ci(tally, clusters),
        ci_instances=clusters,
        pass_at_k=pass_k,
        runs=len(runs),
        cost_usd=cost,
        cost_usd_known=math.fsum(costs),
        cost_unknown_runs=cost_unknown,
        mean_cost_usd=_ratio(cost, len(runs)),
        cost_per_resolved=_ratio(cost, tally.resolved),
        gateway_runs=len(gw_runs),
        gateway_usd=math.fsum(gw_usd) if gw_runs and len(gw_usd) == len(gw_runs) else None,
        mismatch_runs=sum(bool(r.mismatch) for r in gw_runs),
        tokens_in=sum(tok_in) if tok_unknown == 0 else None,
        tokens_out=sum(tok_out) if tok_unknown == 0 else None,
        tokens_in_known=sum(tok_in),
        tokens_out_known=sum(tok_out),
        tokens_unknown_runs=tok_unknown,
        wall_s_median=quantile(walls, 0.5),
        wall_s_p90=quantile(walls, 0.9),
        self_reported=sum(c.self_reported and c.outcome in DECIDED for c in cells),
        tampered=sum(c.tampered for c in cells),
    )


def _clustered_ci(tally: MatrixCell, clusters: int) -> tuple[float, float] | None:
    """The instance-level Wilson interval: the pooled rate with n = the instances (reps of
    one instance are not independent trials; counting each as one is conservative). With
    one rep per instance it is Wilson's over the cells."""
    if not tally.decided or not clusters:
        return None
    if clusters == tally.decided:
        return wilson(tally.resolved, tally.decided)
    return wilson_rate(tally.resolved / tally.decided, clusters)


def _pair(a: str, b: str, ma: dict[str, MatrixCell], mb: dict[str, MatrixCell]) -> PairReport:
    common = sorted(i for i in ma.keys() & mb.keys() if ma[i].decided and mb[i].decided)
    diffs = [ma[i].resolved / ma[i].decided - mb[i].resolved / mb[i].decided for i in common]
    wins = sum(d > 0 for d in diffs)
    losses = sum(d < 0 for d in diffs)
    return PairReport(
        a=a,
        b=b,
        instances=len(common),
        wins=wins,
        losses=losses,
        ties=len(common) - wins - losses,
        mcnemar_p=mcnemar_exact(wins, losses),
        diff=sum(diffs) / len(diffs) if diffs else None,
        diff_ci95=(
            bootstrap_mean_ci(diffs, resamples=BOOTSTRAP_RESAMPLES, seed=BOOTSTRAP_SEED)
            if len(diffs) <= BOOTSTRAP_MAX_INSTANCES
            else normal_mean_ci(diffs)
        ),
    )


_BY_CELL = attrgetter("cell_id")


def _spend_points(cells: Iterable[CellFacts]) -> list[SpendPoint]:
    settled = sorted(
        (r.settled_at_ms, c.arm, c.cell_id, r.attempt, r.cost_usd)
        for c in cells
        for r in c.runs
        if r.settled_at_ms is not None
    )
    # Exact running sums, so each point is the correctly rounded total, as fsum gives: in
    # units of 2**-shift, the finest any cost needs (every finite float is n / 2**e), as
    # Python integers, whose true division is correctly rounded (Fraction's float() is
    # that division; its additions, with a gcd each, cost several times these).
    ratios = [None if s[4] is None else s[4].as_integer_ratio() for s in settled]
    shift = max((den.bit_length() - 1 for _, den in filter(None, ratios)), default=0)
    scale = 1 << shift
    known: dict[str, int] = defaultdict(int)
    unknown: dict[str, int] = defaultdict(int)
    points = []
    for (at_ms, arm, _cell, _attempt, _cost), ratio in zip(settled, ratios, strict=True):
        if ratio is None:
            unknown[arm] += 1
        else:
            num, den = ratio
            known[arm] += num << (shift - den.bit_length() + 1)
        total = known[arm] / scale
        points.append(SpendPoint(at_ms=at_ms, arm=arm, cost_usd=total, unknown_runs=unknown[arm]))
    return points


def pool_conflicts(facts: Iterable[CellFacts]) -> list[str]:
    """The arm names that differ between campaigns (same name, another spec): pooling
    them would mix two agents under one name. One line each, sorted."""
    specs: dict[str, dict[str, set[str]]] = defaultdict(lambda: defaultdict(set))
    for c in facts:
        specs[c.arm][c.arm_sha256].add(c.campaign)
    return [
        f"arm {name!r} differs between campaigns "
        + " and ".join(", ".join(sorted(camps)) for _, camps in sorted(by_spec.items()))
        for name, by_spec in sorted(specs.items())
        if len(by_spec) > 1
    ]


COUNTING = (
    "Resolve rate = resolved / decided; decided = resolved + unresolved. Unresolved"
    " includes unscored runs (timed out, non-zero exit, aborted by a hang, tampered"
    " workspace) and agent failures: the agent had its chance. Not in the denominator:"
    " infra failed (the infrastructure failed the attempt), operator failed (aborted"
    " before its run), interrupted (its run ended by the daemon's shutdown, an operator's"
    " abort or a lost node: not the agent's result) and pending cells. Only each cell's"
    " current attempt counts. 95% CI: Wilson over the instances (n = instances with a"
    " decided rep, not instances x reps)."
)


def build_report(
    facts: Iterable[CellFacts], campaigns: Sequence[str], *, pool: bool = False
) -> Report:
    """The figures over every given cell (``campaigns``: the selection, for the record).
    Each campaign's arms apart (named "campaign/arm" when there are several), unless
    ``pool``: then same-named arms are one (the caller checks ``pool_conflicts``)."""
    cells = sorted(facts, key=_BY_CELL)
    apart = not pool and len({c.campaign for c in cells}) > 1
    # One pass over the cells, each labeled once (at 100 000 cells every per-cell step
    # of this function is a share of the report's second).
    by_arm: dict[str, list[CellFacts]] = {}
    grid: dict[str, dict[str, list[CellFacts]]] = {}
    for c in cells:
        label = f"{c.campaign}/{c.arm}" if apart else c.arm
        arm_cells = by_arm.get(label)
        if arm_cells is None:
            arm_cells = by_arm[label] = []
            grid[label] = {}
        arm_cells.append(c)
        row = grid[label]
        group = row.get(c.instance_id)
        if group is None:
            row[c.instance_id] = [c]
        else:
            group.append(c)
    matrix = {
        arm: {iid: _tally(grid[arm][iid]) for iid in sorted(grid[arm])} for arm in sorted(grid)
    }
    arm_names = sorted(by_arm)
    instances = sorted({iid for row in grid.values() for iid in row})
    campaign_of = {name: None if pool else by_arm[name][0].campaign for name in arm_names}
    columns = [(arm, matrix[arm]) for arm in arm_names]
    return Report(
        campaigns=sorted(set(campaigns)),
        pooled=pool,
        counting=COUNTING,
        bootstrap_resamples=BOOTSTRAP_RESAMPLES,
        bootstrap_seed=BOOTSTRAP_SEED,
        arms=[_arm(name, campaign_of[name], by_arm[name], matrix[name]) for name in arm_names],
        # Arms are compared only inside one campaign (unless pooled).
        pairs=[
            _pair(a, b, matrix[a], matrix[b])
            for i, a in enumerate(arm_names)
            for b in arm_names[i + 1 :]
            if campaign_of[a] == campaign_of[b]
        ],
        instances=[
            InstanceRow(instance=iid, arms={arm: m[iid] for arm, m in columns if iid in m})
            for iid in instances
        ],
        spend_over_time=_spend_points(cells),
    )
