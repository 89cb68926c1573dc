"""Batch retry: `retry --campaign NAME --where ...` opens exactly the matching attempts, in
one transaction, and refuses a filter that matches nothing unless --allow-empty."""

from __future__ import annotations

import asyncio
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from arenad.app.control import control_campaign, retry_campaign
from arenad.app.log import init_home
from arenad.cell.machine import fold
from arenad.errors import UserError
from arenad.home import Home, open_store
from events import cell as ev
from events.base import Event
from events.cell import CellSubmitted
from events.streams import cell_stream
from tests.events.samples import make_spec, sample

REPO_ROOT = Path(__file__).resolve().parents[2]


def _verified(scored: bool, reason: str | None = None) -> ev.CellVerified:
    return ev.CellVerified(attempt=1, scored=scored, not_scored_reason=reason, verify_pass=scored)


def _verified_failing() -> ev.CellVerified:
    return ev.CellVerified(attempt=1, scored=True, verify_pass=False)


def _recovered() -> ev.CellRecovered:
    return ev.CellRecovered(attempt=1, store_available=False, spend=ev.SpendFigures())


def _ran(end: Event, scored: bool, reason: str | None = None) -> list[Event]:
    return [sample(ev.CellMaterialized), sample(ev.RunStarted), end, _verified(scored, reason)]


def _failed(classification: ev.Classification) -> ev.CellFailed:
    return ev.CellFailed(attempt=1, stage="x", error="x", classification=classification)


CELLS: dict[str, list[Event]] = {
    "infra": [_failed("infrastructure")],
    "operator": [_failed("operator")],
    "timed": [
        *_ran(ev.RunTimedOut(attempt=1, wall_s=9.0), False, "timed out (exit 124)"),
        _recovered(),
    ],
    "passed": [*_ran(ev.RunCompleted(attempt=1, rc=0, wall_s=1.0), True), _recovered()],
    "exit1": [
        *_ran(ev.RunCompleted(attempt=1, rc=1, wall_s=1.0), False, "agent exited 1"),
        _recovered(),
    ],
    "verifyfail": [
        sample(ev.CellMaterialized),
        sample(ev.RunStarted),
        ev.RunCompleted(attempt=1, rc=0, wall_s=1.0),
        _verified_failing(),
        _recovered(),
    ],
    # Its run ended by the daemon's shutdown (not requeued yet: an older arenad's log).
    "interrupted": [
        sample(ev.CellMaterialized),
        sample(ev.RunStarted),
        ev.RunAborted(attempt=1, reason="daemon shutting down", cause="shutdown"),
        ev.CellFailed(
            attempt=1, stage="interrupted", error="x", classification="operator"
        ),
    ],
    "running": [sample(ev.CellMaterialized), sample(ev.RunStarted)],
    "waiting": [],
}  # fmt: skip


def _fill(home: Home) -> None:
    async def go() -> None:
        await init_home(home)
        async with open_store(home) as store:
            for iid, events in CELLS.items():
                spec = make_spec(instance_id=iid)
                await store.append(
                    cell_stream(spec.cell_id), 0, [CellSubmitted(spec=spec), *events]
                )

    asyncio.run(go())


def _rows(home: Home) -> int:
    with sqlite3.connect(home.db_path) as db:
        return int(db.execute("SELECT COUNT(*) FROM events").fetchone()[0])


@pytest.mark.parametrize(
    ("where", "expected"),
    [
        ("failed", ["infra", "operator", "interrupted"]),
        ("infra", ["infra"]),
        ("timedOut", ["timed"]),
        ("unscored", ["exit1", "timed"]),
        # Decided and not resolved, as the report counts them (not the interrupted one).
        ("unresolved", ["exit1", "timed", "verifyfail"]),
        ("verify-failed", ["verifyfail"]),
        ("interrupted", ["interrupted"]),
    ],
)
def test_retry_where_opens_exactly_the_matching_attempts(
    tmp_path: Path, where: str, expected: list[str]
) -> None:
    home = Home(tmp_path / "home")
    _fill(home)
    before = _rows(home)
    retried = asyncio.run(retry_campaign(home, "demo", where, "batch"))  # type: ignore[arg-type]
    assert sorted(retried) == sorted(make_spec(instance_id=i).cell_id for i in expected)
    assert _rows(home) == before + len(expected)

    async def states() -> dict[str, int]:
        async with open_store(home) as store:
            out = {}
            for iid in CELLS:
                state = fold(
                    await store.read_stream(cell_stream(make_spec(instance_id=iid).cell_id))
                )
                assert state is not None
                out[iid] = state.attempt
            return out

    attempts = asyncio.run(states())
    assert attempts == {iid: 2 if iid in expected else 1 for iid in CELLS}


def test_one_transaction_or_none(tmp_path: Path) -> None:
    home = Home(tmp_path / "home")
    _fill(home)
    with sqlite3.connect(home.db_path) as db:
        first = db.execute("SELECT MAX(seq) FROM events").fetchone()[0]
    asyncio.run(retry_campaign(home, "demo", "unscored", "batch"))
    with sqlite3.connect(home.db_path) as db:
        seqs = [s for (s,) in db.execute("SELECT seq FROM events WHERE seq > ?", (first,))]
        tags = {t for (t,) in db.execute("SELECT tag FROM events WHERE seq > ?", (first,))}
    assert seqs == [first + 1, first + 2] and tags == {"cell.retried"}


def test_nothing_matching_is_refused_unless_allowed(tmp_path: Path) -> None:
    home = Home(tmp_path / "home")
    _fill(home)
    asyncio.run(retry_campaign(home, "demo", "infra", "first"))
    before = _rows(home)
    with pytest.raises(UserError, match="no cell of campaign 'demo' matches --where infra"):
        asyncio.run(retry_campaign(home, "demo", "infra", "again"))
    assert asyncio.run(retry_campaign(home, "demo", "infra", "again", allow_empty=True)) == []
    assert _rows(home) == before

    def arenad(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "cli", "--home", str(home.root), *args],
            capture_output=True, text=True, cwd=REPO_ROOT, check=False,
        )  # fmt: skip

    empty = arenad("retry", "--campaign", "demo", "--where", "infra")
    assert empty.returncode == 2 and len(empty.stderr.strip().splitlines()) == 1
    allowed = arenad("retry", "--campaign", "demo", "--where", "infra", "--allow-empty")
    assert allowed.returncode == 0 and "0 cell(s) retried" in allowed.stdout
    bad = arenad("retry", "--campaign", "demo", "--where", "nope")
    assert bad.returncode == 2 and "--where must be one of failed, infra, timedOut" in bad.stderr
    ok = arenad("retry", "--campaign", "demo", "--where", "failed")
    assert ok.returncode == 0 and "2 cell(s) retried (--where failed)" in ok.stdout
    unknown = arenad("retry", "--campaign", "nope", "--where", "failed")
    assert unknown.returncode == 2 and "no campaign 'nope'" in unknown.stderr
    assert _rows(home) == before + 2
    # The campaign forms of abort, pause and resume, and their usage errors.
    paused = arenad("pause", "--campaign", "demo", "--where", "running")
    assert paused.returncode == 0, paused.stderr
    assert paused.stdout == "campaign demo: pause recorded for 1 cell(s) (--where running)\n"
    both = arenad("abort", "demo:x:SOLO:0", "--campaign", "demo")
    assert both.returncode == 2 and "not both" in both.stderr
    assert _rows(home) == before + 3


def _cells(*iids: str) -> list[str]:
    return sorted(make_spec(instance_id=i).cell_id for i in iids)


def test_campaign_abort_pause_resume_act_on_exactly_the_matching_cells(tmp_path: Path) -> None:
    home = Home(tmp_path / "home")
    _fill(home)
    with sqlite3.connect(home.db_path) as db:
        first = db.execute("SELECT MAX(seq) FROM events").fetchone()[0]
    # Only the cells not started (--where queued): the running one is left alone.
    aborted = asyncio.run(control_campaign(home, "demo", "abort", where="queued"))
    assert sorted(aborted) == _cells("waiting")
    paused = asyncio.run(control_campaign(home, "demo", "pause"))
    # Finished cells have nothing to pause.
    assert sorted(paused) == _cells("running", "waiting")
    with pytest.raises(UserError, match="no cell of campaign 'demo' matches; nothing to pause"):
        asyncio.run(control_campaign(home, "demo", "pause"))
    resumed = asyncio.run(control_campaign(home, "demo", "resume", where="running"))
    assert sorted(resumed) == _cells("running")
    with sqlite3.connect(home.db_path) as db:
        rows = db.execute("SELECT tag, stream FROM events WHERE seq > ?", (first,)).fetchall()
    assert sorted(t for t, _ in rows) == [
        "cell.abort-requested", "cell.paused", "cell.paused", "cell.resumed"
    ]  # fmt: skip
    with pytest.raises(UserError, match="--where must be one of queued, submitted"):
        asyncio.run(control_campaign(home, "demo", "abort", where="nonsense"))


def test_a_campaign_abort_is_one_transaction(tmp_path: Path) -> None:
    home = Home(tmp_path / "home")
    _fill(home)
    with sqlite3.connect(home.db_path) as db:
        first = db.execute("SELECT MAX(seq) FROM events").fetchone()[0]
    aborted = asyncio.run(control_campaign(home, "demo", "abort", reason="stop it all"))
    assert sorted(aborted) == _cells("running", "waiting")
    with sqlite3.connect(home.db_path) as db:
        # One transaction: the rows carry one commit (tx) id, or at least consecutive seqs
        # written by one append_many (all or none).
        seqs = [s for (s,) in db.execute("SELECT seq FROM events WHERE seq > ?", (first,))]
    assert seqs == [first + 1, first + 2]
