"""The cell runner's site steps: the work done where the cell lives.

Each is a plain function whose first argument is the site's tools
(:class:`arenad.runs.executor.Tools`) and whose other arguments and result are plain
data, so a site on another machine runs it there. The runner records what they return.
"""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

from arenad.materialize import MaterializeResult, Seal, materialize
from arenad.runs.executor import Tools
from arenad.sandbox.cellenv import prepare_cell_env
from arenad.verdict.grade import Graded, Grading, judge_graded, verify_graded
from arenad.verdict.patch import Extraction, extract_checked
from events.cell import JudgeVerdictRecorded
from events.specs import CellSpec, InstanceSpec, JudgeSpec


async def materialize_step(
    tools: Tools,
    spec: CellSpec,
    run_dir: str,
    base_env: dict[str, str],
    git_root: str,
    workspace: str,
) -> MaterializeResult:
    """A fresh run dir with the cell's private environment, and its workspace (in the run
    dir), sealed at ``git_root`` (outside the run dir).

    No run of this attempt was recorded, so anything in the run dir or the git root is
    debris of a daemon that died before starting one: it starts clean.
    """
    await asyncio.to_thread(_fresh_run_dir, Path(run_dir), base_env)
    return await materialize(spec, Path(workspace), git_root=git_root, templates=tools.templates)


def _fresh_run_dir(run_dir: Path, base_env: dict[str, str]) -> None:
    if run_dir.exists():
        shutil.rmtree(run_dir)
    run_dir.mkdir(parents=True)
    prepare_cell_env(run_dir, base_env)


async def patch_step(
    tools: Tools,
    workspace: str,
    base: str,
    excludes: list[str],
    out_path: str,
    seal: Seal | None = None,
) -> Extraction:
    return await extract_checked(workspace, base, excludes, out_path, seal)


async def verify_step(
    tools: Tools, verify_cmd: str, grading: Grading, log_path: str, timeout_s: float
) -> Graded:
    return await verify_graded(grading, verify_cmd, log_path, timeout_s)


async def judge_step(
    tools: Tools,
    spec: JudgeSpec,
    attempt: int,
    grading: Grading,
    run_dir: str,
    instance: InstanceSpec | None = None,
    arm: str = "",
) -> JudgeVerdictRecorded:
    return await judge_graded(grading, spec, attempt, run_dir, instance=instance, arm=arm)
