"""Patch extraction, as the reference's, through the daemon's own git (no agent config, no climb).

The reference ran ``git -C ws add -A`` then ``git -C ws diff --cached <base> -- . <excludes…>
':(exclude,glob).loops/**' ':(exclude,glob)**/.loops/**'``: test files and the supervisor's
own ``.loops`` state never reach the patch. Here the same two commands run on the cell's
sealed git root (:mod:`arenad.materialize.seal`): its own git dir and private index (the
workspace's index as the daemon left it), with ``ws`` as the work tree, hardened
(:mod:`arenad.materialize.gitsafe`), after the base's tree is read back. The agent's
``ws/.git`` is never read, so nothing it holds runs, redirects or changes the patch; on a
workspace whose ``.git`` is intact the bytes are the reference's.

Staging is limited to the same pathspec as the diff (what it leaves out is never shown), so
nested clones under ``.loops`` are not even hashed. Nested repositories elsewhere become
gitlinks, which the diff leaves out (``--ignore-submodules=all``: git then never reads a
``.gitmodules``, which an agent could craft to make the diff fail); their paths come back in
``nested_repos``, a labelled gap. The diff goes straight to the patch file (no in-memory
cap); its line count follows the reference's patchLineCount. Its head (up to
``keep_bytes``) comes back with it, for the log (:mod:`arenad.verdict.excerpt`), after the
list of every file in it (:mod:`arenad.verdict.patch_files`).
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

from arenad.materialize import gitsafe
from arenad.materialize.seal import (
    Seal,
    inspect_dirs,
    nested_repos,
    seal_after_the_fact,
    tree_args,
    tree_evidence,
)
from arenad.runs.executor import NodeFile
from arenad.verdict.excerpt import PATCH_KEEP_BYTES, head_excerpt
from arenad.verdict.grade import BYPRODUCTS, tamper_pathspec
from arenad.verdict.patch_files import FILES_KEPT, NAME_CHARS, patch_files
from events.cell import PatchFile, TextExcerpt

GIT_TIMEOUT_S = gitsafe.GIT_TIMEOUT_S
# The supervisor's own state: the reference excludes ``.loops``; newer writers keep it in
# ``.agent`` (readers try ``.agent`` then ``.loops``), which is no more the agent's patch.
LOOPS_EXCLUDES: tuple[str, ...] = (
    ":(exclude,glob).loops/**",
    ":(exclude,glob)**/.loops/**",
    ":(exclude,glob).agent/**",
    ":(exclude,glob)**/.agent/**",
)
# The reference's diff, made independent of any driver or submodule config.
DIFF_FLAGS: tuple[str, ...] = (
    "--no-ext-diff",
    "--no-textconv",
    "--no-color",
    "--ignore-submodules=all",
)


class PatchResult(NodeFile, frozen=True, kw_only=True):
    lines: int
    sha256: str
    bytes: int
    # Nested repositories (gitlinks) the agent left in the workspace, new or moved since
    # base: their files are in no patch. None: unknown (the index could not be read).
    nested_repos: list[str] | None = None
    # The patch's first bytes, with its whole size and sha256 (None: not asked for).
    excerpt: TextExcerpt | None = None
    # Every file of the patch with its size in it (arenad.verdict.patch_files), and the
    # files past that list's bound.
    files: list[PatchFile] | None = None
    files_omitted: int = 0
    # Paths the agent changed under the excludes or runner-steering config
    # (arenad.verdict.grade): none of them is graded as the agent left it. None: unknown.
    tampered_paths: list[str] | None = None


def exclude_pathspec(pattern: str) -> str:
    """``:(exclude,glob)<pattern>``; a pattern already in pathspec magic form passes as is."""
    return pattern if pattern.startswith(":") else f":(exclude,glob){pattern}"


def pathspec(excludes: Iterable[str]) -> list[str]:
    """The reference's pathspec: everything but the excludes and the supervisor's ``.loops``."""
    return [".", *(exclude_pathspec(p) for p in excludes), *LOOPS_EXCLUDES]


def diff_args(base: str, excludes: Iterable[str]) -> list[str]:
    return ["diff", "--cached", *DIFF_FLAGS, base, "--", *pathspec(excludes)]


def patch_line_count(patch: bytes | str) -> int:
    """Lines in the patch, not counting an empty line after a final newline (the reference's)."""
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
    keep_bytes: int = PATCH_KEEP_BYTES,
) -> PatchResult:
    """Write the workspace's patch against ``base`` to ``out_path`` (atomically).

    ``seal``: the workspace's git root, made when it was materialized. Without one the
    workspace is sealed now, in a temporary root, from its objects as they are (a
    workspace made before seals existed, or one a test made by hand).
    """
    if seal is not None:
        return (await _extract(ws, seal, excludes, Path(out_path), timeout_s, keep_bytes))[0]
    root = await asyncio.to_thread(tempfile.mkdtemp, prefix="arenad-seal-")
    try:
        late = await seal_after_the_fact(ws, os.path.join(root, "git"), base)
        return (await _extract(ws, late, excludes, Path(out_path), timeout_s, keep_bytes))[0]
    finally:
        await asyncio.to_thread(shutil.rmtree, root, True)


async def _extract(
    ws: str | os.PathLike[str],
    seal: Seal,
    excludes: Iterable[str],
    out: Path,
    timeout_s: float,
    keep_bytes: int,
) -> tuple[PatchResult, str]:
    """The patch, and what ``rev-parse <base>^{tree}`` said (see seal.tree_evidence).

    One process tree for the three commands (the daemon pays one spawn). The private
    index is used in place: ``add -A`` makes every entry the pathspec covers match the
    work tree whatever it held, and leaves the others at base, so a rerun after a crash
    stages the same thing.
    """
    excludes = list(excludes)
    spec = pathspec(excludes)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".partial")
    tampered_paths: list[str] | None
    try:
        await gitsafe.run_git_steps(
            [
                gitsafe.GitStep(
                    args=tree_args(seal.base),
                    stage="patch-tree",
                    stdout=seal.tree_out,
                    may_fail=True,
                ),
                gitsafe.GitStep(args=["add", "-A", "--", *spec], stage="patch-add"),
                gitsafe.GitStep(
                    args=diff_args(seal.base, excludes), stage="patch-diff", stdout=str(tmp)
                ),
                *_tamper_steps(seal, excludes),
            ],
            git_dir=seal.git_dir,
            work_tree=ws,
            home=seal.root,
            index=seal.index,
            timeout_s=timeout_s,
        )
        tampered_paths = _read_names(seal.tamper_out)
    except gitsafe.CommandError as exc:
        # The patch was taken; only the list of what else changed could not be made.
        if exc.stage not in _TAMPER_STAGES or exc.timed_out or not tmp.exists():
            tmp.unlink(missing_ok=True)
            raise
        tampered_paths = None
    try:
        data = tmp.read_bytes()
        os.replace(tmp, out)
    finally:
        tmp.unlink(missing_ok=True)
    files, omitted = patch_files(data)
    patch = PatchResult(
        path=os.fspath(out),
        lines=patch_line_count(data),
        sha256=hashlib.sha256(data).hexdigest(),
        bytes=len(data),
        nested_repos=nested_repos(seal),
        excerpt=head_excerpt(data, keep_bytes),
        files=files,
        files_omitted=omitted,
        tampered_paths=tampered_paths,
    )
    return patch, _read_tree_out(seal)


_TAMPER_STAGES = ("patch-tamper-add", "patch-tamper")


def _tamper_steps(seal: Seal, excludes: list[str]) -> list[gitsafe.GitStep]:
    """After the patch: stage everything else too (the excluded paths; ``.`` always
    matches, where a pathspec of absent files would fail ``add``), then list what differs
    from base under the excludes and the runner-steering config. The patch's pathspec
    leaves those entries out, so a rerun takes the same patch."""
    spec = tamper_pathspec(excludes, LOOPS_EXCLUDES)
    return [
        gitsafe.GitStep(
            args=["add", "-A", "--", ".", *LOOPS_EXCLUDES, *BYPRODUCTS],
            stage="patch-tamper-add",
        ),
        gitsafe.GitStep(
            args=["diff", "--cached", "--name-only", "-z", *DIFF_FLAGS, seal.base, "--", *spec],
            stage="patch-tamper",
            stdout=seal.tamper_out,
        ),
    ]


def _read_names(path: str) -> list[str] | None:
    """``-z`` separated names (C-quoting is off with ``-z``), bounded like a patch's file
    list; None when the file cannot be read."""
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except OSError:
        return None
    names = [n.decode("utf-8", errors="backslashreplace") for n in raw.split(b"\0") if n]
    kept = [n if len(n) <= NAME_CHARS else n[: NAME_CHARS - 1] + "…" for n in names]
    if len(kept) > FILES_KEPT:
        return [*kept[:FILES_KEPT], f"… and {len(kept) - FILES_KEPT} more"]
    return kept


def _read_tree_out(seal: Seal) -> str:
    try:
        with open(seal.tree_out, encoding="utf-8", errors="replace") as f:
            return f.read()
    except OSError as exc:
        return exc.strerror or str(exc)


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
    keep_bytes: int = PATCH_KEEP_BYTES,
) -> Extraction:
    """Inspect the workspace against its seal, then extract the patch.

    A replaced ``ws/.git`` or base is evidence, and the patch is still taken (it never
    depends on them); a replaced ``ws`` dir is not read at all (it could be a link to any
    directory). A patch that fails on a tampered workspace is one more piece of evidence,
    never a crash; on an intact one it raises CommandError as before.
    """
    if seal is None:
        return Extraction(
            patch=await extract_patch(
                ws, base, excludes, out_path, timeout_s=timeout_s, keep_bytes=keep_bytes
            ),
            tampered=None,
        )
    seen = inspect_dirs(seal)
    if not seen.workspace_intact:
        return Extraction(patch=None, tampered=seen.evidence)
    evidence = list(seen.evidence)
    try:
        patch, said = await _extract(ws, seal, excludes, Path(out_path), timeout_s, keep_bytes)
    except gitsafe.CommandError as exc:
        wrong = tree_evidence(seal, _read_tree_out(seal))
        evidence += [wrong] if wrong is not None else []
        if not evidence:
            raise
        return Extraction(patch=None, tampered=[*evidence, f"no patch: {exc}"])
    wrong = tree_evidence(seal, said)
    return Extraction(patch=patch, tampered=evidence + ([wrong] if wrong is not None else []))
