"""Patch extraction, exactly as the seed: stage everything, diff the index against the base.

``git -C ws add -A`` then ``git -C ws diff --cached <base> -- . <excludes…>
':(exclude,glob).loops/**' ':(exclude,glob)**/.loops/**'`` — test files and the supervisor's
own ``.loops`` state never reach the patch. The diff goes straight to the patch file (no
in-memory cap); its line count follows the seed's patchLineCount. Its head (up to
``keep_bytes``) comes back with it, for the log (:mod:`arenad.verdict.excerpt`).
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable
from pathlib import Path

import msgspec

from arenad.runs.commands import run_ok
from arenad.verdict.excerpt import PATCH_KEEP_BYTES, head_excerpt
from events.cell import TextExcerpt

GIT_TIMEOUT_S = 120.0
LOOPS_EXCLUDES: tuple[str, ...] = (":(exclude,glob).loops/**", ":(exclude,glob)**/.loops/**")


class PatchResult(msgspec.Struct, frozen=True, kw_only=True):
    path: str
    lines: int
    sha256: str
    bytes: int
    # The patch's first bytes, with its whole size and sha256 (None: not asked for).
    excerpt: TextExcerpt | None = None


def exclude_pathspec(pattern: str) -> str:
    """``:(exclude,glob)<pattern>``; a pattern already in pathspec magic form passes as is."""
    return pattern if pattern.startswith(":") else f":(exclude,glob){pattern}"


def diff_argv(ws: str, base: str, excludes: Iterable[str], git: str = "git") -> list[str]:
    return [
        git,
        "-C",
        ws,
        "diff",
        "--cached",
        base,
        "--",
        ".",
        *(exclude_pathspec(p) for p in excludes),
        *LOOPS_EXCLUDES,
    ]


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
    git: str = "git",
    timeout_s: float = GIT_TIMEOUT_S,
    keep_bytes: int = PATCH_KEEP_BYTES,
) -> PatchResult:
    """Write the workspace's patch against ``base`` to ``out_path`` (atomically)."""
    w = os.fspath(ws)
    out = Path(out_path)
    out.parent.mkdir(parents=True, exist_ok=True)
    await run_ok([git, "-C", w, "add", "-A"], timeout_s, stage="patch-add")
    tmp = out.with_name(out.name + ".partial")
    try:
        await run_ok(
            diff_argv(w, base, excludes, git), timeout_s, stage="patch-diff", stdout_path=tmp
        )
        data = tmp.read_bytes()
        os.replace(tmp, out)
    finally:
        tmp.unlink(missing_ok=True)
    return PatchResult(
        path=os.fspath(out),
        lines=patch_line_count(data),
        sha256=hashlib.sha256(data).hexdigest(),
        bytes=len(data),
        excerpt=head_excerpt(data, keep_bytes),
    )
