"""Benchmark: N cells of a no-op command arm through the daemon's whole state machine.

    .venv/bin/python -m bench.daemon [--cells 1000] [--max-parallel 16]

Each cell: git materialize (a copy of the prepared checkout of its source and base; every
cell shares one, made once by a clone + work branch) -> run `true` through the detached run
wrapper -> patch (git add -A + diff) -> verify (`true`) -> recover (store absent: a recorded
gap), every transition appended to the SQLite log. The baseline, measured in the same run,
does the same real work (the same materializer, `true` in its own process group, patch,
verify) with a plain asyncio script and no log, so the ratio is the daemon's cost (its
log, and the run wrapper that lets an agent outlive it) over the work itself.

Prints cells/s, daemon overhead per cell (ms), p50/p95 per-step latency (deltas of the cell
events' recorded_at_ms) and the daemon/baseline wall ratio.

The daemon runs twice, the same campaign with ``[sandbox] kind = "none"`` and with the
default ``"bwrap"`` (the agent run and verify each in a bubblewrap sandbox), and prints the
sandbox's per-cell cost and the bwrap/none wall ratio. The per-step figures are the bwrap
run's (the default configuration).
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import logging
import os
import shutil
import statistics
import subprocess
import tempfile
import time
from collections import defaultdict
from pathlib import Path

from arenad.app import init_home
from arenad.app.submit import submit_campaign
from arenad.daemon.daemon import DaemonOptions, run_daemon
from arenad.home import Home, open_store
from arenad.materialize import WorkspaceTemplates
from arenad.verdict.patch import extract_patch
from arenad.verdict.verify import run_verify
from events import streams
from events.base import Recorded

GIT_ENV = {
    "GIT_AUTHOR_NAME": "bench",
    "GIT_AUTHOR_EMAIL": "bench@arenad",
    "GIT_COMMITTER_NAME": "bench",
    "GIT_COMMITTER_EMAIL": "bench@arenad",
}


def make_repo(path: Path) -> str:
    path.mkdir(parents=True)
    env = {**os.environ, **GIT_ENV}
    for args in (["init", "-q", "-b", "main"],):
        subprocess.run(["git", "-C", str(path), *args], check=True, env=env)
    (path / "a.txt").write_text("a\n")
    subprocess.run(["git", "-C", str(path), "add", "-A"], check=True, env=env)
    subprocess.run(["git", "-C", str(path), "commit", "-q", "-m", "base"], check=True, env=env)
    out = subprocess.run(
        ["git", "-C", str(path), "rev-parse", "HEAD"], check=True, capture_output=True, text=True
    )
    return out.stdout.strip()


def write_campaign(
    path: Path, repo: Path, base: str, cells: int, parallel: int, sandbox: str
) -> None:
    lines = [
        'name = "bench"',
        'split = "dev"',
        f"max_parallel = {parallel}",
        "[sandbox]",
        f'kind = "{sandbox}"',
        "[materializer]",
        'kind = "git"',
        f'source = "{repo}"',
    ]
    for i in range(cells):
        lines += [
            "[[instances]]",
            f'instance_id = "i{i:05d}"',
            f'base_commit = "{base}"',
            'problem_statement = "nothing"',
            'verify_cmd = "true"',
        ]
    lines += [
        "[[arms]]",
        'name = "NOOP"',
        'kind = "command"',
        'argv = ["true"]',
        "uses_model = false",
        "timeout_s = 60",
    ]
    path.write_text("\n".join(lines) + "\n")


async def baseline(root: Path, repo: Path, base: str, cells: int, parallel: int) -> float:
    sem = asyncio.Semaphore(parallel)
    templates = WorkspaceTemplates(root / "templates")

    async def one(i: int) -> None:
        async with sem:
            run_dir = root / f"c{i:05d}"
            run_dir.mkdir(parents=True)
            ws = run_dir / "ws"
            await templates.materialize(str(repo), base, ws)
            p = await asyncio.create_subprocess_exec(
                "true", cwd=ws, stdin=subprocess.DEVNULL, start_new_session=True
            )
            await p.wait()
            await extract_patch(ws, base, [], run_dir / "p.patch")
            await run_verify("true", ws, run_dir / "verify.log")

    t0 = time.perf_counter()
    await asyncio.gather(*(one(i) for i in range(cells)))
    return time.perf_counter() - t0


async def daemon_run(
    root: Path, repo: Path, base: str, cells: int, parallel: int, sandbox: str
) -> tuple[float, list[Recorded]]:
    home = Home(root / f"home-{sandbox}")
    await init_home(home)
    camp = root / f"bench-{sandbox}.toml"
    write_campaign(camp, repo, base, cells, parallel, sandbox)
    await submit_campaign(home, camp)
    t0 = time.perf_counter()
    await run_daemon(home, DaemonOptions(max_parallel=parallel, until_idle=True), dict(os.environ))
    wall = time.perf_counter() - t0
    recorded: list[Recorded] = []
    async with open_store(home) as store:
        async for r in store.read_all(0):
            recorded.append(r)
    return wall, recorded


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cells", type=int, default=1000)
    parser.add_argument("--max-parallel", type=int, default=16)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    root = Path(tempfile.mkdtemp(prefix="arenad-bench-"))
    try:
        repo = root / "repo"
        base = make_repo(repo)
        base_wall = asyncio.run(
            baseline(root / "baseline", repo, base, args.cells, args.max_parallel)
        )
        plain_wall, _ = asyncio.run(
            daemon_run(root, repo, base, args.cells, args.max_parallel, "none")
        )
        wall, recorded = asyncio.run(
            daemon_run(root, repo, base, args.cells, args.max_parallel, "bwrap")
        )
        by_cell: dict[str, list[Recorded]] = defaultdict(list)
        for r in recorded:
            if streams.is_cell_stream(r.stream):
                by_cell[r.stream].append(r)
        steps: dict[str, list[float]] = defaultdict(list)
        recovered = 0
        for events in by_cell.values():
            if events[-1].tag == "cell.recovered":
                recovered += 1
            # From the first step the daemon took (submission time is before the daemon ran).
            for prev, cur in itertools.pairwise(events[1:]):
                steps[f"{prev.tag} -> {cur.tag}"].append(cur.recorded_at_ms - prev.recorded_at_ms)
        n = args.cells
        print(f"cells: {n}, max-parallel {args.max_parallel}, recovered {recovered}")
        print(f"daemon:   {wall:8.2f} s  {n / wall:8.1f} cells/s  (sandbox bwrap, the default)")
        print(f"daemon:   {plain_wall:8.2f} s  {n / plain_wall:8.1f} cells/s  (sandbox none)")
        print(f"baseline: {base_wall:8.2f} s  {n / base_wall:8.1f} cells/s  (no log, no sandbox)")
        print(
            f"ratio daemon/baseline wall: {wall / base_wall:.2f}"
            f" (sandbox none: {plain_wall / base_wall:.2f})"
        )
        print(f"daemon overhead per cell: {(wall - base_wall) / n * 1000:.2f} ms (wall, amortised)")
        print(
            f"sandbox cost per cell: {(wall - plain_wall) / n * 1000:.2f} ms"
            f" (run + verify in bwrap), ratio bwrap/none wall: {wall / plain_wall:.2f}"
        )
        print("per-step latency (ms, recorded_at_ms deltas):")
        for name, values in steps.items():
            print(
                f"  {name:40s} p50 {pct(values, 0.5):7.1f}  p95 {pct(values, 0.95):7.1f}"
                f"  mean {statistics.fmean(values):7.1f}"
            )
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
