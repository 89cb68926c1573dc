"""The log's head kept outside the log: what a hash chain alone cannot catch.

A chain proves every row follows from the one before it, and the head row names the last
one; but deleting the newest rows and rewriting the head to the last row left is a shorter,
perfectly valid chain. ``arenad verify-log --anchor FILE`` closes that gap with a file the
user keeps elsewhere (another disk, a backup, a commit): when FILE exists, the log must
still hold the row it names, with the hash it names; then (or when FILE does not exist
yet) FILE is set to the log's current head.

The file is one JSON object: ``{"format": "arenad.anchor.v1", "seq": N, "hash": "<hex>"}``.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

import msgspec

from arenad.errors import UserError

FORMAT = "arenad.anchor.v1"


class Anchor(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    format: str
    seq: int
    hash: str

    @property
    def digest(self) -> bytes:
        return bytes.fromhex(self.hash)


_decoder = msgspec.json.Decoder(Anchor)


def read_anchor(path: Path) -> Anchor | None:
    """The anchor recorded in ``path`` (None if there is no such file yet)."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise UserError(f"{path}: cannot read the anchor: {exc.strerror or exc}") from exc
    try:
        anchor = _decoder.decode(data)
        if anchor.format != FORMAT or anchor.seq < 0 or len(anchor.digest) != 32:
            raise ValueError(f"not an {FORMAT} anchor")
    except (msgspec.DecodeError, ValueError) as exc:
        raise UserError(f"{path}: not an arenad anchor file ({exc})") from exc
    return anchor


def write_anchor(path: Path, seq: int, digest: bytes) -> None:
    """Set ``path`` to this head, atomically (temp file, fsync, rename)."""
    data = msgspec.json.encode(Anchor(format=FORMAT, seq=seq, hash=digest.hex())) + b"\n"
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        with tmp.open("wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise UserError(f"{path}: cannot write the anchor: {exc.strerror or exc}") from exc
