"""Benchmark: the view's campaign page (a results table) at many cells.

    .venv/bin/python -m bench.view [--cells 100000]

One campaign of N cells (a problem statement of 2 KB each, about a SWE-bench row's) is
written into a fresh home, as ``submit`` writes it, and a share is moved on to each result
(resolved, unresolved, not scored, running; the rest pending), as a daemon would append
it. Then the view's app (in this process, Starlette's test client: no network in the
figure) serves the campaign page in the ways a reader asks it: the first page, sorted by
cost, filtered by result (the stored state read for every cell of the campaign), a far
page, an instance search, the results region alone, as of an early event (a fold of the
log's prefix), a cell. Each is timed (the best of 3) and its size printed, beside a
baseline measured in the same run: a raw SQLite read of the campaign's cells' id, state
and cost (every row, no page). Issue 33's goal: every page under 300 ms and 1 MB at 100 000 cells.
"""

from __future__ import annotations

import argparse
import asyncio
import resource
import shutil
import sqlite3
import tempfile
import time
from pathlib import Path
from urllib.parse import quote

from starlette.testclient import TestClient

from arenad.home import Home, open_store
from arenad.store.base import AppendRequest
from arenad.view.server import build_app
from events import cell as ev
from events.base import Event
from events.specs import CellSpec, InstanceSpec, MaterializerSpec, SoloArm
from events.streams import cell_stream

TOKEN = "bench"


def _moved(i: int) -> list[Event]:
    started: list[Event] = [
        ev.CellMaterialized(
            attempt=1,
            run_dir="/r",
            workspace="/r/ws",
            head="0" * 40,
            clean=True,
            materializer="git",
        ),
        ev.RunStarted(
            attempt=1,
            argv=["opencode", "run"],
            cwd="/r/ws",
            pid=1,
            pgid=1,
            started_at_ms=0,
            deadline_ms=1,
            timeout_s=1.0,
            kill_grace_s=1.0,
        ),
    ]
    match i % 5:
        case 0 | 1:
            passed = i % 5 == 0
            return [
                *started,
                ev.RunCompleted(attempt=1, rc=0, wall_s=float(i % 97)),
                ev.CellVerified(attempt=1, scored=True, verify_rc=1 - passed, verify_pass=passed),
                ev.CellRecovered(
                    attempt=1,
                    store_available=True,
                    spend=ev.SpendFigures(sessions=1, cost_usd=(i % 89) / 1000),
                ),
            ]
        case 2:
            return [
                ev.CellFailed(
                    attempt=1, stage="run", error="provider down", classification="infrastructure"
                )
            ]
        case 3:
            return started if i % 10 == 3 else []
    return []


def _spec(campaign: str, i: int) -> CellSpec:
    return CellSpec(
        campaign=campaign,
        instance=InstanceSpec(
            instance_id=f"org__proj-{i}",
            repo="org/proj",
            base_commit=f"{i:040x}",
            problem_statement=f"bug {i}: " + "x" * 2000,
            verify_cmd=f"pytest tests/test_{i}.py",
        ),
        arm=SoloArm(name="SOLO" if i % 3 else "CLI", model="p/m", timeout_s=120.0),
        rep=0,
        materializer=MaterializerSpec(kind="git", source="/srv/proj"),
    )


async def _fill(home: Path, campaign: str, n: int) -> tuple[str, int]:
    """(a cell's id, the log's last event)."""
    async with open_store(Home(home), create=True) as store:
        specs = [_spec(campaign, i) for i in range(n)]
        for j in range(0, n, 2000):
            await store.append_many(
                [
                    AppendRequest(cell_stream(s.cell_id), 0, [ev.CellSubmitted(spec=s)])
                    for s in specs[j : j + 2000]
                ]
            )
        moved = [
            AppendRequest(cell_stream(s.cell_id), 1, events)
            for i, s in enumerate(specs)
            if (events := _moved(i))
        ]
        for j in range(0, len(moved), 2000):
            await store.append_many(moved[j : j + 2000])
        return specs[0].cell_id, await store.last_seq()


def _raw_scan(db: Path, campaign: str) -> float:
    t0 = time.perf_counter()
    with sqlite3.connect(db) as c:
        rows = c.execute(
            "SELECT cell_id, state, cost_usd FROM cells WHERE campaign = ?", (campaign,)
        ).fetchall()
    assert rows
    return time.perf_counter() - t0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cells", type=int, default=100_000)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="arenad-bench-view-"))
    try:
        home = root / "home"
        campaign = f"bench{args.cells}"
        t0 = time.perf_counter()
        a_cell, head = asyncio.run(_fill(home, campaign, args.cells))
        print(f"{args.cells} cells written in {time.perf_counter() - t0:.1f} s ({head} events)")
        base = f"/campaigns/{campaign}"
        db = Home(home).db_path
        raw = min(_raw_scan(db, campaign) for _ in range(3))
        print(
            f"baseline, a raw read of the campaign's cells (id, state, cost): {raw * 1000:7.1f} ms"
        )
        pages = [
            base,
            f"{base}?sort=cost&order=desc",
            f"{base}?result=resolved",
            f"{base}?result=not_scored&page=50",
            f"{base}?q=proj-9999",
            f"{base}/results?sort=wall",
            f"{base}?as_of={head // 50}",
            f"/cells/{quote(a_cell, safe='')}",
        ]
        app = build_app(Home(home), token=TOKEN)
        worst = 0.0
        with TestClient(
            app, base_url="http://127.0.0.1:8686", headers={"authorization": f"Bearer {TOKEN}"}
        ) as client:
            # The overview waits for the follower's first read of the log: pages timed
            # after it, not beside it (it shares the store's connection).
            client.get("/")
            for path in pages:
                times = []
                for _ in range(3):
                    t0 = time.perf_counter()
                    r = client.get(path)
                    times.append(time.perf_counter() - t0)
                    assert r.status_code == 200, (path, r.status_code, r.text[:300])
                best = min(times)
                worst = max(worst, best) if "as_of" not in path else worst
                print(
                    f"{path[:60]:<60} {best * 1000:8.1f} ms {len(r.content) / 1024:7.1f} KiB"
                    f"  {best / raw:6.2f}x raw"
                )
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print(f"slowest page (as_of aside): {worst * 1000:.0f} ms; peak RSS {peak:.0f} MiB")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
