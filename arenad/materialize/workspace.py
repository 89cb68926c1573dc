"""What both materializers share: the error, the result, and the work-branch steps."""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Literal

import msgspec

from arenad.errors import ArenadError
from arenad.materialize import gitsafe
from arenad.materialize.seal import Seal
from arenad.runs.commands import CommandError, RunResult, run_ok

GIT_TIMEOUT_S = gitsafe.GIT_TIMEOUT_S
WORK_BRANCH = "hh-work"

Stage = Literal[
    "config",
    "clone-fail",
    "create-fail",
    "cp-fail",
    "no-git",
    "reset-fail",
    "branch-fail",
    "checkout-fail",
    "status-fail",
    "clean",
    "seal-fail",
]


class MaterializeError(ArenadError):
    """A workspace could not be materialized; ``stage`` names the step (the reference's labels)."""

    def __init__(self, stage: Stage, message: str) -> None:
        # The text names the stage once: a message that already starts with it (a
        # CommandError of the same stage) is not prefixed again (issue 29: "create-fail:
        # create-fail: docker create ...").
        prefix = f"{stage}: "
        super().__init__(message if message.startswith(prefix) else prefix + message)
        self.stage: Stage = stage
        self.message = message.removeprefix(prefix)


class MaterializeResult(msgspec.Struct, frozen=True, kw_only=True):
    workspace: str
    head: str
    # `git status --porcelain` was empty after checkout.
    clean: bool
    materializer: Literal["image", "git"]
    # The image or source it came from (and, for images, the container used).
    detail: str
    # The daemon's own record of the workspace (None: not sealed; see materialize.seal).
    seal: Seal | None = None


async def git_step(
    stage: Stage,
    ws: Path,
    argv: Sequence[str],
    *,
    timeout_s: float = GIT_TIMEOUT_S,
) -> RunResult:
    """``git <argv>`` on the workspace ``ws`` the daemon is making (hardened, its git dir
    and work tree named); a failure becomes MaterializeError(stage)."""
    w = os.fspath(ws)
    try:
        return await gitsafe.run_git(
            argv,
            git_dir=os.path.join(w, ".git"),
            work_tree=w,
            home=os.fspath(ws.parent),
            stage=stage,
            timeout_s=timeout_s,
        )
    except CommandError as exc:
        raise MaterializeError(stage, str(exc)) from exc


async def command_step(
    stage: Stage,
    argv: Sequence[str],
    *,
    timeout_s: float,
    env: Mapping[str, str] | None = None,
) -> RunResult:
    """Run ``argv`` to success; a failure becomes MaterializeError(stage)."""
    try:
        return await run_ok(argv, timeout_s, stage=stage, env=env)
    except CommandError as exc:
        raise MaterializeError(stage, str(exc)) from exc


def prepare_dest(dest: Path) -> None:
    """Make ``dest``'s parent and remove any previous ``dest``: materialize owns it."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    if dest.is_symlink() or dest.is_file():
        dest.unlink()
    elif dest.exists():
        shutil.rmtree(dest)


async def checkout_work_branch(
    ws: Path, base: str, *, timeout_s: float = GIT_TIMEOUT_S
) -> tuple[str, bool]:
    """reset --hard base, clean (tolerated), branch -f hh-work base, checkout; (HEAD, clean)."""
    await git_step("reset-fail", ws, ["reset", "-q", "--hard", base], timeout_s=timeout_s)
    with contextlib.suppress(MaterializeError):  # the reference tolerates a failed clean
        await git_step("clean", ws, ["clean", "-qfd"], timeout_s=timeout_s)
    await git_step("branch-fail", ws, ["branch", "-f", WORK_BRANCH, base], timeout_s=timeout_s)
    await git_step("checkout-fail", ws, ["checkout", "-q", WORK_BRANCH], timeout_s=timeout_s)
    return await head_and_clean(ws, timeout_s=timeout_s)


async def head_and_clean(ws: Path, *, timeout_s: float = GIT_TIMEOUT_S) -> tuple[str, bool]:
    """HEAD's commit, and whether `git status --porcelain` would print nothing — one git
    process (porcelain v2 names the commit in its ``# branch.oid`` header)."""
    status = await git_step(
        "status-fail", ws, ["status", "--porcelain=v2", "--branch"], timeout_s=timeout_s
    )
    head = ""
    clean = True
    for line in status.stdout_text.splitlines():
        if line.startswith("# branch.oid "):
            head = line.removeprefix("# branch.oid ").strip()
        elif line and not line.startswith("#"):
            clean = False
    if not head or head == "(initial)":
        raise MaterializeError("status-fail", f"{ws} has no HEAD commit")
    return head, clean


async def base_tree_of(ws: Path, base: str, *, timeout_s: float = GIT_TIMEOUT_S) -> str:
    """``<base>^{tree}`` in the workspace the daemon is making (before any agent)."""
    out = await git_step(
        "seal-fail", ws, ["rev-parse", "--verify", "-q", f"{base}^{{tree}}"], timeout_s=timeout_s
    )
    return out.stdout_text.strip()
