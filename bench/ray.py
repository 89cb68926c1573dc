"""Benchmark: cells and ingestion through the Ray executor, against the local executor.

    .venv/bin/python -m bench.ray [--cells 40] [--max-parallel 8] [--lines 100000]

Starts a Ray cluster on this machine (``ray.cluster_utils.Cluster``: a head with no CPU and
two worker nodes offering ``arenad_slot``, token auth, a small object store; not timed),
then runs, through the whole daemon (``run_daemon``, in this process), each part once with
the local executor and once with the Ray executor:

no-op cells
    ``--cells`` cells of a command arm running ``true`` (git materialize, run, patch,
    verify, recover), ``--max-parallel`` at once: cells/s over the daemon's wall time. On
    Ray each cell's work happens in its own actor (a new worker process on a node).
ingestion
    one cell whose agent writes ``--lines`` JSON lines (~120 bytes) to its stdout as fast as
    it can: lines/s from its RunStarted to the last line committed (``recorded_at_ms``),
    and the check that the log holds every line once, in order (else the bench fails);
    ``--repeat`` runs per executor, interleaved, their median.

Printed: each figure for both executors and the ratio Ray/local. The cluster lives on the
same two cores as the daemon, so Ray's figures include its own processes' CPU.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from arenad.app import init_home
from arenad.app.executors import cell_base_env, executor_factory
from arenad.app.submit import submit_campaign
from arenad.daemon.daemon import DaemonOptions, run_daemon
from arenad.home import Home, open_store
from events.base import Recorded
from events.ingest import LineIngested

GIT_ENV = {
    "GIT_AUTHOR_NAME": "bench",
    "GIT_AUTHOR_EMAIL": "bench@arenad",
    "GIT_COMMITTER_NAME": "bench",
    "GIT_COMMITTER_EMAIL": "bench@arenad",
}
OBJECT_STORE_BYTES = 80 * 1024 * 1024
FAST_HEALTH = {
    "health_check_initial_delay_ms": 1000,
    "health_check_period_ms": 1000,
    "health_check_timeout_ms": 1000,
    "health_check_failure_threshold": 3,
}
# The agent of the ingestion part: one write per line, as fast as Python goes.
_WRITER = (
    "import os, sys\n"
    "n = int(sys.argv[1])\n"
    "pad = 'x' * 80\n"
    "for i in range(n):\n"
    '    os.write(1, (\'{"kind": "tick", "i": %d, "pad": "%s"}\\n\' % (i, pad)).encode())\n'
)


def make_repo(path: Path) -> str:
    path.mkdir(parents=True)
    env = {**os.environ, **GIT_ENV}
    subprocess.run(["git", "-C", str(path), "init", "-q", "-b", "main"], check=True, env=env)
    (path / "a.txt").write_text("a\n")
    subprocess.run(["git", "-C", str(path), "add", "-A"], check=True, env=env)
    subprocess.run(["git", "-C", str(path), "commit", "-q", "-m", "base"], check=True, env=env)
    out = subprocess.run(
        ["git", "-C", str(path), "rev-parse", "HEAD"], check=True, capture_output=True, text=True
    )
    return out.stdout.strip()


def write_campaign(
    path: Path, name: str, repo: Path, base: str, cells: int, argv: list[str], ray: bool
) -> None:
    lines = [
        f'name = "{name}"',
        'split = "dev"',
        "[materializer]",
        'kind = "git"',
        f'source = "{repo}"',
    ]
    if ray:
        lines += ["[executor]", 'kind = "ray"', "resources = { arenad_slot = 1 }"]
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
        'name = "CMD"',
        'kind = "command"',
        f"argv = {json.dumps(argv)}",
        "uses_model = false",
        "timeout_s = 600",
    ]
    path.write_text("\n".join(lines) + "\n")


async def daemon_run(
    root: Path, name: str, repo: Path, base: str, cells: int, argv: list[str], kind: str, par: int
) -> tuple[float, list[Recorded]]:
    home = Home(root / f"home-{name}")
    await init_home(home)
    camp = root / f"{name}.toml"
    write_campaign(camp, name, repo, base, cells, argv, kind == "ray")
    await submit_campaign(home, camp)
    factory = executor_factory(kind)
    options = DaemonOptions(max_parallel=par, until_idle=True)
    t0 = time.perf_counter()
    await run_daemon(home, options, cell_base_env(kind), executor=factory)
    wall = time.perf_counter() - t0
    recorded: list[Recorded] = []
    async with open_store(home) as store:
        async for r in store.read_all(0):
            recorded.append(r)
    return wall, recorded


def recovered(recorded: list[Recorded]) -> int:
    return sum(1 for r in recorded if r.tag == "cell.recovered")


def ingest_rate(recorded: list[Recorded], lines: int) -> float:
    started = next(r.recorded_at_ms for r in recorded if r.tag == "run.started")
    ingested = [r for r in recorded if isinstance(r.event, LineIngested)]
    got = [json.loads(r.event.raw)["i"] for r in ingested]  # type: ignore[attr-defined]
    if got != list(range(lines)):
        raise SystemExit(f"ingestion is not exact: {len(got)} lines of {lines}")
    return lines / max(0.001, (ingested[-1].recorded_at_ms - started) / 1000)


@contextlib.contextmanager
def cluster(root: Path, slots: int) -> Iterator[None]:
    import ray
    from ray.cluster_utils import Cluster

    from arenad.executors.ray.cluster import use_token

    use_token(root / "ray-token")
    os.environ.pop("RAY_ADDRESS", None)
    c = Cluster(
        initialize_head=True,
        head_node_args={
            "num_cpus": 0,
            "object_store_memory": OBJECT_STORE_BYTES,
            "include_dashboard": False,
            "_system_config": FAST_HEALTH,
        },
    )
    try:
        for _ in range(2):
            c.add_node(
                num_cpus=0, resources={"arenad_slot": slots}, object_store_memory=OBJECT_STORE_BYTES
            )
        c.wait_for_nodes()
        ray.init(address=c.address, log_to_driver=False, logging_level=logging.WARNING)
        yield
    finally:
        ray.shutdown()
        c.shutdown()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cells", type=int, default=40)
    parser.add_argument("--max-parallel", type=int, default=8)
    parser.add_argument("--lines", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=3, help="ingestion runs per executor")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    root = Path(tempfile.mkdtemp(prefix="arenad-bench-ray-"))
    writer = root / "writer.py"
    writer.write_text(_WRITER)
    ingest_argv = [sys.executable, str(writer), str(args.lines)]
    try:
        repo = root / "repo"
        base = make_repo(repo)
        figures: dict[str, dict[str, float]] = {}
        t = time.perf_counter()
        with cluster(root, slots=max(1, args.max_parallel // 2)):
            print(f"cluster up in {time.perf_counter() - t:.1f} s (not timed)")
            for kind in ("local", "ray"):
                wall, recorded = asyncio.run(
                    daemon_run(
                        root,
                        f"noop-{kind}",
                        repo,
                        base,
                        args.cells,
                        ["true"],
                        kind,
                        args.max_parallel,
                    )
                )
                if recovered(recorded) != args.cells:
                    raise SystemExit(f"{kind}: {recovered(recorded)} of {args.cells} recovered")
                figures[kind] = {"cells/s": args.cells / wall, "wall": wall}
            # Interleaved, the median of each: the machine's load drifts between runs.
            rates: dict[str, list[float]] = {"local": [], "ray": []}
            for n in range(args.repeat):
                for kind in ("local", "ray"):
                    _, ingest = asyncio.run(
                        daemon_run(root, f"ingest-{kind}-{n}", repo, base, 1, ingest_argv, kind, 1)
                    )
                    rates[kind].append(ingest_rate(ingest, args.lines))
            for kind, values in rates.items():
                figures[kind]["lines/s"] = statistics.median(values)
                figures[kind]["lines/s runs"] = len(values)
        local, ray_ = figures["local"], figures["ray"]
        print(f"no-op cells: {args.cells}, max-parallel {args.max_parallel}")
        print(f"  local: {local['wall']:7.2f} s  {local['cells/s']:7.2f} cells/s")
        print(f"  ray:   {ray_['wall']:7.2f} s  {ray_['cells/s']:7.2f} cells/s")
        print(f"  ratio ray/local cells/s: {ray_['cells/s'] / local['cells/s']:.3f}")
        print(
            f"ingestion: {args.lines} lines, one cell, writer at full speed"
            f" (median of {args.repeat} runs each)"
        )
        print(f"  local: {local['lines/s']:10.0f} lines/s")
        print(f"  ray:   {ray_['lines/s']:10.0f} lines/s")
        print(f"  ratio ray/local lines/s: {ray_['lines/s'] / local['lines/s']:.3f}")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
