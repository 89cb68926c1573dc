"""Where proposer shots and their Claude Code transcripts live, and the streams that
record them. Pure: names only, no I/O.

    <home>/proposer-shots/[<author>/]gen<G>-cand<C>-shot<S>.json   shot receipts
    <worktree root>/gen<G>-cand<C>[-<author>]/                      a shot's worktree (cwd)
    <claude projects dir>/<slug(cwd)>/<session>.jsonl               its Claude transcripts

The worktree root defaults to ``<home>/proposer-wt`` (the reference tree's
``proposer-wt/``), the Claude projects dir to ``~/.claude/projects``; both can be given
(``arenad.proposer.capture.ProposerPaths``).

Streams: ``proposer/shot/<path under proposer-shots>`` holds the captures of one receipt
file, ``proposer/transcript/<slug>/<file>`` those of one transcript; the latest event of
a stream is the file's current content.
"""

from __future__ import annotations

import posixpath
import re
from typing import Final

import msgspec

from events import streams

__all__ = [
    "SHOT_PREFIX",
    "TRANSCRIPT_PREFIX",
    "ShotName",
    "candidate_id",
    "claude_project_slug",
    "parse_shot_path",
    "shot_stream",
    "transcript_stream",
    "worktree_cwd",
]

SHOT_PREFIX: Final = streams.PROPOSER_SHOT
TRANSCRIPT_PREFIX: Final = streams.PROPOSER_TRANSCRIPT

# The reference's /^gen(\d+)-cand(\d+)-shot(\d+)\.json$/ (JS \d is ASCII only). Names the
# fan-out writes for unknown coordinates (genx-candx-…) are not receipts there either.
_RECEIPT_NAME = re.compile(r"gen([0-9]+)-cand([0-9]+)-shot([0-9]+)\.json", re.ASCII)


class ShotName(msgspec.Struct, frozen=True, kw_only=True):
    """A receipt's coordinates, read from its path under the shots dir."""

    rel: str  # "<name>" or "<author>/<name>"
    author: str | None
    generation: int
    candidate_index: int
    shot: int


def parse_shot_path(rel: str) -> ShotName | None:
    """``[<author>/]gen<G>-cand<C>-shot<S>.json`` → its coordinates, else None."""
    parts = rel.split("/")
    if len(parts) > 2 or any(p in ("", ".", "..") for p in parts):
        return None
    match = _RECEIPT_NAME.fullmatch(parts[-1])
    if match is None:
        return None
    return ShotName(
        rel=rel,
        author=parts[0] if len(parts) == 2 else None,
        generation=int(match[1]),
        candidate_index=int(match[2]),
        shot=int(match[3]),
    )


def candidate_id(generation: int, candidate_index: int) -> str:
    """The reference's ``candidateId``: ``baseline`` for (-1, -1), else ``gen<G>-cand<C>``."""
    if generation == -1 and candidate_index == -1:
        return "baseline"
    return f"gen{generation}-cand{candidate_index}"


def worktree_cwd(root: str, name: ShotName) -> str:
    """The worktree a shot ran in: ``<root>/gen<G>-cand<C>[-<author>]``."""
    leaf = f"gen{name.generation}-cand{name.candidate_index}"
    if name.author is not None:
        leaf = f"{leaf}-{name.author}"
    return posixpath.join(root, leaf)


def claude_project_slug(cwd: str) -> str:
    """Claude Code's project directory name for ``cwd``.

    Every character outside ``[A-Za-z0-9-]`` becomes ``-``. JS replaces per UTF-16 code
    unit, so a character beyond the BMP becomes ``--``.
    """
    out: list[str] = []
    for ch in cwd:
        if ch.isascii() and (ch.isalnum() or ch == "-"):
            out.append(ch)
        else:
            out.append("--" if ord(ch) > 0xFFFF else "-")
    return "".join(out)


def shot_stream(rel: str) -> str:
    return SHOT_PREFIX + rel


def transcript_stream(slug: str, file_name: str) -> str:
    return f"{TRANSCRIPT_PREFIX}{slug}/{file_name}"
