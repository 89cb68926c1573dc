"""Spend: what the log knows each campaign has cost, as a pure fold over its events.

Every attempt that started a run costs something; an attempt that never started costs 0.
An attempt's cost is, in this order:

1. recovered (``cell.recovered``): :func:`arenad.cell.spend.run_cost`, the rule the report
   and the live progress count by (the agent store's sessions; a supervisor's own
   whole-tree total) — so the cap, the report and the view agree. A recovery whose rule
   says unknown (a command arm, a store that could not be read) is unknown, whatever the
   stream said while it ran;
2. otherwise (running, or ended and not recovered), the live figure: the best lower bound
   the ingested lines give — opencode's ``step_finish`` parts' ``cost`` on the stdout
   stream (``opencode run --format json``), the supervisor journal's ``settled`` workers'
   ``spent.usd``, state.json's ``result.spentUsd`` (the whole tree), and the model
   gateway's journal of the attempt's calls (source ``gateway``), whichever is largest;
3. unknown, when the arm cannot report cost (a command arm whose output carries none; once
   recovered, a command arm's cost is unknown whatever its output or its store said: both
   are the agent's own word) or its recovery could not say. Unknown is counted apart
   (``unknown_attempts``), never as 0.

A cost read from a line or a file is counted only within the bounds of
:mod:`arenad.recovery.bounds` (finite, >= 0, at most a session's ceiling for a step or a
worker, an attempt's for a whole tree); a recorded figure is checked by ``run_cost``. So
no value in any log makes the fold negative or overflow it.

A campaign's spend is the sum over its attempts, retries included (a retried cell was paid
for twice). Sums are kept in integer pico-dollars, so the fold is exact and the same
whatever order the updates come in; each event updates one attempt and its campaign's
totals in O(1), so the daemon can feed it every ingested batch (:class:`SpendFold`). That is
why it keeps its own running figures rather than re-folding a cell's attempts
(:mod:`arenad.cell.attempts`, what the ledger and the report read): it shares that fold's
rule for which attempt a record is of (``attempt_key``) and the cost rule (``run_cost``).

Feeding the same ingested line twice (a restarted reader) counts it once: cost-bearing
lines are keyed by (source, path, offset).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Literal

import msgspec

from arenad.cell.attempts import attempt_key
from arenad.cell.kinds import kind_of
from arenad.cell.spend import run_cost
from arenad.cell.supervisor_figures import SUPERVISOR_SOURCE
from arenad.recovery.bounds import MAX_ATTEMPT_USD, MAX_SESSION_USD, out_of_bounds
from events import cell as ev
from events.base import Event, Recorded
from events.control import CampaignSubmitted
from events.ingest import FileSnapshotted, LineIngested
from events.specs import arm_of, campaign_of
from events.streams import CAMPAIGN, INGEST, is_cell_stream

UNITS_PER_USD = 10**12

# The log's tags the fold reads outside the ingest streams (a tag-filtered scan).
SPEND_TAGS = frozenset(
    {
        "campaign.submitted",
        "run.started",
        "run.completed",
        "run.timed_out",
        "run.aborted",
        "cell.recovered",
        "cell.failed",
        "cell.supervisor-outcome",
    }
)
# The ingest kinds that can carry a cost (LineIngested.kind: the JSON's "type" or "kind").
COST_KINDS = frozenset({"step_finish", "settled", "spawned", "gateway.call"})


def units(usd: float) -> int:
    return round(usd * UNITS_PER_USD)


def usd(n: int) -> float:
    return n / UNITS_PER_USD


class CampaignSpend(msgspec.Struct, frozen=True, kw_only=True):
    """A campaign's spend as the log knows it. ``spent_usd`` sums the attempts whose cost is
    known (recovered and live); ``unknown_attempts`` started and cannot say."""

    campaign: str
    spent_usd: float = 0.0
    recovered_usd: float = 0.0
    live_usd: float = 0.0
    attempts: int = 0
    running: int = 0
    unknown_attempts: int = 0


def _number(value: object, ceiling: float = MAX_SESSION_USD) -> float | None:
    """A cost read from a line or a file the agent may have written: counted only within
    bounds (finite, >= 0, at most ``ceiling``: arenad.recovery.bounds), else not at all."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if out_of_bounds(value, ceiling) is None else None


def _get(obj: object, *keys: str) -> object:
    for key in keys:
        if not isinstance(obj, dict):
            return None
        obj = obj.get(key)
    return obj


@dataclass(slots=True)
class _Attempt:
    campaign: str
    arm: str
    started: bool = False
    ended: bool = False
    recovered: bool = False
    recovered_units: int | None = None
    supervisor: ev.SupervisorOutcome | None = None
    stream_units: int = 0
    journal_units: int = 0
    state_units: int | None = None
    # The model gateway's journal of this attempt's calls (arenad.gateway): its figure.
    gateway_units: int = 0
    cost_seen: bool = False
    root_ids: set[str] = field(default_factory=set)
    seen: set[tuple[str, str, int]] = field(default_factory=set)


@dataclass(slots=True)
class _Totals:
    known: int = 0
    recovered: int = 0
    live: int = 0
    attempts: int = 0
    running: int = 0
    unknown: int = 0


# An attempt's share of its campaign's totals: (units, how it is known, running?); units
# is 0 for an unknown share.
_Share = tuple[int, Literal["none", "recovered", "live", "unknown"], bool]


def _add(t: _Totals, share: _Share, sign: int) -> None:
    n, how, running = share
    if how == "unknown":
        t.unknown += sign
    t.known += sign * n
    if how == "recovered":
        t.recovered += sign * n
    elif how == "live":
        t.live += sign * n
    t.running += sign * int(running)


class SpendFold:
    """Folds events, one at a time, into every campaign's spend (no I/O: what it knows is
    what it was fed). :meth:`apply` takes a cell, campaign or ingest stream's event."""

    def __init__(self) -> None:
        self._attempts: dict[tuple[str, int], _Attempt] = {}
        # Recovered attempts: their share is final, so only their key is kept.
        self._done: set[tuple[str, int]] = set()
        self._totals: dict[str, _Totals] = {}
        self._arm_kinds: dict[tuple[str, str], str] = {}
        # (campaign, arm) -> the largest known cost of its recovered attempts (units): what
        # a running attempt of the arm is expected to cost at most (the reservations).
        self._arm_max: dict[tuple[str, str], int] = {}
        # Arms with an ended attempt of unknown cost: nothing to reserve by.
        self._arm_unknown: set[tuple[str, str]] = set()
        # Campaign -> its [budget] expected_usd_per_attempt (units): every arm's expected
        # cost until an attempt of it ended with a known one (the latest submission's).
        self._prior: dict[str, int] = {}

    # -- reading ---------------------------------------------------------------------

    def campaign(self, name: str) -> CampaignSpend:
        t = self._totals.get(name)
        if t is None:
            return CampaignSpend(campaign=name)
        return CampaignSpend(
            campaign=name,
            spent_usd=usd(t.known),
            recovered_usd=usd(t.recovered),
            live_usd=usd(t.live),
            attempts=t.attempts,
            running=t.running,
            unknown_attempts=t.unknown,
        )

    def campaigns(self) -> list[str]:
        return sorted(self._totals)

    # -- reservations ----------------------------------------------------------------

    def _expected(self, campaign: str, arm: str) -> int | None:
        n = self._arm_max.get((campaign, arm))
        return n if n is not None else self._prior.get(campaign)

    def expected_usd(self, campaign: str, arm: str) -> float | None:
        """What an attempt of ``arm`` is expected to cost: the largest known cost of its
        ended attempts, else the campaign's prior (``[budget] expected_usd_per_attempt``)
        (None: neither is known yet)."""
        n = self._expected(campaign, arm)
        return None if n is None else usd(n)

    def reserved_usd(self, campaign: str) -> float:
        """What the campaign's running attempts may still spend: each reserves its arm's
        expected cost less what it has spent so far (0 when its arm's is unknown)."""
        return usd(self._reserved(campaign))

    def _reserved(self, campaign: str) -> int:
        total = 0
        for a in self._attempts.values():
            if a.campaign != campaign or not a.started or a.ended:
                continue
            expected = self._expected(campaign, a.arm)
            if expected is not None:
                spent, how, _ = self._share(a)
                total += max(0, expected - (spent if how == "live" else 0))
        return total

    def _widest(self, campaign: str, floor: int) -> int | None:
        """The largest expectation of the campaign's arms (at least ``floor``); None when
        an arm's is not known yet (an arm whose cost can never be known counts 0)."""
        widest = floor
        for c, arm in self._arm_kinds:
            if c != campaign:
                continue
            expected = self._expected(campaign, arm)
            if expected is None and (campaign, arm) not in self._arm_unknown:
                return None
            widest = max(widest, expected or 0)
        return widest

    def may_start(self, campaign: str, arm: str, cap_usd: float, running: int) -> bool:
        """Whether a new attempt of ``arm`` fits under ``cap_usd``: its spend, what the
        ``running`` attempts reserve and its own expectation. With none running, it starts
        while the spend is under the cap (so a campaign always reaches its cap or ends).
        While the arm's expectation is not known yet (no prior, no ended attempt), one
        attempt of the campaign at a time (the first finds it out). An arm whose attempts'
        cost is unknown, and that has no prior, reserves nothing (its spend never counts
        against a cap).

        ``running`` is what the caller drives (the daemon's cells of the campaign), some
        maybe not seen to start here yet (materializing: no RunStarted folded): each of
        those reserves the largest expectation of the campaign's arms, else one scheduling
        pass would fill every free slot on reservations of 0.

        The overshoot this leaves (docs/operations.md, "Budget reservations"): every start
        with others running keeps spent + reserved <= cap, and a lone start has spent <
        cap; an attempt's cost is at most its reservation plus its overrun (what it spends
        beyond its expectation). So the final spend is at most the cap plus the overruns of
        the attempts running after the last start, plus, when that start was a lone one,
        that attempt's expectation."""
        totals = self._totals.get(campaign) or _Totals()
        if running == 0:
            return totals.known < units(cap_usd)
        expected = self._expected(campaign, arm)
        if expected is None:
            # Not known yet: wait for the one running to say, unless its cost never can.
            return (campaign, arm) in self._arm_unknown and totals.known < units(cap_usd)
        unseen = running - totals.running
        pending = 0
        if unseen > 0:
            widest = self._widest(campaign, expected)
            if widest is None:
                return False
            pending = unseen * widest
        return totals.known + self._reserved(campaign) + pending + expected <= units(cap_usd)

    def unrecovered(self) -> list[tuple[str, int]]:
        """(cell id, attempt) of attempts that started and were not recovered: their cost is
        in their ingest streams (what a reader feeds next)."""
        return sorted(key for key, a in self._attempts.items() if a.started and not a.recovered)

    # -- folding ---------------------------------------------------------------------

    def apply(self, stream: str, event: Event) -> str | None:
        """Fold one event; the campaign whose spend may have changed (None: none)."""
        if isinstance(event, CampaignSubmitted):
            if stream.startswith(CAMPAIGN):
                for arm, kind in event.arm_kinds.items():
                    self._arm_kinds[(event.name, arm)] = kind
                if event.expected_usd_per_attempt is not None:
                    prior = _number(event.expected_usd_per_attempt, MAX_ATTEMPT_USD)
                    if prior is not None and prior > 0:
                        self._prior[event.name] = units(prior)
            return None
        key = attempt_key(stream, event)
        if key is None:
            return None
        # Outside its cell stream, an attempt's cost is in its ingested lines and snapshots
        # (its captures carry none).
        if not is_cell_stream(stream) and not (
            stream.startswith(INGEST) and isinstance(event, LineIngested | FileSnapshotted)
        ):
            return None
        return self._update(*key, event)

    def apply_all(self, recorded: Iterable[Recorded]) -> None:
        for r in recorded:
            self.apply(r.stream, r.event)

    def _attempt(self, cell_id: str, attempt: int) -> _Attempt:
        key = (cell_id, attempt)
        found = self._attempts.get(key)
        if found is None:
            campaign, arm = campaign_of(cell_id), arm_of(cell_id)
            found = self._attempts[key] = _Attempt(campaign=campaign, arm=arm)
            self._totals.setdefault(campaign, _Totals())
        return found

    def _share(self, a: _Attempt) -> _Share:
        running = a.started and not a.ended
        if not a.started and not a.cost_seen:
            return 0, "none", False
        if a.recovered:
            if a.recovered_units is None:
                return 0, "unknown", running
            return a.recovered_units, "recovered", running
        live_known = (
            a.cost_seen or kind_of(self._arm_kinds.get((a.campaign, a.arm), "")).reports_cost
        )
        if not live_known:
            return 0, "unknown", running
        live = max(a.stream_units, a.journal_units, a.state_units or 0, a.gateway_units)
        return live, "live", running

    def _update(self, cell_id: str, attempt: int, event: Event) -> str | None:
        key = (cell_id, attempt)
        if key in self._done:
            return None
        if key not in self._attempts and not isinstance(
            event,
            ev.RunStarted
            | ev.CellRecovered
            | ev.SupervisorOutcome
            | LineIngested
            | FileSnapshotted,
        ):
            return None  # the end of an attempt that never started costs nothing
        a = self._attempt(cell_id, attempt)
        before = self._share(a)
        if not self._change(a, event):
            return None
        after = self._share(a)
        if after != before:
            t = self._totals[a.campaign]
            _add(t, before, -1)
            _add(t, after, 1)
        if a.ended:
            # What it cost, as far as known, for what the arm's next attempts reserve (a
            # hint for scheduling, so the live figure counts too; the cap counts its share).
            arm = (a.campaign, a.arm)
            if after[1] in ("live", "recovered"):
                self._arm_max[arm] = max(self._arm_max.get(arm, 0), after[0])
            elif after[1] == "unknown":
                self._arm_unknown.add(arm)
        if a.recovered:  # its share is final
            del self._attempts[key]
            self._done.add(key)
        return a.campaign

    def _change(self, a: _Attempt, event: Event) -> bool:
        match event:
            case ev.RunStarted():
                if a.started:
                    return False
                a.started = True
                self._totals[a.campaign].attempts += 1
                return True
            case ev.RunCompleted() | ev.RunTimedOut() | ev.RunAborted() | ev.CellFailed():
                if a.ended:
                    return False
                a.ended = True
                return True
            case ev.CellRecovered():
                if a.recovered:
                    return False
                a.recovered = a.ended = True
                kind = self._arm_kinds.get((a.campaign, a.arm))
                if kind is None:  # a campaign recorded before its arms' kinds were
                    kind = "supervisor" if event.spend.worker_cwds is not None else "solo"
                figure = run_cost(kind, event, a.supervisor)
                a.recovered_units = units(figure) if figure is not None else None
                return True
            case ev.SupervisorOutcome():
                a.supervisor = event
                return False
            case LineIngested():
                return self._line(a, event)
            case FileSnapshotted():
                return self._snapshot(a, event)
        return False

    def _line(self, a: _Attempt, line: LineIngested) -> bool:
        if line.kind not in COST_KINDS or line.encoding != "utf-8":
            return False
        key = (line.source, line.path, line.offset)
        if key in a.seen:
            return False
        try:
            obj = json.loads(line.raw)
        except (ValueError, RecursionError):
            return False
        if line.source == "gateway":
            if line.kind != "gateway.call":
                return False
            cost = _number(_get(obj, "cost_usd"))
            if cost is None:
                return False
            a.seen.add(key)
            a.gateway_units += units(cost)
        elif line.source == SUPERVISOR_SOURCE:
            if line.path != "journal.jsonl":
                return False
            if line.kind == "spawned":
                ident = _get(obj, "id")
                if isinstance(ident, str) and (
                    _get(obj, "label") == "root" or _get(obj, "parent") is None
                ):
                    a.root_ids.add(ident)
                return False
            if line.kind != "settled" or _get(obj, "id") in a.root_ids:
                return False
            cost = _number(_get(obj, "spent", "usd"))
            if cost is None:
                return False
            a.seen.add(key)
            a.journal_units += units(cost)
        else:
            if line.kind != "step_finish":
                return False
            cost = _number(_get(obj, "part", "cost"))
            if cost is None:
                return False
            a.seen.add(key)
            a.stream_units += units(cost)
        a.cost_seen = True
        return True

    def _snapshot(self, a: _Attempt, snap: FileSnapshotted) -> bool:
        if snap.source != SUPERVISOR_SOURCE or snap.path != "state.json":
            return False
        try:
            obj = json.loads(snap.content)
        except (ValueError, RecursionError):
            return False
        cost = _number(_get(obj, "result", "spentUsd"), MAX_ATTEMPT_USD)
        if cost is None:
            return False
        a.state_units = units(cost)
        a.cost_seen = True
        return True


def fold_spend(recorded: Iterable[Recorded]) -> SpendFold:
    fold = SpendFold()
    fold.apply_all(recorded)
    return fold
