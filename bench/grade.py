"""Benchmark: what grading on a fresh checkout costs per cell, against verify in the workspace.

    .venv/bin/python -m bench.grade [--files 2000] [--cells 20] [--sandbox none|bwrap]

One source repo of ``--files`` Python files (a mid-size project: django has ~6 800 tracked
files, flask ~230), one workspace made and sealed as the daemon makes them, an agent's edit
of one file, the patch taken (with the tampered-paths listing). Then, for ``--cells`` cells
each, in the same run:

- baseline: ``verify_in = "workspace"``: ``true`` in the agent's ws (the reference's way);
- checkout: ``verify_in = "checkout"``: the grading dir made (fresh private dirs), base's
  tree written from the seal, the patch applied, ``true`` run there, the dir removed.

Prints ms per cell for each and the checkout/workspace ratio; the difference is the cost a
cell pays for a grade the agent cannot steer. The patch step's extra listing (tampered paths)
is measured the same way: the patch step now against the patch step without it.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from arenad.materialize import materialize_git, seal_copy
from arenad.sandbox.bwrap import probe_host
from arenad.sandbox.confine import CellSandbox
from arenad.verdict import patch as patch_mod
from arenad.verdict.grade import Grading, verify_graded
from arenad.verdict.patch import extract_checked
from events.specs import DEFAULT_EXCLUDES, SandboxSpec

GIT_ENV = {
    "GIT_AUTHOR_NAME": "bench",
    "GIT_AUTHOR_EMAIL": "bench@arenad",
    "GIT_COMMITTER_NAME": "bench",
    "GIT_COMMITTER_EMAIL": "bench@arenad",
}


def make_source(root: Path, files: int) -> str:
    root.mkdir(parents=True)
    for i in range(files):
        pkg = root / f"pkg{i % 40}"
        pkg.mkdir(exist_ok=True)
        (pkg / f"mod{i}.py").write_text(f"def f{i}(x):\n    return x + {i}\n" * 20)
    (root / "tests").mkdir()
    (root / "tests" / "test_a.py").write_text("def test_a():\n    assert True\n")
    env = {**os.environ, **GIT_ENV}
    for argv in (["init", "-q", "-b", "main"], ["add", "-A"], ["commit", "-qm", "base"]):
        subprocess.run(["git", *argv], cwd=root, env=env, check=True)
    out = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, check=True
    )
    return out.stdout.strip()


async def timed(label: str, cells: int, step: object) -> float:
    times = []
    for _ in range(cells):
        t0 = time.perf_counter()
        await step()  # type: ignore[operator]
        times.append(time.perf_counter() - t0)
    ms = statistics.median(times) * 1000
    print(f"{label:<34} median {ms:8.1f} ms per cell ({cells} cells)")
    return ms


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--files", type=int, default=2000)
    parser.add_argument("--cells", type=int, default=20)
    parser.add_argument("--sandbox", choices=["none", "bwrap"], default="none")
    args = parser.parse_args()
    if args.sandbox == "bwrap" and probe_host() is None:
        raise SystemExit("bubblewrap is not installed")
    tmp = Path(tempfile.mkdtemp(prefix="arenad-bench-grade-"))
    try:
        base = make_source(tmp / "src", args.files)
        run_dir = tmp / "home" / "run"
        ws = run_dir / "ws"
        await materialize_git(str(tmp / "src"), base, ws)
        seal = await seal_copy(ws, tmp / "gitroot", base)
        (ws / "pkg0" / "mod0.py").write_text("def f0(x):\n    return x\n")
        patch_path = tmp / "cell.patch"
        for d in ("home", "xdg", "tmp", "python-user"):
            (run_dir / d).mkdir()
        sandbox = (
            CellSandbox(
                spec=SandboxSpec(kind=args.sandbox),
                run_dir=str(run_dir),
                workspace=str(ws),
                home_root=str(tmp / "home"),
            )
            if args.sandbox == "bwrap"
            else None
        )
        print(f"{args.files} files, sandbox {args.sandbox}")

        async def patch_with() -> None:
            await extract_checked(ws, base, DEFAULT_EXCLUDES, patch_path, seal)

        async def patch_without() -> None:
            saved = patch_mod._tamper_steps
            patch_mod._tamper_steps = lambda seal, excludes: []
            try:
                await extract_checked(ws, base, DEFAULT_EXCLUDES, patch_path, seal)
            finally:
                patch_mod._tamper_steps = saved

        without = await timed("patch step (no tamper listing)", args.cells, patch_without)
        with_ = await timed("patch step + tamper listing", args.cells, patch_with)

        def grading(verify_in: str) -> Grading:
            return Grading(
                verify_in=verify_in,  # type: ignore[arg-type]
                run_dir=str(run_dir),
                workspace=str(ws),
                env=dict(os.environ),
                sandbox=sandbox,
                seal=seal,
                patch_path=str(patch_path),
                base_env=dict(os.environ),
            )

        log = str(run_dir / "verify.log")

        async def in_workspace() -> None:
            got = await verify_graded(grading("workspace"), "true", log, 60)
            assert got.verify is not None and got.verify.passed

        async def in_checkout() -> None:
            got = await verify_graded(grading("checkout"), "true", log, 60)
            assert got.verify is not None and got.verify.passed, got.place.note

        ws_ms = await timed("verify in the workspace (baseline)", args.cells, in_workspace)
        co_ms = await timed("verify on a grading checkout", args.cells, in_checkout)
        print(f"grading checkout: +{co_ms - ws_ms:.1f} ms per cell, ratio {co_ms / ws_ms:.2f}")
        print(f"tamper listing: +{with_ - without:.1f} ms per cell, ratio {with_ / without:.2f}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    asyncio.run(main())
