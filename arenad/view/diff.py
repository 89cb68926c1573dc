"""A unified diff's lines, classified for display. Pure; the text is never interpreted
beyond its first characters (it is the agent's)."""

from __future__ import annotations

from typing import Literal

import msgspec

__all__ = ["DiffLine", "diff_lines"]

Kind = Literal["file", "meta", "hunk", "add", "del", "ctx"]


class DiffLine(msgspec.Struct, frozen=True):
    kind: Kind
    text: str


def diff_lines(text: str) -> list[DiffLine]:
    """Each line of ``text`` with its kind. Inside a hunk a line is what its first
    character says (so a removed ``-- x`` line is a deletion, not a file header);
    between hunks, ``diff --git`` starts a file and the rest is its header."""
    out: list[DiffLine] = []
    in_hunk = False
    for line in text.splitlines():
        if line.startswith("diff "):
            in_hunk = False
            out.append(DiffLine("file", line))
        elif line.startswith("@@"):
            in_hunk = True
            out.append(DiffLine("hunk", line))
        elif not in_hunk:
            out.append(DiffLine("meta", line))
        elif line.startswith("+"):
            out.append(DiffLine("add", line))
        elif line.startswith("-"):
            out.append(DiffLine("del", line))
        else:
            out.append(DiffLine("ctx", line))
    return out
