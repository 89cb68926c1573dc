"""Soak: N short cells while the daemon is SIGKILLed at random every few seconds.

    .venv/bin/python -m bench.soak [--cells 2000] [--max-parallel 16] [--kill-every 1 4]

Each cell is a command arm (a bash agent that appends its run dir to a marker file, then
prints three JSON lines over 1.5 s, so many runs are in flight when a daemon dies). A real
`arenad daemon` subprocess runs the campaign; every 1–4 s (uniform) it gets SIGKILL and a
new daemon is started, until a daemon exits idle. Then the log is checked:

- every cell terminal (recovered), none failed;
- every agent ran exactly once (the marker file), and each attempt that ran holds exactly
  one RunStarted;
- the ingested lines reproduce every attempt's stdout file byte for byte, none twice;
- `arenad verify-log` passes; `arenad project-ledger` is byte-identical twice over.

The baseline, measured in the same run, is the same campaign with no kills: the ratio is
what the crashes cost in wall time. Prints kills, adoptions, retries, lost runs, cells/s.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from pathlib import Path

from arenad.home import Home, open_store
from bench.daemon import make_repo
from events import cell as ev
from events import streams
from events.ingest import LineIngested

ARENAD = str(Path(sys.executable).parent / "arenad")


def write_campaign(path: Path, repo: Path, base: str, cells: int, marker: Path) -> None:
    agent = (
        f"echo {{run_dir}} >> {marker}; "
        'for i in 1 2 3; do echo \'{{"kind":"tick","i":\'$i\'}}\'; sleep 0.5; done'
    )
    lines = [
        'name = "soak"',
        'split = "dev"',
        "[materializer]",
        'kind = "git"',
        f"source = {json.dumps(str(repo))}",
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
        'name = "SOAK"',
        'kind = "command"',
        f"argv = {json.dumps(['bash', '-c', agent])}",
        "uses_model = false",
        "timeout_s = 120",
    ]
    path.write_text("\n".join(lines) + "\n")


def arenad(home: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    out = subprocess.run(
        [ARENAD, "--home", str(home), *args], capture_output=True, text=True, check=False
    )
    if check and out.returncode != 0:
        raise SystemExit(f"arenad {' '.join(args)} failed ({out.returncode}): {out.stderr}")
    return out


def prepare(root: Path, cells: int) -> tuple[Path, Path]:
    home = root / "home"
    repo = root / "repo"
    base = make_repo(repo)
    marker = root / "runs.txt"
    camp = root / "soak.toml"
    write_campaign(camp, repo, base, cells, marker)
    arenad(home, "init")
    arenad(home, "submit", str(camp))
    return home, marker


def start_daemon(home: Path, parallel: int, log: Path) -> subprocess.Popen[bytes]:
    with log.open("ab") as err:
        return subprocess.Popen(
            [
                ARENAD,
                "--home",
                str(home),
                streams.DAEMON,
                "--until-idle",
                "--max-parallel",
                str(parallel),
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=err,
        )


def run_with_kills(
    home: Path, parallel: int, kill_every: tuple[float, float], rng: random.Random
) -> tuple[float, int]:
    """Run until a daemon exits idle; SIGKILL each one after a random interval."""
    kills = 0
    t0 = time.perf_counter()
    while True:
        daemon = start_daemon(home, parallel, home.parent / "daemon.err")
        try:
            rc = daemon.wait(timeout=rng.uniform(*kill_every))
        except subprocess.TimeoutExpired:
            daemon.send_signal(signal.SIGKILL)
            daemon.wait()
            kills += 1
            continue
        if rc != 0:
            raise SystemExit(f"the daemon exited {rc}; see {home.parent / 'daemon.err'}")
        return time.perf_counter() - t0, kills


def check(home: Path, marker: Path, cells: int) -> dict[str, object]:
    """Every invariant of the soak, from the log and the files; raises on a violation."""
    final: dict[str, str] = {}
    started: Counter[tuple[str, int]] = Counter()
    run_dirs: dict[tuple[str, int], str] = {}
    ingested: dict[tuple[str, int], list[LineIngested]] = defaultdict(list)
    tags: Counter[str] = Counter()
    lost = 0

    async def scan() -> None:
        nonlocal lost
        async with open_store(Home(home)) as store:
            async for r in store.read_all(0):
                e = r.event
                tags[r.tag] += 1
                if streams.is_cell_stream(r.stream):
                    cell = r.stream[5:]
                    final[cell] = r.tag
                    if isinstance(e, ev.RunStarted):
                        started[(cell, e.attempt)] += 1
                    elif isinstance(e, ev.CellMaterialized):
                        run_dirs[(cell, e.attempt)] = e.run_dir
                    elif isinstance(e, ev.RunAborted) and e.reason == "lost with the daemon":
                        lost += 1
                elif r.stream.startswith(streams.INGEST) and isinstance(e, LineIngested):
                    _, cell, attempt = r.stream.rsplit("/", 2)
                    ingested[(cell, int(attempt))].append(e)

    asyncio.run(scan())
    problems: list[str] = []
    if len(final) != cells:
        problems.append(f"{len(final)} cells in the log, expected {cells}")
    not_done = {c: t for c, t in final.items() if t != "cell.recovered"}
    if not_done:
        problems.append(f"{len(not_done)} cells not recovered, e.g. {next(iter(not_done.items()))}")
    ran_dirs = set(marker.read_text().split())
    # One agent run per cell: the marker names each run dir that really started.
    per_cell = Counter(line.split("/runs/")[1].split("/")[0] for line in ran_dirs)
    if len(ran_dirs) != len(marker.read_text().split()):
        problems.append("an attempt's agent ran twice")
    twice = [c for c, n in per_cell.items() if n != 1]
    if twice or len(per_cell) != cells:
        problems.append(f"agents per cell not exactly one: {twice[:3]}, {len(per_cell)} cells ran")
    for key, n in started.items():
        ran = run_dirs.get(key) in ran_dirs
        if n != 1 or not ran:
            problems.append(f"{key}: {n} RunStarted, agent ran: {ran}")
    for key, lines in ingested.items():
        raw = (Path(run_dirs[key]) / "cmd.out").read_bytes()
        got = b"".join(e.raw.encode() + (b"" if e.partial else b"\n") for e in lines)
        offsets = [e.offset for e in lines]
        if got != raw or offsets != sorted(set(offsets)):
            problems.append(f"{key}: ingested lines differ from cmd.out")
    verify = arenad(home, "verify-log", check=False)
    if verify.returncode != 0:
        problems.append(f"verify-log: {verify.stdout.strip()} {verify.stderr.strip()}")
    first, second = home.parent / "l1.jsonl", home.parent / "l2.jsonl"
    arenad(home, "project-ledger", str(first))
    arenad(home, "project-ledger", str(second))
    if first.read_bytes() != second.read_bytes():
        problems.append("project-ledger is not byte-identical run to run")
    if problems:
        raise SystemExit("SOAK FAILED:\n  " + "\n  ".join(problems[:20]))
    return {
        "events": sum(tags.values()),
        "adoptions": tags["run.adopted"],
        "rematerialized": tags["cell.materialized"] - cells,
        "lost": lost,
        "failed": tags["cell.failed"],
        "run_started": tags["run.started"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cells", type=int, default=2000)
    parser.add_argument("--max-parallel", type=int, default=16)
    parser.add_argument("--kill-every", type=float, nargs=2, default=(1.0, 4.0))
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    with tempfile.TemporaryDirectory(prefix="arenad-soak-") as tmp:
        root = Path(tmp)
        base_home, _ = prepare(root / "baseline", args.cells)
        t0 = time.perf_counter()
        daemon = start_daemon(base_home, args.max_parallel, root / "baseline" / "daemon.err")
        if daemon.wait() != 0:
            raise SystemExit("the baseline daemon failed")
        base_wall = time.perf_counter() - t0

        home, marker = prepare(root / "soak", args.cells)
        wall, kills = run_with_kills(home, args.max_parallel, tuple(args.kill_every), rng)
        figures = check(home, marker, args.cells)
        n = args.cells
        print(f"soak: {n} cells, max-parallel {args.max_parallel}, kill every {args.kill_every} s")
        print(
            f"  daemon SIGKILLed {kills} times; {figures['adoptions']} runs adopted,"
            f" {figures['rematerialized']} workspaces re-materialized after a crash,"
            f" {figures['lost']} runs lost, {figures['failed']} cells failed"
        )
        print(
            f"  {figures['run_started']} RunStarted for {n} agent runs; {figures['events']} events"
        )
        print(f"  with kills:  {wall:8.1f} s  {n / wall:7.1f} cells/s")
        print(f"  no kills:    {base_wall:8.1f} s  {n / base_wall:7.1f} cells/s  (baseline)")
        print(f"  ratio with/without kills (wall): {wall / base_wall:.2f}")
        print(
            "  checks: all cells recovered; each agent ran once; ingestion exact;"
            " verify-log ok; ledger byte-identical: PASSED"
        )
        sys.stdout.flush()


if __name__ == "__main__":
    main()
