"""Tallies: per campaign × arm × state × outcome counts and per instance × arm outcomes,
kept beside the ``cells`` rows (migrations/0006_tallies.sql).

Each cell adds one ``Contribution`` to one key of each table. When the cells projector
moves a cell from one state to the next (in the append's transaction), the cell's old
contribution is taken from its old key and its new one added to its new key: ``deltas``
computes that, pure, and :class:`CellsProjector` writes it. :func:`tally` is the same
figures folded from the states at once: the contract the SQL tables must meet (tests
compare the two over random logs, and after ``arenad rebuild``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import msgspec

from arenad.budget.spend import units, usd
from arenad.cell.machine import CellState
from arenad.cell.outcome import outcome_of
from arenad.recovery.bounds import attempt_usd

ArmKey = tuple[str, str, str, str]  # campaign, arm, state, outcome
InstanceKey = tuple[str, str, str, str]  # campaign, instance_id, arm, outcome


class ArmTally(msgspec.Struct, frozen=True, kw_only=True):
    """One (campaign, arm, state, outcome)'s cells. ``cost_units``: the current attempts'
    recovered cost in pico-USD, summed over the ``costed`` cells whose cost is known."""

    campaign: str
    arm: str
    state: str
    outcome: str
    cells: int
    paused: int
    scored: int
    costed: int
    cost_units: int
    last_update_ms: int


class InstanceTally(msgspec.Struct, frozen=True, kw_only=True):
    campaign: str
    instance_id: str
    arm: str
    outcome: str
    cells: int


class Tallies(msgspec.Struct, frozen=True, kw_only=True):
    """Both tables, keys with no cell left out, sorted by key."""

    arms: list[ArmTally]
    instances: list[InstanceTally]


# (cells, paused, scored, costed, cost_units): summed; last_update_ms: a max.
_Sums = tuple[int, int, int, int, int]


def _arm_part(state: CellState) -> tuple[ArmKey, _Sums]:
    outcome, scored = outcome_of(state)
    spend = state.recovered.spend if state.recovered is not None else None
    cost = attempt_usd(spend.cost_usd) if spend is not None else None
    key = (state.spec.campaign, state.spec.arm.name, str(state.status), outcome)
    return key, (
        1,
        int(state.paused),
        int(scored),
        int(cost is not None),
        units(cost) if cost is not None else 0,
    )


def _instance_key(state: CellState) -> InstanceKey:
    spec = state.spec
    return (spec.campaign, spec.instance.instance_id, spec.arm.name, outcome_of(state)[0])


class Deltas(msgspec.Struct, kw_only=True):
    """What to add to each key (negative: taken away); ``last`` the newest update time."""

    arms: dict[ArmKey, list[int]]
    last: dict[ArmKey, int]
    instances: dict[InstanceKey, int]


def deltas(before: Mapping[str, CellState | None], after: Mapping[str, CellState | None]) -> Deltas:
    """The tallies' change when each cell of ``after`` moves from its ``before`` state."""
    out = Deltas(arms={}, last={}, instances={})
    for cell_id, new in after.items():
        old = before.get(cell_id)
        if new is None or new is old:
            continue
        for state, sign in ((old, -1), (new, 1)):
            if state is None:
                continue
            key, sums = _arm_part(state)
            acc = out.arms.setdefault(key, [0, 0, 0, 0, 0])
            for i, n in enumerate(sums):
                acc[i] += sign * n
            ikey = _instance_key(state)
            out.instances[ikey] = out.instances.get(ikey, 0) + sign
        key = _arm_part(new)[0]
        out.last[key] = max(out.last.get(key, new.updated_at_ms), new.updated_at_ms)
    return out


def tally(states: Iterable[CellState], last_update: Mapping[str, int] | None = None) -> Tallies:
    """The tallies of ``states`` folded at once. ``last_update``: each cell's latest
    update time if not its state's own (the same whenever recorded times never go back)."""
    arms: dict[ArmKey, list[int]] = {}
    last: dict[ArmKey, int] = {}
    instances: dict[InstanceKey, int] = {}
    for state in states:
        key, sums = _arm_part(state)
        acc = arms.setdefault(key, [0, 0, 0, 0, 0])
        for i, n in enumerate(sums):
            acc[i] += n
        at = (last_update or {}).get(state.cell_id, state.updated_at_ms)
        last[key] = max(last.get(key, at), at)
        ikey = _instance_key(state)
        instances[ikey] = instances.get(ikey, 0) + 1
    return Tallies(
        arms=[
            ArmTally(
                campaign=k[0],
                arm=k[1],
                state=k[2],
                outcome=k[3],
                cells=v[0],
                paused=v[1],
                scored=v[2],
                costed=v[3],
                cost_units=v[4],
                last_update_ms=last[k],
            )
            for k, v in sorted(arms.items())
        ],
        instances=[
            InstanceTally(campaign=k[0], instance_id=k[1], arm=k[2], outcome=k[3], cells=n)
            for k, n in sorted(instances.items())
        ],
    )


ARM_UPSERT = (
    "INSERT INTO arm_tallies (campaign, arm, state, outcome, cells, paused, scored, costed,"
    " cost_units, last_update_ms) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
    " ON CONFLICT (campaign, arm, state, outcome) DO UPDATE SET"
    " cells = cells + excluded.cells, paused = paused + excluded.paused,"
    " scored = scored + excluded.scored, costed = costed + excluded.costed,"
    " cost_units = cost_units + excluded.cost_units,"
    " last_update_ms = MAX(last_update_ms, excluded.last_update_ms)"
)
INSTANCE_UPSERT = (
    "INSERT INTO instance_tallies (campaign, instance_id, arm, outcome, cells)"
    " VALUES (?, ?, ?, ?, ?)"
    " ON CONFLICT (campaign, instance_id, arm, outcome) DO UPDATE SET"
    " cells = cells + excluded.cells"
)


def arm_rows(d: Deltas) -> list[tuple[object, ...]]:
    # A key a cell only left has no ``last``: 0 keeps the stored maximum.
    return [(*k, *v, d.last.get(k, 0)) for k, v in sorted(d.arms.items()) if any(v) or k in d.last]


def instance_rows(d: Deltas) -> list[tuple[object, ...]]:
    return [(*k, n) for k, n in sorted(d.instances.items()) if n]


class ArmOutcomes(msgspec.Struct, frozen=True, kw_only=True):
    """One campaign's arm, summed over its states: what `status --summary` prints. The
    resolve rate is resolved / decided (decided = resolved + unresolved: the report's)."""

    campaign: str
    arm: str
    cells: int
    outcomes: dict[str, int]
    resolved: int
    decided: int
    scored: int
    # The current attempts' recovered cost over the ``costed`` cells that know it.
    costed: int
    cost_usd: float


def arm_outcomes(t: Tallies) -> list[ArmOutcomes]:
    """Each (campaign, arm)'s cells by outcome, by campaign then arm."""
    sums: dict[tuple[str, str], list[int]] = {}
    outcomes: dict[tuple[str, str], dict[str, int]] = {}
    for a in t.arms:
        key = (a.campaign, a.arm)
        acc = sums.setdefault(key, [0, 0, 0, 0])
        acc[0] += a.cells
        acc[1] += a.scored
        acc[2] += a.costed
        acc[3] += a.cost_units
        by = outcomes.setdefault(key, {})
        by[a.outcome] = by.get(a.outcome, 0) + a.cells
    out = []
    for (campaign, arm), (cells, scored, costed, cost_units) in sorted(sums.items()):
        by = dict(sorted(outcomes[(campaign, arm)].items()))
        resolved = by.get("resolved", 0)
        out.append(
            ArmOutcomes(
                campaign=campaign,
                arm=arm,
                cells=cells,
                outcomes=by,
                resolved=resolved,
                decided=resolved + by.get("unresolved", 0),
                scored=scored,
                costed=costed,
                cost_usd=usd(cost_units),
            )
        )
    return out
