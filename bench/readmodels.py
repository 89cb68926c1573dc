"""Benchmark: what users ask of a 100 000-cell campaign, against a raw SQLite scan.

    .venv/bin/python -m bench.readmodels [--cells 100000] [--repeat 2]

A home is built through the real SqliteEventStore (batched appends; the home's read models
-- cells and tallies, spend, report facts -- kept in the same transactions, as a daemon's
appends keep them): one
campaign, ``--cells`` cells over two arms, a share of them run to each outcome — 20 %
never started, 2 % running, 40 % resolved, 24 % unresolved, 6 % timed out (not scored),
4 % failed at verify (infrastructure), 4 % judged against their verify command.

Then each command runs as the CLI in a fresh process, ``--repeat`` times (the best kept: a
shared machine only ever adds time), and prints its wall time, its output's bytes and its
peak RSS (the child's ru_maxrss), and the ratio of its time to the baseline measured in
the same run:

- baseline: a raw read of the whole log with stdlib sqlite3 (every event row fetched,
  nothing decoded) — what any answer folded from the log at least costs;
- before: the GROUP BY over the ``cells`` table that ``status --summary`` ran before the
  tallies (every cell's row read, its stored state included);
- the CLI's floor: ``campaigns --help``, a command's imports and argument parsing (typer
  builds its parameters' pydantic adapters) with no work done;
- ``status --summary``, ``campaigns`` (the tallies and the spend read model), ``report
  --json`` (the report-facts read model): each against its goal (< 1 s).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ARENAD = str(Path(sys.executable).parent / "arenad")
T0 = 1_785_000_000_000
GOAL_S = 1.0
BATCH = 500

RAW_SCAN = """
import sqlite3, sys
db = sqlite3.connect(sys.argv[1])
n = 0
for row in db.execute("SELECT seq, stream, version, tag, recorded_at_ms, payload FROM events"):
    n += 1
print(n)
"""

BEFORE = """
import sqlite3, sys
db = sqlite3.connect(sys.argv[1])
rows = db.execute(
    "SELECT campaign, state, COUNT(*), MAX(updated_at_ms) FROM cells GROUP BY campaign, state"
).fetchall()
print(rows)
"""


def _events(i: int, arms: list[Any]) -> list[Any]:
    """One cell's events: its share of the outcomes by ``i % 50``."""
    from events import cell as ev
    from events.specs import CellSpec, InstanceSpec, MaterializerSpec

    arm = arms[i % 2]
    spec = CellSpec(
        campaign="big",
        instance=InstanceSpec(
            instance_id=f"org__proj-{i // 2:05d}",
            repo="example/widgets",
            base_commit="0123456789abcdef0123456789abcdef01234567",
            problem_statement="The widget frobnicates twice when the lever is pulled once. " * 8,
            verify_cmd="python -m pytest -q tests/test_widget.py",
        ),
        arm=arm,
        rep=0,
        materializer=MaterializerSpec(kind="git", source="/srv/widgets"),
    )
    share = i % 50
    out: list[Any] = [ev.CellSubmitted(spec=spec)]
    if share < 10:  # 20 %: never started
        return out
    run_dir = f"/bench/runs/{i}"
    at = T0 + i * 10
    out += [
        ev.CellMaterialized(
            attempt=1,
            run_dir=run_dir,
            workspace=f"{run_dir}/ws",
            head="0" * 40,
            clean=True,
            materializer="git",
        ),
        ev.RunStarted(
            attempt=1,
            argv=["arenad-command-arm"],
            cwd=f"{run_dir}/ws",
            pid=1000 + i,
            pgid=1000 + i,
            started_at_ms=at,
            deadline_ms=at + 1_000_000,
            timeout_s=1000.0,
            kill_grace_s=1.0,
        ),
    ]
    if share < 11:  # 2 %: running
        return out
    wall = 10.0 + share
    if 36 <= share < 39:  # 6 %: timed out
        out.append(ev.RunTimedOut(attempt=1, wall_s=wall))
    else:
        out.append(ev.RunCompleted(attempt=1, rc=0, wall_s=wall))
    if 39 <= share < 41:  # 4 %: the verify could not run
        out.append(
            ev.CellFailed(
                attempt=1,
                stage="verify",
                error="verify could not start",
                classification="infrastructure",
            )
        )
        return out
    scored = not 36 <= share < 39
    passed = share < 31  # 40 % resolved
    out.append(
        ev.CellVerified(
            attempt=1,
            scored=scored,
            not_scored_reason=None if scored else "timeout",
            verify_rc=(0 if passed else 1) if scored else None,
            verify_pass=passed if scored else None,
        )
    )
    if share >= 48:  # 4 %: judged (saying the opposite of the verify command)
        out.append(
            ev.JudgeVerdictRecorded(
                attempt=1,
                judge="official",
                verdict_json='{"resolved": true}',
                resolved=not passed,
                score=None,
            )
        )
    out.append(
        ev.CellRecovered(
            attempt=1,
            store_available=True,
            spend=ev.SpendFigures(cost_usd=0.01 * (1 + share % 7), tokens_in=1000, tokens_out=100),
        )
    )
    return out


class _Clock:
    def __init__(self) -> None:
        self.t = T0

    def __call__(self) -> int:
        self.t += 1
        return self.t


async def build(root: Path, cells: int) -> None:
    from arenad.app.log import init_home
    from arenad.home import Home, open_store
    from events.specs import SoloArm
    from events.streams import cell_stream

    home = Home(root)
    await init_home(home)
    arms = [SoloArm(name="ALPHA", model="zai/glm-5"), SoloArm(name="BETA", model="zai/glm-5")]
    from arenad.store.base import AppendRequest

    async with open_store(home, clock=_Clock(), synchronous="NORMAL") as store:
        for start in range(0, cells, BATCH):
            requests = []
            for i in range(start, min(cells, start + BATCH)):
                events = _events(i, arms)
                requests.append(AppendRequest(cell_stream(events[0].spec.cell_id), 0, events))
            await store.append_many(requests)


def measure(argv: list[str], repeat: int) -> tuple[float, int, float]:
    """(best wall s, stdout bytes, peak RSS MiB) of ``argv`` run ``repeat`` times."""
    best: tuple[float, int, float] | None = None
    for _ in range(repeat):
        with tempfile.TemporaryFile() as out:
            t0 = time.perf_counter()
            proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.PIPE)
            _, status, usage = os.wait4(proc.pid, 0)
            wall = time.perf_counter() - t0
            proc.returncode = os.waitstatus_to_exitcode(status)
            err = proc.stderr.read() if proc.stderr is not None else b""
            if proc.returncode != 0:
                raise SystemExit(f"{argv}: exit {proc.returncode}: {err.decode()[-500:]}")
            size = out.tell()
        one = (wall, size, usage.ru_maxrss / 1024)
        if best is None or one[0] < best[0]:
            best = one
    assert best is not None
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cells", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=2)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="arenad-bench-readmodels-"))
    try:
        t0 = time.perf_counter()
        asyncio.run(build(root, args.cells))
        db = str(root / "arenad.db")
        size = os.path.getsize(db)
        print(
            f"built {args.cells} cells in {time.perf_counter() - t0:.1f} s"
            f" ({size / 2**20:.0f} MiB log)"
        )
        py = sys.executable
        base = measure([py, "-c", RAW_SCAN, db], args.repeat)
        runs = [
            ("raw scan of the log (baseline)", base, False),
            ("interpreter start (arenad --help)", measure([ARENAD, "--help"], args.repeat), False),
            ("before: GROUP BY over cells", measure([py, "-c", BEFORE, db], args.repeat), False),
        ]
        cli = [ARENAD, "--home", str(root)]
        floor = measure([*cli, "campaigns", "--help"], args.repeat)
        runs.append(("CLI floor (campaigns --help)", floor, False))
        for name, extra in (
            ("status --summary", ["status", "--summary"]),
            ("campaigns", ["campaigns"]),
            ("report --json", ["report", "--json"]),
        ):
            runs.append((name, measure([*cli, *extra], args.repeat), True))
        print(f"{'':34} {'wall s':>7} {'bytes':>9} {'RSS MiB':>8} {'/ raw':>6}  goal")
        for name, (wall, nbytes, rss), goal in runs:
            mark = ("met" if wall < GOAL_S else "MISSED") + f" (< {GOAL_S:.0f} s)" if goal else ""
            print(f"{name:34} {wall:7.2f} {nbytes:9d} {rss:8.0f} {wall / base[0]:6.2f}  {mark}")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
