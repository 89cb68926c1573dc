"""The live progress fold, over the report's hand-made arena log and a real store."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from arenad.home import Home, open_store
from arenad.readmodels.progress import PROGRESS_TAGS, STATES, ProgressFold, eta_s
from arenad.report.service import report_store
from events import cell as ev
from events.base import Event, Recorded
from events.codec import event_tag
from events.control import DaemonStarted, DaemonStopped, MaxParallelChanged
from tests.events.samples import make_spec
from tests.report.arena_log import T0, build_arena


async def _read(home: Path, tags: frozenset[str] | None) -> list[Recorded]:
    async with open_store(Home(home)) as store:
        return [r async for r in store.read_all(0, tags=tags)]


@pytest.fixture(scope="module")
def arena(tmp_path_factory: pytest.TempPathFactory) -> Path:
    home = tmp_path_factory.mktemp("progress") / "home"
    asyncio.run(build_arena(home))
    return home


def test_counts_and_spend_agree_with_the_report(arena: Path) -> None:
    fold = ProgressFold()
    fold.apply_all(asyncio.run(_read(arena, PROGRESS_TAGS)))
    snap = fold.snapshot()
    assert [c.name for c in snap.campaigns] == ["arena", "side"]
    main, side = snap.campaigns
    assert list(main.states) == list(STATES)
    assert {s: n for s, n in main.states.items() if n} == {"recovered": 15, "failed": 1}
    assert {s: n for s, n in side.states.items() if n} == {"submitted": 1, "failed": 1}
    assert (snap.total.cells, snap.total.running, snap.total.paused) == (18, 0, 0)

    async def figures() -> tuple[float, int, int]:
        async with open_store(Home(arena)) as store:
            report = await report_store(store, ["arena"])
        arms = report.arms
        known = sum(a.cost_usd_known for a in arms)
        return known, sum(a.cost_unknown_runs for a in arms), sum(a.runs for a in arms)

    known, unknown, runs = asyncio.run(figures())
    # ALPHA: 7 runs at $0.125 and one never recovered; BETA: 8 runs at $0.25 (its retried
    # cell's first attempt never started a run).
    assert (main.cost_usd, main.cost_unknown_runs, main.runs) == (known, unknown, runs)
    assert (known, unknown, runs) == (0.875 + 2.0, 1, 16)
    assert snap.total.cost_usd == main.cost_usd and snap.last_seq > 0
    # The arena's clock ticks 1 s per append: every terminal cell is after T0. 17 cells
    # ended, and the retried one twice (its first attempt failed).
    assert fold.finished_since(T0) == 18 and fold.finished_since(T0 + 10**9) == 0


def test_reading_only_its_tags_is_the_same_as_reading_everything(arena: Path) -> None:
    everything, some = ProgressFold(), ProgressFold()
    everything.apply_all(asyncio.run(_read(arena, None)))
    some.apply_all(asyncio.run(_read(arena, PROGRESS_TAGS)))
    # last_seq differs when the log ends on an event it does not read; nothing else.
    a, b = everything.snapshot(), some.snapshot()
    assert (a.campaigns, a.total) == (b.campaigns, b.total)


def test_a_campaigns_cells(arena: Path) -> None:
    fold = ProgressFold()
    fold.apply_all(asyncio.run(_read(arena, PROGRESS_TAGS)))
    cells = fold.cells("arena")
    assert len(cells) == 16 and fold.cells("nope") == []
    retried = next(c for c in cells if c.cell_id == "arena:i4:BETA:1")
    assert (retried.attempt, retried.state, retried.runs, retried.cost_usd) == (
        2,
        "recovered",
        1,
        0.25,
    )
    unknown = next(c for c in cells if c.cell_id == "arena:i3:ALPHA:1")
    assert (unknown.state, unknown.cost_unknown_runs, unknown.cost_usd) == ("failed", 1, 0.0)


def _rec(seq: int, stream: str, event: Event, at: int = T0) -> Recorded:
    return Recorded(seq, stream, seq, event_tag(event), 1, at, event)


def test_running_paused_and_the_daemon() -> None:
    spec = make_spec(campaign="live")
    stream = f"cell/{spec.cell_id}"
    fold = ProgressFold()
    fold.apply_all(
        [
            _rec(1, "daemon", DaemonStarted(pid=7, hostname="h", max_parallel=4, version="x")),
            _rec(2, stream, ev.CellSubmitted(spec=spec)),
            _rec(3, stream, ev.CellPaused()),
            _rec(4, "control", MaxParallelChanged(max_parallel=8)),
        ]
    )
    snap = fold.snapshot()
    assert snap.total.paused == 1 and snap.daemon is not None
    assert (snap.daemon.pid, snap.daemon.max_parallel, snap.daemon.stopped_at_ms) == (7, 8, None)
    fold.apply(_rec(5, "daemon", DaemonStopped(pid=7, reason="idle"), at=T0 + 5))
    daemon = fold.snapshot().daemon
    assert daemon is not None and (daemon.stopped_at_ms, daemon.stop_reason) == (T0 + 5, "idle")


def test_eta() -> None:
    assert eta_s(0, 0, 0.0) == 0.0
    assert eta_s(10, 0, 30.0) is None
    assert eta_s(10, 5, 30.0) == 60.0
