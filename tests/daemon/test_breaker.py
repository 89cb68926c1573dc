"""The circuit breaker (issue 29): 20 cells with one systematic infrastructure cause stop
after K (the campaign's `breaker_after`), paused with one `campaign.breaker-tripped`
naming the cause; `resume --campaign` lets them go on (a real daemon, real git)."""

from __future__ import annotations

from pathlib import Path

from arenad.daemon.breaker import Breaker
from events import cell as ev
from events.control import BreakerTripped
from tests.conftest import make_repo
from tests.daemon.support import cli, command_campaign, read_all, submitted

K = 3


def test_a_systematic_cause_pauses_the_campaign_after_k(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    base = make_repo(repo, {"a.txt": "a\n"})
    camp = command_campaign(
        tmp_path / "c.toml",
        name="br",
        repo=repo,
        base=base,
        argv=["true"],
        instances=tuple(f"i{n}" for n in range(20)),
        extra=f"breaker_after = {K}",
    )
    home = submitted(tmp_path / "home", camp)
    # The source goes away after submit (which checked it): every checkout fails alike.
    aside = tmp_path / "aside"
    repo.rename(aside)
    done = cli(home, "daemon", "--until-idle", "--max-parallel", "1", "--infra-retries", "0")
    assert done.returncode == 0, done.stderr
    assert "paused by the circuit breaker: 3 consecutive infrastructure failures" in done.stderr
    records = read_all(home)
    failed = [r.event for r in records if isinstance(r.event, ev.CellFailed)]
    assert len(failed) == K and len({f.stage for f in failed}) == 1
    trips = [r.event for r in records if isinstance(r.event, BreakerTripped)]
    assert len(trips) == 1
    trip = trips[0]
    assert (trip.cause, trip.failures, trip.paused) == (failed[0].stage, K, 20 - K)
    paused = [r for r in records if isinstance(r.event, ev.CellPaused)]
    assert len(paused) == 20 - K and "circuit breaker" in paused[0].event.reason
    assert not [r for r in records if isinstance(r.event, ev.RunStarted)]

    # The cause fixed, `resume --campaign` lets the campaign go on.
    aside.rename(repo)
    assert cli(home, "resume", "--campaign", "br").returncode == 0
    again = cli(home, "daemon", "--until-idle", "--max-parallel", "4")
    assert again.returncode == 0, again.stderr
    records = read_all(home)
    assert sum(isinstance(r.event, ev.CellRecovered) for r in records) == 20 - K


def test_the_breaker_counts_one_cause_in_a_row() -> None:
    """Another cause starts a new run; a run that ends, or an agent's failure, ends it."""
    breaker = Breaker(3)

    def fail(cell: str, stage: str, kind: str = "infrastructure") -> object:
        return breaker.apply(
            cell, [ev.CellFailed(attempt=1, stage=stage, error="x", classification=kind)]
        )

    assert fail("c:i1:A:0", "clone-fail") is None
    assert fail("c:i2:A:0", "clone-fail") is None
    assert fail("c:i3:A:0", "launch") is None  # another cause: a new run
    assert fail("c:i4:A:0", "launch") is None
    assert breaker.apply("c:i5:A:0", [ev.RunCompleted(attempt=1, rc=0, wall_s=1.0)]) is None
    assert fail("c:i6:A:0", "launch") is None
    assert fail("c:i7:A:0", "launch") is None
    assert fail("c:i8:A:0", "launch", "agent") is None
    assert fail("d:i1:A:0", "launch") is None  # another campaign's
    assert fail("c:i9:A:0", "launch") is None
    assert fail("c:i10:A:0", "launch") is None
    trip = fail("c:i11:A:0", "launch")
    assert trip is not None and trip.cells == ["c:i9:A:0", "c:i10:A:0", "c:i11:A:0"]
    assert fail("c:i12:A:0", "launch") is None  # counted from 0 after a trip
    breaker.after["c"] = 0
    assert all(fail(f"c:x{n}:A:0", "launch") is None for n in range(10))  # 0: never
