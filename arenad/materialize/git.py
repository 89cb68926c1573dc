"""The git materializer: clone a local path or URL, then put the work branch at base.

Only valid for pure-Python repos (compiled environments live only in the instance image), so
a campaign opts into it explicitly.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from arenad.materialize import gitsafe
from arenad.materialize.workspace import (
    GIT_TIMEOUT_S,
    WORK_BRANCH,
    MaterializeError,
    MaterializeResult,
    git_step,
    head_and_clean,
    prepare_dest,
)
from arenad.runs.commands import CommandError


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
    timeout_s: float = GIT_TIMEOUT_S,
) -> MaterializeResult:
    """Clone ``source`` into ``dest`` (replacing it) and check out ``hh-work`` at ``base``.

    A local source is copied, never hard-linked (``--no-hardlinks``): an object file a
    cell shared with the user's repository would let its agent rewrite that repository.

    Raises MaterializeError with stage clone-fail, reset-fail (base absent) or status-fail.
    """
    prepare_dest(dest)
    here = os.fspath(dest.parent)
    w = os.fspath(dest)
    try:
        await gitsafe.run_source_git(
            ["clone", "-q", "--no-checkout", "--no-hardlinks", _clone_source(source), w],
            cwd=here,
            stage="clone-fail",
            timeout_s=timeout_s,
        )
    except CommandError as exc:
        raise MaterializeError("clone-fail", str(exc)) from exc
    # The work branch at base, checked out, in one step: a fresh --no-checkout clone has
    # nothing to reset or clean (the image materializer's steps do that for a testbed).
    checkout = ["checkout", "-q", "-B", WORK_BRANCH, base]
    try:
        await git_step("reset-fail", dest, checkout, timeout_s=timeout_s)
    except MaterializeError:
        # A commit no branch reaches is not cloned; ask the remote for it (servers that
        # allow fetching by id give it; otherwise the checkout fails again: reset-fail).
        with contextlib.suppress(CommandError):
            await gitsafe.run_source_git(
                ["--git-dir", os.path.join(w, ".git"), "fetch", "-q", "origin", base],
                cwd=here,
                stage="fetch",
                timeout_s=timeout_s,
            )
        await git_step("reset-fail", dest, checkout, timeout_s=timeout_s)
    head, clean = await head_and_clean(dest, timeout_s=timeout_s)
    return MaterializeResult(
        workspace=os.fspath(dest), head=head, clean=clean, materializer="git", detail=source
    )
