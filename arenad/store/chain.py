"""Tamper evidence: each row's hash covers the previous row's hash and its own content."""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Iterable

import msgspec

GENESIS = bytes(32)
_HEADER = struct.Struct(">qqqq")


def row_hash(
    prev: bytes,
    seq: int,
    stream: str,
    version: int,
    tag: str,
    schema_version: int,
    recorded_at_ms: int,
    payload: bytes,
) -> bytes:
    h = hashlib.sha256(prev)
    h.update(_HEADER.pack(seq, version, schema_version, recorded_at_ms))
    # Length-prefixed so no two field splits hash alike.
    for part in (stream.encode(), tag.encode(), payload):
        h.update(len(part).to_bytes(8, "big"))
        h.update(part)
    return h.digest()


class ChainRow(msgspec.Struct, frozen=True, array_like=True):
    seq: int
    stream: str
    version: int
    tag: str
    schema_version: int
    recorded_at_ms: int
    payload: bytes
    hash: bytes


class ChainReport(msgspec.Struct, frozen=True, kw_only=True):
    ok: bool
    rows: int
    first_bad_seq: int | None = None
    problem: str | None = None


class ChainVerifier:
    """Walks the chain one row at a time (so a long log verifies in flat memory)."""

    def __init__(self) -> None:
        self._prev = GENESIS
        self._expected_seq = 1
        self.rows = 0
        self.failure: ChainReport | None = None

    def feed(self, row: ChainRow) -> bool:
        """Check one row; False (and ``failure`` set) at the first bad one."""
        if self.failure is not None:
            return False
        self.rows += 1
        if row.seq != self._expected_seq:
            self.failure = ChainReport(
                ok=False,
                rows=self.rows,
                first_bad_seq=self._expected_seq,
                problem=f"row {self._expected_seq} is missing (the next row is {row.seq})",
            )
            return False
        computed = row_hash(
            self._prev,
            row.seq,
            row.stream,
            row.version,
            row.tag,
            row.schema_version,
            row.recorded_at_ms,
            bytes(row.payload),
        )
        if computed != bytes(row.hash):
            self.failure = ChainReport(
                ok=False,
                rows=self.rows,
                first_bad_seq=row.seq,
                problem=f"row {row.seq} does not match its hash (it, or its hash, was edited)",
            )
            return False
        self._prev = computed
        self._expected_seq += 1
        return True

    def finish(self, head_seq: int, head_hash: bytes) -> ChainReport:
        if self.failure is not None:
            return self.failure
        last = self._expected_seq - 1
        if last != head_seq or self._prev != bytes(head_hash):
            return ChainReport(
                ok=False,
                rows=self.rows,
                first_bad_seq=min(last, head_seq) + 1,
                problem=f"the log ends at row {last} but its head records row {head_seq}"
                " (rows were deleted from the end, or the head was edited)",
            )
        return ChainReport(ok=True, rows=self.rows)


def verify_rows(rows: Iterable[ChainRow], head_seq: int, head_hash: bytes) -> ChainReport:
    verifier = ChainVerifier()
    for row in rows:
        if not verifier.feed(row):
            break
    return verifier.finish(head_seq, head_hash)
