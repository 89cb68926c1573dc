"""Benchmark: what the swebench judge's container costs per cell, against a bubblewrap verify.

    .venv/bin/python -m bench.swebench_local [--reps 3]

On the local SWE-bench (scripts/build-local-swebench, built first if needed), for one
instance with its gold patch, each measured ``--reps`` times in this run:

- ``container start``: ``docker run --rm <image> true`` (an empty container's life);
- ``judge``: the whole ``[judge] kind = "swebench"`` grade (a container of the image,
  reset, patch, test patch, the suite, swebench's grading);
- ``bwrap verify`` (the baseline): the same suite run as a verify command in bubblewrap,
  in the workspace the image materializer copied out of the same image, patch applied.

Prints each median wall time and the ratios judge / bwrap verify and container start /
bwrap verify. Needs a docker engine and bubblewrap.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from arenad.materialize.image import materialize_image  # noqa: E402
from arenad.sandbox.confine import CellSandbox  # noqa: E402
from arenad.verdict.swebench import run_swebench_judge  # noqa: E402
from arenad.verdict.verify import run_verify  # noqa: E402
from events.specs import InstanceSpec, JudgeSpec, SandboxSpec  # noqa: E402

IID = "arenad__textkit-3"
TEST_CMD = "python3 -m pytest -rA -p no:cacheprovider tests"


def _rows(out: Path) -> dict[str, dict[str, str]]:
    subprocess.run([str(REPO / "scripts" / "build-local-swebench"), "--out", str(out)], check=True)
    import pyarrow.parquet as pq

    table = pq.read_table(out / "data" / "test-00000-of-00001.parquet")
    return {r["instance_id"]: r for r in table.to_pylist()}


def _instance(row: dict[str, str]) -> InstanceSpec:
    keep = ("instance_id", "repo", "base_commit", "problem_statement")
    return InstanceSpec(
        instance_id=row["instance_id"],
        repo=row["repo"],
        base_commit=row["base_commit"],
        problem_statement=row["problem_statement"],
        verify_cmd="true",
        extra={k: v for k, v in row.items() if k not in keep},
    )


async def _bench(tmp: Path, reps: int) -> dict[str, list[float]]:
    row = _rows(tmp / "lsb")[IID]
    instance = _instance(row)
    image = f"swebench/sweb.eval.x86_64.{IID.replace('__', '_1776_')}:latest"
    patch = tmp / "gold.patch"
    patch.write_text(row["patch"])
    spec = JudgeSpec(kind="swebench", test_cmd=TEST_CMD, log_parser="pytest")
    run_dir = tmp / "home" / "run"
    ws = run_dir / "ws"
    await materialize_image(image, instance.base_commit, ws, instance_id=IID)
    subprocess.run(["git", "apply", str(patch)], cwd=ws, check=True)
    test_patch = tmp / "test.patch"
    test_patch.write_text(row["test_patch"])
    subprocess.run(["git", "apply", str(test_patch)], cwd=ws, check=True)
    sandbox = CellSandbox(
        spec=SandboxSpec(), run_dir=str(run_dir), workspace=str(ws), home_root=str(tmp / "home")
    )
    env = {**os.environ, "PATH": f"{REPO / '.venv' / 'bin'}:{os.environ.get('PATH', '')}"}
    # The host has no pytest of its own: the venv's is on PATH (shown read-only in bwrap).
    verify_cmd = TEST_CMD.replace("python3", "python")
    times: dict[str, list[float]] = {"container start": [], "judge": [], "bwrap verify": []}
    for n in range(reps):
        t0 = time.monotonic()
        subprocess.run(["docker", "run", "--rm", "--network=none", image, "true"], check=True)
        times["container start"].append(time.monotonic() - t0)
        t0 = time.monotonic()
        outcome = await run_swebench_judge(
            spec, instance=instance, patch_path=str(patch), run_dir=tmp / f"j{n}", arm="GOLD"
        )
        times["judge"].append(time.monotonic() - t0)
        assert outcome.doc is not None and outcome.doc["resolved"] is True, outcome
        t0 = time.monotonic()
        result = await run_verify(
            verify_cmd, ws, run_dir / f"verify{n}.log", env=env, sandbox=sandbox
        )
        times["bwrap verify"].append(time.monotonic() - t0)
        assert result.passed, (run_dir / f"verify{n}.log").read_text()[-2000:]
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        times = asyncio.run(_bench(Path(tmp), args.reps))
    med = {k: statistics.median(v) for k, v in times.items()}
    for name, value in med.items():
        print(f"{name:16s} median {value:6.2f} s  ({', '.join(f'{t:.2f}' for t in times[name])})")
    base = med["bwrap verify"]
    print(f"ratio judge / bwrap verify: {med['judge'] / base:.2f}")
    print(f"ratio container start / bwrap verify: {med['container start'] / base:.2f}")
    print(json.dumps({k: round(v, 3) for k, v in med.items()}))


if __name__ == "__main__":
    main()
