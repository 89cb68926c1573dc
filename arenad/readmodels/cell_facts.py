"""One cell's report facts: the small, frozen summary of its ``cell/<id>`` stream that the
report's figures are built from (:mod:`arenad.report.project` states the rules). Pure: the
report's fold over a log (or a prefix of it) and the report-facts read model
(:mod:`arenad.readmodels.report_facts`, kept in the append's transaction) both call
:func:`cell_facts`, so the two agree by construction.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from typing import Any

import msgspec

from arenad.cell.attempts import attempts
from arenad.cell.machine import fold
from arenad.cell.outcome import Outcome, outcome_of
from arenad.cell.spend import run_cost, run_tokens
from arenad.gateway.reconcile import gateway_calls, gateway_figures, mismatch
from events import cell as ev
from events.base import Recorded

__all__ = ["CellFacts", "RunFacts", "cell_facts"]

_spec_encoder = msgspec.json.Encoder(order="deterministic")


class RunFacts(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """One attempt that started an agent run."""

    attempt: int
    wall_s: float | None
    cost_usd: float | None
    tokens_in: int | None
    tokens_out: int | None
    # When the attempt settled: its CellRecovered, else the CellFailed that ended it;
    # None while it has not.
    settled_at_ms: int | None
    # The model gateway's records of the run (none: it did not go through the gateway):
    # how many calls, their cost as the gateway priced them (None: unknown), and the
    # fields where the gateway and the agent's store disagree beyond rounding.
    gateway_calls: int = 0
    gateway_usd: float | None = None
    mismatch: tuple[str, ...] = ()


class CellFacts(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    cell_id: str
    campaign: str
    instance_id: str
    arm: str
    arm_kind: str
    # The arm's whole spec, hashed: same-named arms of two campaigns pool only if equal.
    arm_sha256: str = ""
    rep: int
    attempt: int
    outcome: Outcome
    scored: bool
    runs: tuple[RunFacts, ...]
    # The verdict was made in the agent's own workspace (``verify_in = "workspace"``).
    self_reported: bool = False
    # The agent changed paths under the excludes or runner config (the verdict's
    # ``tampered_paths``; graded as in base unless self-reported).
    tampered: bool = False


def _agent_figures(recovered: ev.CellRecovered | None) -> dict[str, Any]:
    if recovered is None:
        return {}
    s = recovered.spend
    return {
        "usd": s.cost_usd,
        "tokens_in": s.tokens_in,
        "tokens_out": s.tokens_out,
        "tokens_reasoning": s.tokens_reasoning,
        "cache_read": s.cache_read,
        "cache_write": s.cache_write,
    }


def _gateway_run(
    recovered: ev.CellRecovered | None, ingest: Sequence[Recorded]
) -> tuple[int, float | None, tuple[str, ...]]:
    calls = gateway_calls(ingest)
    if not calls:
        return 0, None, ()
    figures = gateway_figures(calls)
    usd = figures["usd"]
    return len(calls), usd, tuple(mismatch(_agent_figures(recovered), figures))


def cell_facts(
    records: Sequence[Recorded], ingest: Mapping[int, Sequence[Recorded]] | None = None
) -> CellFacts | None:
    """One cell's facts from its ``cell/<id>`` stream (None for an empty stream), with
    ``ingest``: the ``ingest/<id>/<attempt>`` streams of its runs through the model gateway,
    by attempt (their gateway records; none given: no gateway figures)."""
    ordered = sorted(records, key=lambda r: r.seq)
    state = fold(ordered)
    if state is None:
        return None
    # The attempts that started a run (one that never started cost nothing).
    runs = [a for a in attempts(ordered) if a.started is not None]
    spec = state.spec
    kind = type(spec.arm).__struct_config__.tag
    assert isinstance(kind, str)
    outcome, scored = outcome_of(state)
    verified = state.verified
    gateway = {a.n: _gateway_run(a.recovered, (ingest or {}).get(a.n, ())) for a in runs}
    return CellFacts(
        cell_id=state.cell_id,
        campaign=spec.campaign,
        instance_id=spec.instance.instance_id,
        arm=spec.arm.name,
        arm_kind=kind,
        arm_sha256=hashlib.sha256(_spec_encoder.encode(spec.arm)).hexdigest(),
        rep=spec.rep,
        attempt=state.attempt,
        outcome=outcome,
        scored=scored,
        runs=tuple(
            RunFacts(
                attempt=a.n,
                wall_s=a.wall_s,
                cost_usd=run_cost(kind, a.recovered, a.supervisor),
                tokens_in=run_tokens(a.recovered)[0],
                tokens_out=run_tokens(a.recovered)[1],
                settled_at_ms=a.settled_at_ms,
                gateway_calls=gateway[a.n][0],
                gateway_usd=gateway[a.n][1],
                mismatch=gateway[a.n][2],
            )
            for a in runs
        ),
        self_reported=verified is not None and verified.verify_in == "workspace",
        tampered=verified is not None and bool(verified.tampered_paths),
    )
