"""The git materializer: clone a local path or URL, then put the work branch at base.

Only valid for pure-Python repos (compiled environments live only in the instance image), so
a campaign opts into it explicitly.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from arenad.materialize.workspace import (
    GIT_TIMEOUT_S,
    WORK_BRANCH,
    MaterializeResult,
    git_step,
    head_and_clean,
    prepare_dest,
)
from arenad.runs.commands import CommandError, run_ok


def _clone_source(source: str) -> str:
    """A local directory becomes absolute (clone runs with no cwd); URLs pass unchanged."""
    if "://" not in source and os.path.isdir(source):
        return os.path.abspath(source)
    return source


async def materialize_git(
    source: str,
    base: str,
    dest: Path,
    *,
    git: str = "git",
    timeout_s: float = GIT_TIMEOUT_S,
) -> MaterializeResult:
    """Clone ``source`` into ``dest`` (replacing it) and check out ``hh-work`` at ``base``.

    Raises MaterializeError with stage clone-fail, reset-fail (base absent) or status-fail.
    """
    prepare_dest(dest)
    env = {**os.environ, "GIT_TERMINAL_PROMPT": "0"}
    await git_step(
        "clone-fail",
        ["clone", "-q", "--no-checkout", _clone_source(source), os.fspath(dest)],
        git=git,
        timeout_s=timeout_s,
        env=env,
    )
    # The work branch at base, checked out, in one step: a fresh --no-checkout clone has
    # nothing to reset or clean (the image materializer's steps do that for a testbed).
    w = os.fspath(dest)
    checkout = ["-C", w, "checkout", "-q", "-B", WORK_BRANCH, base]
    try:
        await run_ok([git, *checkout], timeout_s, env=env)
    except CommandError:
        # A commit no branch reaches is not cloned; ask the remote for it (servers that
        # allow fetching by id give it; otherwise the checkout fails again: reset-fail).
        with contextlib.suppress(CommandError):
            await run_ok([git, "-C", w, "fetch", "-q", "origin", base], timeout_s, env=env)
        await git_step("reset-fail", checkout, git=git, timeout_s=timeout_s, env=env)
    head, clean = await head_and_clean(dest, git=git, timeout_s=timeout_s)
    return MaterializeResult(
        workspace=os.fspath(dest), head=head, clean=clean, materializer="git", detail=source
    )
