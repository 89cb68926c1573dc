"""Patch extraction, as the seed's, through the daemon's own git (no agent config, no climb).

The seed ran ``git -C ws add -A`` then ``git -C ws diff --cached <base> -- . <excludes…>
':(exclude,glob).loops/**' ':(exclude,glob)**/.loops/**'``: test files and the supervisor's
own ``.loops`` state never reach the patch. Here the same two commands run on the cell's
sealed git root (:mod:`arenad.materialize.seal`): its own repo and a private index that
starts as the base index, with ``ws`` as the work tree, hardened (:mod:`gitsafe`). The
agent's ``ws/.git`` is never read, so nothing it holds runs, redirects or changes the patch;
on a workspace whose ``.git`` is intact the bytes are the seed's.

Staging is limited to the same pathspec as the diff (what it leaves out is never shown), so
nested clones under ``.loops`` are not even hashed. Nested repositories elsewhere become
gitlinks, which the diff leaves out (``--ignore-submodules=all``: git then never reads a
``.gitmodules``, which an agent could craft to make the diff fail); their paths come back in
``nested_repos``, a labelled gap. The diff goes straight to the patch file (no in-memory
cap); its line count follows the seed's patchLineCount.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import shutil
import tempfile
from collections.abc import Iterable
from pathlib import Path

import msgspec

from arenad.materialize import gitindex, gitsafe
from arenad.materialize.seal import Seal, inspect, seal_after_the_fact, write_repo_files

GIT_TIMEOUT_S = gitsafe.GIT_TIMEOUT_S
LOOPS_EXCLUDES: tuple[str, ...] = (":(exclude,glob).loops/**", ":(exclude,glob)**/.loops/**")
# The seed's diff, made independent of any driver or submodule config.
DIFF_FLAGS: tuple[str, ...] = (
    "--no-ext-diff",
    "--no-textconv",
    "--no-color",
    "--ignore-submodules=all",
)


class PatchResult(msgspec.Struct, frozen=True, kw_only=True):
    path: str
    lines: int
    sha256: str
    bytes: int
    # Nested repositories (gitlinks) the agent left in the workspace, new or moved since
    # base: their files are in no patch. None: unknown (the index could not be read).
    nested_repos: list[str] | None = None


def exclude_pathspec(pattern: str) -> str:
    """``:(exclude,glob)<pattern>``; a pattern already in pathspec magic form passes as is."""
    return pattern if pattern.startswith(":") else f":(exclude,glob){pattern}"


def pathspec(excludes: Iterable[str]) -> list[str]:
    """The seed's pathspec: everything but the excludes and the supervisor's ``.loops``."""
    return [".", *(exclude_pathspec(p) for p in excludes), *LOOPS_EXCLUDES]


def diff_args(base: str, excludes: Iterable[str]) -> list[str]:
    return ["diff", "--cached", *DIFF_FLAGS, base, "--", *pathspec(excludes)]


def patch_line_count(patch: bytes | str) -> int:
    """Lines in the patch, not counting an empty line after a final newline (the seed's)."""
    data = patch.encode("utf-8") if isinstance(patch, str) else patch
    if not data:
        return 0
    return data.count(b"\n") + 1 - (1 if data.endswith(b"\n") else 0)


async def extract_patch(
    ws: str | os.PathLike[str],
    base: str,
    excludes: Iterable[str],
    out_path: str | os.PathLike[str],
    *,
    seal: Seal | None = None,
    timeout_s: float = GIT_TIMEOUT_S,
) -> PatchResult:
    """Write the workspace's patch against ``base`` to ``out_path`` (atomically).

    ``seal``: the workspace's git root, made when it was materialized. Without one the
    workspace is sealed now, in a temporary root, from its objects as they are (a
    workspace made before seals existed, or one a test made by hand).
    """
    if seal is not None:
        return await _extract(ws, seal, excludes, Path(out_path), timeout_s)
    root = await asyncio.to_thread(tempfile.mkdtemp, prefix="arenad-seal-")
    try:
        late = await seal_after_the_fact(ws, os.path.join(root, "git"), base)
        return await _extract(ws, late, excludes, Path(out_path), timeout_s)
    finally:
        await asyncio.to_thread(shutil.rmtree, root, True)


async def _extract(
    ws: str | os.PathLike[str],
    seal: Seal,
    excludes: Iterable[str],
    out: Path,
    timeout_s: float,
) -> PatchResult:
    excludes = list(excludes)
    spec = pathspec(excludes)
    out.parent.mkdir(parents=True, exist_ok=True)
    # A fresh private index every time (a rerun after a crash starts from base again),
    # with the base index's mtime: git's racy-entry rule then judges its stat data by when
    # they were taken.
    shutil.copyfile(seal.base_index, seal.work_index)
    st = os.stat(seal.base_index)
    os.utime(seal.work_index, ns=(st.st_atime_ns, st.st_mtime_ns))
    write_repo_files(seal.root, seal.base)

    async def git(args: list[str], stage: str, stdout_path: Path | None = None) -> None:
        await gitsafe.run_git(
            args,
            git_dir=seal.git_dir,
            work_tree=ws,
            home=seal.root,
            index=seal.work_index,
            stage=stage,
            timeout_s=timeout_s,
            stdout_path=stdout_path,
        )

    await git(["add", "-A", "--", *spec], "patch-add")
    tmp = out.with_name(out.name + ".partial")
    try:
        await git(diff_args(seal.base, excludes), "patch-diff", tmp)
        data = tmp.read_bytes()
        os.replace(tmp, out)
    finally:
        tmp.unlink(missing_ok=True)
    return PatchResult(
        path=os.fspath(out),
        lines=patch_line_count(data),
        sha256=hashlib.sha256(data).hexdigest(),
        bytes=len(data),
        nested_repos=_nested_repos(seal),
    )


def _nested_repos(seal: Seal) -> list[str] | None:
    """Gitlinks staged now that the base index did not have (same path and commit)."""
    try:
        before = gitindex.gitlinks(seal.base_index)
        after = gitindex.gitlinks(seal.work_index)
    except (OSError, gitindex.IndexFormatError):
        return None
    return sorted(path for path, commit in after.items() if before.get(path) != commit)


class Extraction(msgspec.Struct, frozen=True, kw_only=True):
    """The patch step's result: the patch (None: none could be taken) and what the agent
    changed that it had no business changing (None: not checked, the workspace has no
    seal; empty: nothing)."""

    patch: PatchResult | None
    tampered: list[str] | None


async def extract_checked(
    ws: str | os.PathLike[str],
    base: str,
    excludes: Iterable[str],
    out_path: str | os.PathLike[str],
    seal: Seal | None,
    *,
    timeout_s: float = GIT_TIMEOUT_S,
) -> Extraction:
    """Inspect the workspace against its seal, then extract the patch.

    A replaced ``ws/.git`` or base is evidence, and the patch is still taken (it never
    depends on them); a replaced ``ws`` dir is not read at all (it could be a link to any
    directory). A patch that fails on a tampered workspace is one more piece of evidence,
    never a crash; on an intact one it raises CommandError as before.
    """
    if seal is None:
        return Extraction(
            patch=await extract_patch(ws, base, excludes, out_path, timeout_s=timeout_s),
            tampered=None,
        )
    seen = await inspect(seal)
    if not seen.workspace_intact:
        return Extraction(patch=None, tampered=seen.evidence)
    try:
        patch = await extract_patch(ws, base, excludes, out_path, seal=seal, timeout_s=timeout_s)
    except gitsafe.CommandError as exc:
        if not seen.evidence:
            raise
        return Extraction(patch=None, tampered=[*seen.evidence, f"no patch: {exc}"])
    return Extraction(patch=patch, tampered=seen.evidence)
