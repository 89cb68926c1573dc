"""Git's index file (``.git/index``, format 2–4), read and restamped in-process.

Two uses, both on index files arenad wrote or copied itself, never on one an agent could
have touched:

- **Restamp a copied workspace's index.** A copy of a prepared checkout has new inodes and
  ctimes, so every entry's stat data is stale: ``git diff-files`` lists every tracked file
  and ``git apply --index``/``--3way`` refuse ("does not match index") until a refresh
  re-hashes them all. The copy's bytes are the template's, and the template's index was
  clean, so the content is known: only the stat data must be taken from the new files.
  That is what ``git update-index --refresh`` would end with, without reading a byte of
  content and without a git process per cell.
- **List the gitlinks** (mode 160000: nested repositories) of an index.

Anything unusual (split index, untracked cache, sparse entries, unmerged stages, another
hash) is refused with :class:`IndexFormatError`; callers then let git do the work.
"""

from __future__ import annotations

import hashlib
import os
import stat
import struct

# ctime s/ns, mtime s/ns, dev, ino, mode, uid, gid, size; then the object id and flags.
_STAT = struct.Struct(">10I")
_HASH_LEN = 20  # SHA-1 repositories only
_FLAGS = struct.Struct(">H")
_NAME_MASK = 0x0FFF
_EXTENDED = 0x4000
_STAGE_MASK = 0x3000
_SKIP_WORKTREE = 0x4000  # in the extended flags (v3+)
_GITLINK = 0o160000
_ENTRY_FIXED = _STAT.size + _HASH_LEN + _FLAGS.size  # 62
# Extensions whose bytes do not depend on the entries' stat data.
_STAT_FREE_EXTENSIONS = frozenset({b"TREE", b"REUC", b"EOIE", b"IEOT"})
_U32 = 0xFFFFFFFF


class IndexFormatError(ValueError):
    """The index is not one this module reads (or is corrupt)."""


class _Entry:
    __slots__ = ("mode", "oid", "path", "skip_worktree", "stage", "stat_at")

    def __init__(
        self, stat_at: int, mode: int, oid: bytes, path: bytes, stage: int, skip: bool
    ) -> None:
        self.stat_at = stat_at
        self.mode = mode
        self.oid = oid
        self.path = path
        self.stage = stage
        self.skip_worktree = skip


def _parse(data: bytes) -> tuple[int, list[_Entry], int]:
    """(version, entries, offset where the extensions begin)."""
    if len(data) < 12 + _HASH_LEN or data[:4] != b"DIRC":
        raise IndexFormatError("not an index file")
    if hashlib.sha1(data[:-_HASH_LEN]).digest() != data[-_HASH_LEN:]:
        raise IndexFormatError("checksum mismatch (or not a SHA-1 repository)")
    version, count = struct.unpack_from(">II", data, 4)
    if version not in (2, 3, 4):
        raise IndexFormatError(f"index version {version}")
    end = len(data) - _HASH_LEN
    at = 12
    previous = b""
    entries: list[_Entry] = []
    for _ in range(count):
        if at + _ENTRY_FIXED > end:
            raise IndexFormatError("truncated entry")
        mode = struct.unpack_from(">I", data, at + 24)[0]
        oid = data[at + 40 : at + 40 + _HASH_LEN]
        (flags,) = _FLAGS.unpack_from(data, at + 60)
        name_at = at + _ENTRY_FIXED
        skip = False
        if flags & _EXTENDED:
            if version < 3:
                raise IndexFormatError("extended flags in a version 2 index")
            (extended,) = _FLAGS.unpack_from(data, name_at)
            skip = bool(extended & _SKIP_WORKTREE)
            name_at += _FLAGS.size
        if version == 4:
            strip, name_at = _varint(data, name_at)
            nul = data.index(b"\0", name_at)
            if strip > len(previous):
                raise IndexFormatError("bad path compression")
            path = previous[: len(previous) - strip] + data[name_at:nul]
            next_at = nul + 1
        else:
            length = flags & _NAME_MASK
            nul = name_at + length if length < _NAME_MASK else data.index(b"\0", name_at)
            path = data[name_at:nul]
            # Padded with 1–8 NULs to a multiple of 8 bytes from the entry's start.
            next_at = at + ((nul - at + 8) & ~7)
        if next_at > end:
            raise IndexFormatError("truncated entry")
        entries.append(_Entry(at, mode, oid, path, (flags & _STAGE_MASK) >> 12, skip))
        previous = path
        at = next_at
    return version, entries, at


def _varint(data: bytes, at: int) -> tuple[int, int]:
    """Git's offset varint (index v4 path compression): value, next offset."""
    byte = data[at]
    at += 1
    value = byte & 0x7F
    while byte & 0x80:
        byte = data[at]
        at += 1
        value = ((value + 1) << 7) | (byte & 0x7F)
    return value, at


def _extensions(data: bytes, at: int) -> list[bytes]:
    end = len(data) - _HASH_LEN
    found = []
    while at < end:
        if at + 8 > end:
            raise IndexFormatError("truncated extension")
        sig = data[at : at + 4]
        (size,) = struct.unpack_from(">I", data, at + 4)
        found.append(sig)
        at += 8 + size
    if at != end:
        raise IndexFormatError("extension overruns the index")
    return found


def gitlinks(path: str | os.PathLike[str]) -> dict[str, str]:
    """Every gitlink entry of the index at ``path``: repository path -> commit id."""
    with open(path, "rb") as f:
        return gitlinks_of(f.read())


def gitlinks_of(data: bytes) -> dict[str, str]:
    """Every gitlink entry of an index file's bytes: repository path -> commit id."""
    _version, entries, _at = _parse(data)
    return {
        e.path.decode("utf-8", "surrogateescape"): e.oid.hex()
        for e in entries
        if e.mode == _GITLINK
    }


def restamp(index_path: str | os.PathLike[str], work_tree: str | os.PathLike[str]) -> bytes:
    """Rewrite the index at ``index_path`` (in place: nobody else may be reading it) with
    every entry's stat data taken from its file under ``work_tree`` (content trusted to be
    what the entry names); returns the bytes written. Raises IndexFormatError (nothing
    written) for what it does not handle, or a file whose type no longer matches its
    entry."""
    with open(index_path, "rb") as f:
        data = bytearray(f.read())
    _version, entries, ext_at = _parse(bytes(data))
    for sig in _extensions(bytes(data), ext_at):
        if sig not in _STAT_FREE_EXTENSIONS:
            raise IndexFormatError(f"index extension {sig!r}")
    root = os.fspath(work_tree).encode()
    for e in entries:
        if e.stage or e.skip_worktree or e.mode == _GITLINK:
            raise IndexFormatError("unmerged, sparse or gitlink entries")
        try:
            st = os.lstat(root + b"/" + e.path)
        except OSError as exc:
            raise IndexFormatError(f"{e.path!r}: {exc.strerror}") from exc
        if stat.S_IFMT(st.st_mode) != stat.S_IFMT(e.mode):
            raise IndexFormatError(f"{e.path!r} changed type")
        _STAT.pack_into(
            data,
            e.stat_at,
            st.st_ctime_ns // 1_000_000_000 & _U32,
            st.st_ctime_ns % 1_000_000_000,
            st.st_mtime_ns // 1_000_000_000 & _U32,
            st.st_mtime_ns % 1_000_000_000,
            st.st_dev & _U32,
            st.st_ino & _U32,
            e.mode,
            st.st_uid & _U32,
            st.st_gid & _U32,
            st.st_size & _U32,
        )
    data[-_HASH_LEN:] = hashlib.sha1(bytes(data[:-_HASH_LEN])).digest()
    out = bytes(data)
    # In place, same size: the workspace is still the daemon's alone (and a new file and a
    # rename cost far more than a write on a filesystem slow to make inodes).
    with open(index_path, "r+b") as f:
        f.write(out)
    return out
