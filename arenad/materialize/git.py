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
    MaterializeResult,
    checkout_work_branch,
    git_step,
    prepare_dest,
)
from arenad.proc import CommandError, run_ok


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

    Raises MaterializeError with stage clone-fail, reset-fail (base absent), branch-fail,
    checkout-fail or status-fail.
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
    # A commit no branch reaches is not cloned; ask the remote for it (servers that allow
    # fetching by id give it; otherwise the reset below fails with reset-fail).
    try:
        await run_ok([git, "-C", os.fspath(dest), "cat-file", "-e", f"{base}^{{commit}}"], 30)
    except CommandError:
        with contextlib.suppress(CommandError):
            await run_ok(
                [git, "-C", os.fspath(dest), "fetch", "-q", "origin", base], timeout_s, env=env
            )
    head, clean = await checkout_work_branch(dest, base, git=git, timeout_s=timeout_s)
    return MaterializeResult(
        workspace=os.fspath(dest), head=head, clean=clean, materializer="git", detail=source
    )
