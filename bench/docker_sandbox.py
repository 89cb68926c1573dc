"""Benchmark: what starting an agent in its container (``[sandbox] kind = "docker"``) costs,
against bubblewrap (``kind = "bwrap"``, the baseline), measured in the same run.

    .venv/bin/python -m bench.docker_sandbox [--reps 5] [--image local/deb-py:bookworm]

For one cell laid out as the daemon lays it out, each measured ``--reps`` times: the whole
life of a trivial agent (``bash -c 'cd . && echo ok'``) under :func:`confine`, from the
command line to its exit: with bwrap, the sandbox; with docker, ``docker run`` of the image
with the cell's mounts and limits, then ``docker rm`` (what the wrapper does after every
run). Prints each median wall time and the ratio docker / bwrap. Needs a docker engine,
the image, and bubblewrap.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from arenad.containers.docker import engine_problem, image_exists, remove_container  # noqa: E402
from arenad.runs import commands  # noqa: E402
from arenad.sandbox import container  # noqa: E402
from arenad.sandbox.cellenv import prepare_cell_env  # noqa: E402
from arenad.sandbox.confine import CellSandbox, confine, host_problem  # noqa: E402
from events.specs import SandboxSpec  # noqa: E402

AGENT = ["bash", "-c", "cd . && echo ok"]


async def _one(kind: str, root: Path, n: int, image: str) -> float:
    home = root / "home"
    run_dir = home / f"campaigns/b/rep-0/attempt-1/runs/i{n}/{kind}"
    ws = run_dir / "ws"
    ws.mkdir(parents=True)
    env = prepare_cell_env(run_dir, {"PATH": "/usr/bin:/bin"}).env
    name = f"arenad-bench-{os.getpid()}-{kind}-{n}"
    cell = CellSandbox(
        spec=SandboxSpec(kind=kind, network="none", memory_bytes=512 << 20, pids=512),  # type: ignore[arg-type]
        run_dir=str(run_dir),
        workspace=str(ws),
        home_root=str(home),
        image=image,
        container=name,
        labels=container.labels(str(home), f"b:i{n}:{kind}:0", 1),
    )
    t0 = time.perf_counter()
    confined = confine(cell, AGENT, env=env, chdir=str(ws))
    result = await commands.run(confined.argv, cwd=ws, env={**os.environ, **env}, timeout_s=120)
    if kind == "docker":
        await remove_container(name)
    took = time.perf_counter() - t0
    if result.code != 0 or b"ok" not in result.stdout:
        raise SystemExit(f"{kind} run failed: {result.code} {result.stderr[-500:]!r}")
    return took


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--image", default="local/deb-py:bookworm")
    args = parser.parse_args()
    for problem in (engine_problem(), host_problem()):
        if problem is not None:
            raise SystemExit(problem)
    if not image_exists(args.image):
        raise SystemExit(f"{args.image} is not in the engine (scripts/build-base-image)")
    times: dict[str, list[float]] = {"bwrap": [], "docker": []}
    with tempfile.TemporaryDirectory(prefix="bench-docker-") as tmp:
        for n in range(args.reps):
            # Interleaved, so a slow moment of the shared machine hits both alike.
            for kind in times:
                times[kind].append(await _one(kind, Path(tmp), n, args.image))
    med = {kind: statistics.median(ts) for kind, ts in times.items()}
    print(f"bwrap agent run (baseline): {med['bwrap'] * 1000:.0f} ms median of {args.reps}")
    print(f"docker agent run (start, exit, rm): {med['docker'] * 1000:.0f} ms median")
    print(f"ratio docker / bwrap: {med['docker'] / med['bwrap']:.1f}")


if __name__ == "__main__":
    asyncio.run(main())
