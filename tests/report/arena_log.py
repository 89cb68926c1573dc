"""A small arena log whose report is worked out by hand (tests/report/test_project.py).

Campaign ``arena``: arms ALPHA and BETA (solo), instances i1..i4, reps 0 and 1.
Campaign ``side``: arm GAMMA, one pending cell (i1) and one an operator aborted (i2).

    cell    ALPHA                              BETA
    i1 r0   resolved                           resolved
    i1 r1   resolved                           verify passed, judge says no: unresolved
    i2 r0   verify failed: unresolved          verify failed, judge says yes: resolved
    i2 r1   timed out (not scored)             unresolved
    i3 r0   resolved                           aborted (not scored), judge yes: unresolved
    i3 r1   ran, then infra failure at verify  unresolved
    i4 r0   resolved                           unresolved
    i4 r1   resolved                           attempt 1 infra failed at materialize,
                                               attempt 2 unresolved

Every ALPHA run costs $0.125 and 100/10 tokens, except i3 r1's (never recovered: unknown);
every BETA run $0.25 and 200/20 tokens. ALPHA's wall times are 10 20 30 100 40 50 60 70 s
(in the table's order); BETA's are all 5 s. Costs are binary fractions, so sums are exact.
The store's clock ticks 1 s per append, from T0.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from arenad.home import Home, open_store
from arenad.store.base import AppendRequest
from events import cell as ev
from events.base import Event
from tests.events.samples import make_spec

T0 = 1_700_000_000_000

Run = Literal["pass", "fail", "timeout", "abort", "infra-verify"]


class Tick:
    def __init__(self) -> None:
        self.t = T0

    def __call__(self) -> int:
        self.t += 1000
        return self.t


def run_events(
    attempt: int,
    run: Run,
    *,
    wall_s: float,
    cost: float,
    tokens: tuple[int, int],
    judge: bool | None = None,
) -> list[Event]:
    """One attempt from materialized to its end: verified and recovered, or (infra-verify)
    failed after its run completed, before verification."""
    out: list[Event] = [
        ev.CellMaterialized(
            attempt=attempt,
            run_dir=f"/h/run-{attempt}",
            workspace=f"/h/run-{attempt}/ws",
            head="0" * 40,
            clean=True,
            materializer="git",
        ),
        ev.RunStarted(
            attempt=attempt,
            argv=["opencode"],
            cwd="/h",
            pid=1,
            pgid=1,
            started_at_ms=T0,
            deadline_ms=T0 + 1000,
            timeout_s=1.0,
            kill_grace_s=1.0,
        ),
    ]
    if run == "timeout":
        out.append(ev.RunTimedOut(attempt=attempt, wall_s=wall_s))
    elif run == "abort":
        out.append(ev.RunAborted(attempt=attempt, wall_s=wall_s, reason="operator request"))
    else:
        out.append(ev.RunCompleted(attempt=attempt, rc=0, wall_s=wall_s))
    if run == "infra-verify":
        out.append(
            ev.CellFailed(
                attempt=attempt,
                stage="verify",
                error="verify could not start",
                classification="infrastructure",
            )
        )
        return out
    scored = run in ("pass", "fail")
    out.append(
        ev.CellVerified(
            attempt=attempt,
            scored=scored,
            not_scored_reason=None if scored else run,
            verify_rc=(0 if run == "pass" else 1) if scored else None,
            verify_pass=(run == "pass") if scored else None,
        )
    )
    if judge is not None:
        out.append(
            ev.JudgeVerdictRecorded(
                attempt=attempt,
                judge="official",
                verdict_json=f'{{"resolved":{str(judge).lower()}}}',
                resolved=judge,
                score=None,
            )
        )
    out.append(
        ev.CellRecovered(
            attempt=attempt,
            store_available=True,
            spend=ev.SpendFigures(cost_usd=cost, tokens_in=tokens[0], tokens_out=tokens[1]),
        )
    )
    return out


def _cell(campaign: str, iid: str, arm: str, rep: int, events: list[Event]) -> AppendRequest:
    spec = make_spec(campaign=campaign, instance_id=iid, arm=arm, rep=rep)
    return AppendRequest(f"cell/{spec.cell_id}", 0, [ev.CellSubmitted(spec=spec), *events])


def _alpha(run: Run, wall_s: float) -> list[Event]:
    return run_events(1, run, wall_s=wall_s, cost=0.125, tokens=(100, 10))


def _beta(run: Run, judge: bool | None = None, attempt: int = 1) -> list[Event]:
    return run_events(attempt, run, wall_s=5.0, cost=0.25, tokens=(200, 20), judge=judge)


def arena_requests() -> list[AppendRequest]:
    retried: list[Event] = [
        ev.CellFailed(
            attempt=1, stage="materialize", error="clone failed", classification="infrastructure"
        ),
        ev.CellRetried(attempt=2, reason="infrastructure failure", requested_by="policy"),
        *_beta("fail", attempt=2),
    ]
    aborted = ev.CellFailed(
        attempt=1, stage="abort", error="aborted before the run started", classification="operator"
    )
    return [
        _cell("arena", "i1", "ALPHA", 0, _alpha("pass", 10.0)),
        _cell("arena", "i1", "ALPHA", 1, _alpha("pass", 20.0)),
        _cell("arena", "i2", "ALPHA", 0, _alpha("fail", 30.0)),
        _cell("arena", "i2", "ALPHA", 1, _alpha("timeout", 100.0)),
        _cell("arena", "i3", "ALPHA", 0, _alpha("pass", 40.0)),
        _cell("arena", "i3", "ALPHA", 1, _alpha("infra-verify", 50.0)),
        _cell("arena", "i4", "ALPHA", 0, _alpha("pass", 60.0)),
        _cell("arena", "i4", "ALPHA", 1, _alpha("pass", 70.0)),
        _cell("arena", "i1", "BETA", 0, _beta("pass")),
        _cell("arena", "i1", "BETA", 1, _beta("pass", judge=False)),
        _cell("arena", "i2", "BETA", 0, _beta("fail", judge=True)),
        _cell("arena", "i2", "BETA", 1, _beta("fail")),
        _cell("arena", "i3", "BETA", 0, _beta("abort", judge=True)),
        _cell("arena", "i3", "BETA", 1, _beta("fail")),
        _cell("arena", "i4", "BETA", 0, _beta("fail")),
        _cell("arena", "i4", "BETA", 1, retried),
        _cell("side", "i1", "GAMMA", 0, []),
        _cell("side", "i2", "GAMMA", 0, [aborted]),
    ]


async def build_arena(home: Path) -> None:
    """Append the arena through the home's store, one cell per transaction (the cells read
    model checks every transition)."""
    async with open_store(Home(home), clock=Tick(), create=True) as store:
        for request in arena_requests():
            await store.append_many([request])
