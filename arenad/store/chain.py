"""Tamper evidence: each row's hash covers the previous row's hash and its own content."""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Iterable

import msgspec

GENESIS = bytes(32)
_HEADER = struct.Struct(">qqqq")
_LEN = struct.Struct(">Q")
_sha256 = hashlib.sha256


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
    """sha256(prev ‖ seq, version, schema_version, recorded_at_ms as 8-byte big-endian
    ‖ stream, tag and payload, each after its 8-byte big-endian length).

    Length-prefixed so no two field splits hash alike.
    """
    return row_hash_parts(
        prev,
        seq,
        version,
        schema_version,
        recorded_at_ms,
        length_prefixed(stream),
        length_prefixed(tag),
        payload,
    )


def length_prefixed(text: str) -> bytes:
    raw = text.encode()
    return _LEN.pack(len(raw)) + raw


def row_hash_parts(
    prev: bytes,
    seq: int,
    version: int,
    schema_version: int,
    recorded_at_ms: int,
    stream_part: bytes,
    tag_part: bytes,
    payload: bytes,
) -> bytes:
    """``row_hash`` with the stream and tag already length-prefixed: the append path
    prefixes a stream once per request and a tag once per process, then hashes each
    row with one join and one digest."""
    return _sha256(
        b"".join(
            (
                prev,
                _HEADER.pack(seq, version, schema_version, recorded_at_ms),
                stream_part,
                tag_part,
                _LEN.pack(len(payload)),
                payload,
            )
        )
    ).digest()


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
    # The head the walk verified (set when ok).
    head_seq: int | None = None
    head_hash: bytes | None = None


class ChainVerifier:
    """Walks the chain one row at a time (so a long log verifies in flat memory), from
    the first row or from a head verified before (``after_seq``, ``after_hash``)."""

    def __init__(self, after_seq: int = 0, after_hash: bytes = GENESIS) -> None:
        self._prev = after_hash
        self._expected_seq = after_seq + 1
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
        try:
            payload = row.payload
            computed = row_hash(
                self._prev,
                row.seq,
                row.stream,
                row.version,
                row.tag,
                row.schema_version,
                row.recorded_at_ms,
                payload.encode() if isinstance(payload, str) else bytes(payload),
            )
            matches = isinstance(row.hash, bytes) and computed == row.hash
        except (TypeError, ValueError, AttributeError, struct.error, OverflowError):
            # A column edited to another type (text for a blob, NULL, a float...):
            # the row cannot even be hashed, so it is as bad as a wrong hash.
            matches = False
        if not matches:
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
        if last != head_seq or not isinstance(head_hash, bytes) or self._prev != head_hash:
            return ChainReport(
                ok=False,
                rows=self.rows,
                first_bad_seq=min(last, head_seq) + 1,
                problem=f"the log ends at row {last} but its head records row {head_seq}"
                " (rows were deleted from the end, or the head was edited)",
            )
        return ChainReport(ok=True, rows=self.rows, head_seq=head_seq, head_hash=head_hash)


def verify_rows(rows: Iterable[ChainRow], head_seq: int, head_hash: bytes) -> ChainReport:
    verifier = ChainVerifier()
    for row in rows:
        if not verifier.feed(row):
            break
    return verifier.finish(head_seq, head_hash)
