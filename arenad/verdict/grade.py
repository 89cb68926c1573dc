"""Where a verdict is made: a fresh grading checkout of base + the stored patch, never the
agent's workspace (issue 27, finding 1).

An agent owns ``ws/``: its test files, its ``conftest.py``, its ``pytest.ini``, whatever it
left in ``.git``. Grading there lets it decide its own verdict (rewrite an excluded test to
``assert True``, add a root ``conftest.py``, a plugin through ``addopts``). So every verify
and every judge runs on a *grading checkout*, made for that step and removed after it:

    <run_dir>/grade/          the grading dir (the sandbox's run dir for the step)
        ws/                   base's tree, written from the daemon's own git root (the
                              seal's objects, copied or linked before any agent ran), with
                              the stored patch applied (``git apply --cached`` on a private
                              index, then ``checkout-index``): no ``.git``
        home/ xdg/ tmp/ ...   fresh private dirs (the agent's ``python-user`` site, which a
                              ``.pth`` could steer, is not the grade's)
        grade.patch           what was applied: the stored patch less what is left out
        grade.index           the private index

What is left out of the patch for grading: the sections of runner-steering config
(:data:`STEERING_NAMES`, ``*.pth``; their base versions are graded, and each is listed as
tampered by the patch step) and binary files the patch holds no data for (git's ``Binary
files differ``: nothing to apply; usually bytecode). Excluded paths (the test files) are
never in the stored patch, so they come from base by construction. A patch that does not
apply is an unresolved verdict with git's one-line reason, never a crash.

``verify_in = "workspace"`` keeps the reference's behaviour (verify in the agent's ``ws/``,
its env and sandbox) as an explicit choice: the verdict then records it as self-reported.

This module decides where; :mod:`arenad.verdict.verify` and :mod:`arenad.verdict.judge`
run the command there.
"""

from __future__ import annotations

import asyncio
import contextlib
import fnmatch
import os
import shutil
from collections.abc import AsyncIterator, Iterable
from pathlib import Path
from typing import Literal

import msgspec

from arenad.materialize import gitsafe
from arenad.materialize.seal import Seal
from arenad.sandbox.cellenv import cell_env_for, prepare_cell_env
from arenad.sandbox.confine import CellSandbox
from arenad.verdict.judge import no_verdict, run_judge
from arenad.verdict.patch_files import section_names, sections
from arenad.verdict.verify import VerifyResult, run_verify
from events.cell import JudgeVerdictRecorded
from events.specs import InstanceSpec, JudgeSpec

VerifyIn = Literal["checkout", "workspace"]

GRADE_DIR = "grade"
# Files that steer a test runner or the interpreter before any test runs: a fix rarely
# needs them, and through them an agent decides what runs (SWE-bench resets test files).
STEERING_NAMES: tuple[str, ...] = (
    "conftest.py",
    "pytest.ini",
    "tox.ini",
    "setup.cfg",
    "pyproject.toml",
    "sitecustomize.py",
    "usercustomize.py",
)
STEERING_GLOBS: tuple[str, ...] = ("*.pth",)
# By-products of running tests, not edits: never listed as tampering.
BYPRODUCTS: tuple[str, ...] = (":(exclude,glob)**/__pycache__/**", ":(exclude,glob)**/*.pyc")


def is_steering(path: str) -> bool:
    """A path whose file steers the test runner or the interpreter (by its name)."""
    name = path.rsplit("/", 1)[-1]
    return name in STEERING_NAMES or any(fnmatch.fnmatchcase(name, g) for g in STEERING_GLOBS)


def steering_pathspec() -> list[str]:
    return [f":(glob)**/{n}" for n in (*STEERING_NAMES, *STEERING_GLOBS)]


def positive_pathspec(pattern: str) -> str | None:
    """An exclude pattern as a pathspec that *selects* what it excludes (None: a magic
    form this cannot turn around)."""
    if not pattern.startswith(":"):
        return f":(glob){pattern}"
    if pattern.startswith((":!", ":^")):
        return ":" + pattern[2:]
    if pattern.startswith(":(") and ")" in pattern:
        words, _, rest = pattern[2:].partition(")")
        kept = [w for w in words.split(",") if w and w != "exclude"]
        return f":({','.join(kept)}){rest}" if kept else rest
    return None


def tamper_pathspec(excludes: Iterable[str], loops_excludes: Iterable[str]) -> list[str]:
    """What the agent had no business changing: the excluded paths and runner-steering
    config, less the supervisor's own state and bytecode."""
    chosen = [p for p in (positive_pathspec(x) for x in excludes) if p is not None]
    return [*chosen, *steering_pathspec(), *loops_excludes, *BYPRODUCTS]


def _binary_without_data(section: bytes) -> bool:
    head = section[:4096]
    return b"\nBinary files " in head and b"\nGIT binary patch" not in head


def for_grading(patch: bytes) -> tuple[bytes, list[str]]:
    """The part of ``patch`` applied for grading, and what is left out (one line each:
    path and why). Pure."""
    kept: list[bytes] = []
    left_out: list[str] = []
    for section in sections(patch):
        names = section_names(section)
        steering = [n for n in names if is_steering(n)]
        if steering:
            left_out.append(f"{steering[0]}: runner config, graded as in base")
        elif _binary_without_data(section):
            left_out.append(f"{names[-1] if names else '?'}: binary, no data in the patch")
        else:
            kept.append(section)
    return b"".join(kept), left_out


class Grading(msgspec.Struct, frozen=True, kw_only=True):
    """What a verify or judge step needs to know where it runs (plain data: it crosses
    the site's seam)."""

    verify_in: VerifyIn
    run_dir: str
    # The workspace mode's place: the agent's ws, env and sandbox.
    workspace: str
    env: dict[str, str]
    sandbox: CellSandbox | None
    # The checkout mode's sources: the daemon's git root of the cell, the stored patch.
    seal: Seal | None
    patch_path: str | None
    base_env: dict[str, str]


class Place(msgspec.Struct, frozen=True, kw_only=True):
    """Where the command runs, and how the patch got there."""

    cwd: str
    env: dict[str, str]
    sandbox: CellSandbox | None
    verify_in: VerifyIn
    # True: applied (less ``left_out``); False: it does not apply (nothing is run);
    # None: not applied by arenad (the workspace mode).
    applied: bool | None
    note: str | None = None
    left_out: list[str] = []


class GradeError(Exception):
    """The grading checkout could not be made for a reason of the daemon's (not the patch's)."""


@contextlib.asynccontextmanager
async def place_for(
    grading: Grading, *, timeout_s: float = gitsafe.GIT_TIMEOUT_S
) -> AsyncIterator[Place]:
    """The place a verify or judge runs: the agent's workspace (``verify_in =
    "workspace"``), else a fresh grading checkout, removed when the block ends."""
    if grading.verify_in == "workspace":
        yield Place(
            cwd=grading.workspace,
            env=dict(grading.env),
            sandbox=grading.sandbox,
            verify_in="workspace",
            applied=None,
            note="graded in the agent's workspace (self-reported)",
        )
        return
    grade_dir = os.path.join(grading.run_dir, GRADE_DIR)
    try:
        yield await make_checkout(grading, grade_dir, timeout_s=timeout_s)
    finally:
        await asyncio.to_thread(shutil.rmtree, grade_dir, True)


async def make_checkout(
    grading: Grading, grade_dir: str, *, timeout_s: float = gitsafe.GIT_TIMEOUT_S
) -> Place:
    """Base + the stored patch at ``<grade_dir>/ws``, from the daemon's git root only."""
    seal = grading.seal
    ws = os.path.join(grade_dir, "ws")
    env = await asyncio.to_thread(_fresh_grade_dir, grade_dir, ws, grading.base_env)
    sandbox = (
        None
        if grading.sandbox is None
        else msgspec.structs.replace(grading.sandbox, run_dir=grade_dir, workspace=ws)
    )

    def place(applied: bool, note: str, left_out: list[str] | None = None) -> Place:
        return Place(
            cwd=ws,
            env=env,
            sandbox=sandbox,
            verify_in="checkout",
            applied=applied,
            note=note,
            left_out=left_out or [],
        )

    if seal is None:
        # No daemon-owned copy of base (a workspace made before seals): the agent's objects
        # are all there is, and they are not graded on.
        return place(False, "no grading checkout: the workspace has no seal (made before seals)")
    patch = b""
    if grading.patch_path is not None:
        try:
            patch = await asyncio.to_thread(Path(grading.patch_path).read_bytes)
        except OSError as exc:
            return place(False, f"the stored patch cannot be read: {exc.strerror or exc}")
    applied, left_out = for_grading(patch)
    patch_file = os.path.join(grade_dir, "grade.patch")
    await asyncio.to_thread(Path(patch_file).write_bytes, applied)
    steps = [gitsafe.GitStep(args=["read-tree", seal.base], stage="grade-base")]
    if applied:
        steps.append(
            gitsafe.GitStep(
                args=["apply", "--cached", "--whitespace=nowarn", patch_file], stage="grade-apply"
            )
        )
    steps.append(gitsafe.GitStep(args=["checkout-index", "-a", "-f"], stage="grade-checkout"))
    try:
        await gitsafe.run_git_steps(
            steps,
            git_dir=seal.git_dir,
            work_tree=ws,
            home=grade_dir,
            index=os.path.join(grade_dir, "grade.index"),
            timeout_s=timeout_s,
        )
    except gitsafe.CommandError as exc:
        if exc.stage != "grade-apply" or exc.timed_out:
            raise GradeError(str(exc)) from exc
        return place(False, f"the patch does not apply: {_first_line(exc.stderr_tail)}", left_out)
    what = "applied" if applied else "empty patch"
    note = what if not left_out else f"{what}; {len(left_out)} file(s) left out"
    return place(True, note, left_out)


def _first_line(text: str) -> str:
    for line in text.splitlines():
        if line.strip() and not line.startswith("[exit "):
            return line.strip()[:300]
    return "git apply failed"


def _fresh_grade_dir(grade_dir: str, ws: str, base_env: dict[str, str]) -> dict[str, str]:
    """An empty grading dir with its own private dirs; the env a step there gets."""
    if os.path.islink(grade_dir) or os.path.isfile(grade_dir):
        os.unlink(grade_dir)
    elif os.path.lexists(grade_dir):
        shutil.rmtree(grade_dir)
    os.makedirs(ws)
    prepare_cell_env(grade_dir, base_env)
    return cell_env_for(grade_dir, base_env)


class Graded(msgspec.Struct, frozen=True, kw_only=True):
    """A verify step's result: the verify's (None: it did not run, the patch does not
    apply) and where it ran."""

    verify: VerifyResult | None
    place: Place


async def verify_graded(
    grading: Grading, verify_cmd: str, log_path: str, timeout_s: float
) -> Graded:
    """Run the verify command where ``grading`` says; a patch that does not apply leaves a
    log that says so and no result (unresolved)."""
    async with place_for(grading) as where:
        if where.applied is False:
            text = f"arenad: verify did not run: {where.note}\n"
            await asyncio.to_thread(_write_log, log_path, text)
            return Graded(verify=None, place=where)
        result = await run_verify(
            verify_cmd,
            where.cwd,
            log_path,
            env=where.env,
            timeout_s=timeout_s,
            sandbox=where.sandbox,
        )
        return Graded(verify=result, place=where)


async def judge_graded(
    grading: Grading,
    spec: JudgeSpec,
    attempt: int,
    run_dir: str,
    *,
    instance: InstanceSpec | None = None,
    arm: str = "",
) -> JudgeVerdictRecorded:
    """Run the judge where ``grading`` says (a checkout of its own, fresh after verify);
    a patch that does not apply gives no verdict, saying why. A ``swebench`` judge makes its
    own fresh container of the instance image and applies the stored patch there, the way
    the harness does (each way of applying recorded), so it takes no checkout."""
    if spec.kind == "swebench":
        return await run_judge(
            spec,
            attempt=attempt,
            workspace=run_dir,
            run_dir=run_dir,
            instance=instance,
            patch_path=grading.patch_path,
            arm=arm,
        )
    async with place_for(grading) as where:
        if where.applied is False:
            return no_verdict(spec, attempt, f"judge did not run: {where.note}")
        return await run_judge(
            spec,
            attempt=attempt,
            workspace=where.cwd,
            run_dir=run_dir,
            env=where.env,
            sandbox=where.sandbox,
        )


def _write_log(path: str, text: str) -> None:
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(text, encoding="utf-8")
