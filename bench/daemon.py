"""Benchmark: N cells of a no-op command arm through the daemon's whole state machine.

    .venv/bin/python -m bench.daemon [--cells 1000] [--max-parallel 16]

Each cell: git materialize (a copy of the prepared checkout of its source and base; every
cell shares one, made once by a clone + work branch; the copy sealed) -> run `true` through
the detached run wrapper -> patch (the seal checked, git add -A + diff) -> verify (`true`)
-> recover (store absent: a recorded gap), every transition appended to the SQLite log. The
baseline, measured in the same run, does the same real work (the same materializer, `true`
in its own process group, patch, verify) with a plain asyncio script and no log, so the
ratio is the daemon's cost (its log, and the run wrapper that lets an agent outlive it) over
the work itself.

Prints cells/s, daemon overhead per cell (ms), p50/p95 per-step latency (deltas of the cell
events' recorded_at_ms) and the daemon/baseline wall ratio.

The daemon runs twice, the same campaign with ``[sandbox] kind = "none"`` and with the
default ``"bwrap"`` (the agent run and verify each in a bubblewrap sandbox), and prints the
sandbox's per-cell cost and the bwrap/none wall ratio. The per-step figures are the bwrap
run's (the default configuration).

``--spend-lines N`` makes each cell print N opencode ``step_finish`` lines (each costing
$0.001) and runs the daemon a second time with a spend cap on every campaign
(``--max-usd``, never reached): the capped/uncapped wall ratio is what folding live spend
from every ingested batch, and checking the cap before each start, costs.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import logging
import os
import shlex
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
from arenad.verdict.patch import extract_checked
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


STEP_LINE = '{"type":"step_finish","part":{"type":"step-finish","cost":0.001}}'


def write_campaign(
    path: Path,
    repo: Path,
    base: str,
    cells: int,
    parallel: int,
    spend_lines: int = 0,
    sandbox: str = "bwrap",
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
    # Braces doubled: argv is a str.format template ({ws} ...).
    line = shlex.quote(STEP_LINE).replace("{", "{{").replace("}", "}}")
    script = f"for i in $(seq {spend_lines}); do echo {line}; done"
    # A JSON array of strings is a TOML array of basic strings.
    argv = json.dumps(["bash", "-c", script] if spend_lines else ["true"])
    lines += [
        "[[arms]]",
        'name = "NOOP"',
        'kind = "command"',
        f"argv = {argv}",
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
            made = await templates.materialize(str(repo), base, ws, git_root=root / f"g{i:05d}")
            p = await asyncio.create_subprocess_exec(
                "true", cwd=ws, stdin=subprocess.DEVNULL, start_new_session=True
            )
            await p.wait()
            await extract_checked(ws, base, [], run_dir / "p.patch", made.seal)
            await run_verify("true", ws, run_dir / "verify.log")

    t0 = time.perf_counter()
    await asyncio.gather(*(one(i) for i in range(cells)))
    return time.perf_counter() - t0


async def daemon_run(
    root: Path,
    repo: Path,
    base: str,
    cells: int,
    parallel: int,
    *,
    spend_lines: int = 0,
    max_usd: float | None = None,
    sandbox: str = "bwrap",
) -> tuple[float, list[Recorded]]:
    home = Home(root / f"home-{sandbox}")
    await init_home(home)
    camp = root / f"bench-{sandbox}.toml"
    write_campaign(camp, repo, base, cells, parallel, spend_lines, sandbox)
    await submit_campaign(home, camp)
    t0 = time.perf_counter()
    options = DaemonOptions(max_parallel=parallel, until_idle=True, max_usd=max_usd)
    await run_daemon(home, options, dict(os.environ))
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
    parser.add_argument("--spend-lines", type=int, default=0)
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
            daemon_run(
                root,
                repo,
                base,
                args.cells,
                args.max_parallel,
                spend_lines=args.spend_lines,
                sandbox="none",
            )
        )
        wall, recorded = asyncio.run(
            daemon_run(
                root, repo, base, args.cells, args.max_parallel, spend_lines=args.spend_lines
            )
        )
        capped_wall = None
        if args.spend_lines:
            capped_wall, capped = asyncio.run(
                daemon_run(
                    root / "capped",
                    repo,
                    base,
                    args.cells,
                    args.max_parallel,
                    spend_lines=args.spend_lines,
                    max_usd=1e9,
                )
            )
            lines = sum(1 for r in capped if r.tag == "ingest.line")
            assert lines == args.cells * args.spend_lines, lines
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
        if capped_wall is not None:
            print(
                f"capped:   {capped_wall:8.2f} s  {n / capped_wall:8.1f} cells/s"
                f"  ({args.spend_lines} step_finish lines per cell, --max-usd on)"
            )
            print(f"ratio capped/uncapped wall: {capped_wall / wall:.2f}")
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
