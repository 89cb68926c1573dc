"""Every file of a patch, with its size in the patch: what the kept head lists first. Pure.

The log keeps a patch's first 512 KiB (:mod:`arenad.verdict.excerpt`). Git orders a diff
by path, so a junk file whose name sorts first (``0000.bin``, ``a/aaaa``) can fill the head
and push the real change out of what the log and the view show (issue 27, finding 11).
The list of every file, each with the bytes of its section, is kept before the head, so
nothing the agent changed can hide behind the cut.

A file's section starts at a ``diff --git`` line. Its path is read from the section's own
header: ``rename to`` / ``copy to`` (where it went), else ``+++ b/…`` (``--- a/…`` for a
deleted file), else the ``diff --git a/X b/X`` line (a mode change, a binary file, an empty
new file). Git C-quotes a path holding a quote, a backslash, a control character or (with
``core.quotepath``, its default) a non-ASCII byte; the quoting is undone, and bytes that are
not UTF-8 are shown as ``\\xNN``. The list is bounded (:data:`FILES_KEPT` entries, names of
:data:`NAME_CHARS` characters); files past it are counted.
"""

from __future__ import annotations

import itertools
import re
from typing import Final

from events.cell import PatchFile

__all__ = ["FILES_KEPT", "NAME_CHARS", "patch_files", "section_names", "sections"]

FILES_KEPT: Final = 5000
NAME_CHARS: Final = 1024

_DIFF = b"diff --git "
_HEADER_LINES = 16
_HEADER_BYTES = 3 * (NAME_CHARS * 4 + 64) + 1024
_ESCAPES = {
    ord("a"): 7,
    ord("b"): 8,
    ord("t"): 9,
    ord("n"): 10,
    ord("v"): 11,
    ord("f"): 12,
    ord("r"): 13,
    ord('"'): ord('"'),
    ord("\\"): ord("\\"),
}
_OCTAL = re.compile(rb"[0-7]{3}")


def _unquote(quoted: bytes) -> tuple[bytes, bytes] | None:
    """A git C-quoted name at the start of ``quoted`` (which begins with ``"``): the name
    and what follows the closing quote; None when it is not one."""
    out = bytearray()
    i = 1
    while i < len(quoted):
        c = quoted[i]
        if c == ord('"'):
            return bytes(out), quoted[i + 1 :]
        if c == ord("\\") and i + 1 < len(quoted):
            nxt = quoted[i + 1]
            if _OCTAL.match(quoted, i + 1):
                out.append(int(quoted[i + 1 : i + 4], 8) & 0xFF)
                i += 4
                continue
            out.append(_ESCAPES.get(nxt, nxt))
            i += 2
            continue
        out.append(c)
        i += 1
    return None


def _path(raw: bytes, prefix: bytes) -> bytes | None:
    """The path a header value names: ``prefix`` (``a/``, ``b/`` or empty) stripped, its
    quoting undone, the tab git adds after a name with a space dropped."""
    if raw.startswith(b'"'):
        found = _unquote(raw)
        if found is None:
            return None
        raw = found[0]
    else:
        raw = raw.rstrip(b"\t")
    if not raw.startswith(prefix):
        return None
    return raw[len(prefix) :]


def _from_diff_line(rest: bytes) -> bytes | None:
    """``a/X b/Y`` of a ``diff --git`` line: Y (git writes it unquoted only when both
    names are plain; then, with no rename, X == Y and the split is where they match)."""
    if rest.startswith(b'"'):
        first = _unquote(rest)
        if first is None:
            return None
        return _path(first[1].lstrip(b" "), b"b/")
    n = len(rest) - 5
    if n > 0 and n % 2 == 0:
        name = rest[2 : 2 + n // 2]
        if rest == b"a/" + name + b" b/" + name:
            return name
    at = rest.rfind(b" b/")
    return rest[at + 3 :] if at >= 0 else None


def _section_path(section: list[bytes]) -> bytes | None:
    old = new = renamed = None
    for line in section[1:]:
        if line.startswith((b"@@", b"Binary files ", b"GIT binary patch")):
            break
        if line.startswith((b"rename to ", b"copy to ")):
            renamed = _path(line.split(b" ", 2)[2], b"")
        elif line.startswith(b"+++ "):
            new = _path(line[4:], b"b/")
        elif line.startswith(b"--- "):
            old = _path(line[4:], b"a/")
    return renamed or new or old or _from_diff_line(section[0][len(_DIFF) :])


def _name(path: bytes | None) -> str:
    text = "?" if path is None else path.decode("utf-8", errors="backslashreplace")
    return text if len(text) <= NAME_CHARS else text[: NAME_CHARS - 1] + "…"


def patch_files(data: bytes) -> tuple[list[PatchFile], int]:
    """Every file of ``data`` (a git diff) in patch order with the bytes of its section,
    and how many files past :data:`FILES_KEPT` were counted, not listed."""
    starts: list[int] = [0] if data.startswith(_DIFF) else []
    at = data.find(b"\n" + _DIFF)
    while at >= 0:
        starts.append(at + 1)
        at = data.find(b"\n" + _DIFF, at + 1)
    files: list[PatchFile] = []
    for i, start in enumerate(starts[:FILES_KEPT]):
        end = starts[i + 1] if i + 1 < len(starts) else len(data)
        # The header is all a path needs: its first lines, never the hunks' bulk.
        header = data[start : min(end, start + _HEADER_BYTES)].split(b"\n")[:_HEADER_LINES]
        files.append(PatchFile(path=_name(_section_path(header)), size=end - start))
    return files, max(0, len(starts) - FILES_KEPT)


def sections(data: bytes) -> list[bytes]:
    """``data`` (a git diff) cut into its files' sections, in order; bytes before the first
    ``diff --git`` line (none in git's own output) are a section of their own."""
    starts: list[int] = [0]
    at = data.find(b"\n" + _DIFF)
    while at >= 0:
        starts.append(at + 1)
        at = data.find(b"\n" + _DIFF, at + 1)
    bounds = [*starts, len(data)]
    return [data[a:b] for a, b in itertools.pairwise(bounds) if b > a]


def section_names(section: bytes) -> list[str]:
    """Every path a section's header names (where the file was and where it went: both
    sides of a rename or copy), its quoting undone."""
    header = section[:_HEADER_BYTES].split(b"\n")[:_HEADER_LINES]
    names: list[bytes | None] = []
    if header and header[0].startswith(_DIFF):
        names.append(_from_diff_line(header[0][len(_DIFF) :]))
    for line in header[1:]:
        if line.startswith((b"@@", b"Binary files ", b"GIT binary patch")):
            break
        if line.startswith((b"rename to ", b"copy to ", b"rename from ", b"copy from ")):
            names.append(_path(line.split(b" ", 2)[2], b""))
        elif line.startswith(b"+++ "):
            names.append(_path(line[4:], b"b/"))
        elif line.startswith(b"--- "):
            names.append(_path(line[4:], b"a/"))
    return sorted({_name(n) for n in names if n is not None})
