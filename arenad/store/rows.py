"""A row as the log stores it, and its decoding into a ``Recorded``.

``StoredRow`` is the columns of ``events`` a reader selects, the payload still msgspec
JSON: what ``EventStore.read_stream_rows`` hands a reader that decodes each stream only
when it folds it. ``decode_rows`` is the one decoder of stored rows, for every read.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import msgspec

from arenad.errors import StoreError
from events.base import Recorded
from events.codec import (
    CURRENT_SHAPE,
    UnknownEventError,
    decode_current_payload,
    decode_event,
    encode_event,
)

__all__ = ["StoredRow", "decode_rows", "stored_row"]

# (seq, stream, version, tag, schema_version, recorded_at_ms, payload): the order of
# the columns every read selects, so a SQLite row is one as it comes.
StoredRow = tuple[int, str, int, str, int, int, bytes]


def stored_row(recorded: Recorded) -> StoredRow:
    """The row a store without rows (the in-memory one) would hold for ``recorded``."""
    r = recorded
    return (
        r.seq,
        r.stream,
        r.version,
        r.tag,
        r.schema_version,
        r.recorded_at_ms,
        encode_event(r.event),
    )


def decode_rows(rows: Iterable[Any]) -> list[Recorded]:
    """Stored rows (``StoredRow``s, or SQLite's rows of the same columns) to Recorded:
    the hot loop of every replay.

    Measured per ~370-byte event on the build machine: ~1.3 µs for SQLite to hand
    over the row, ~0.8 µs for msgspec to decode the payload, ~0.3 µs for the rest of
    this loop. ``decode_event`` upcasts older rows and names a row it cannot read.
    """
    out: list[Recorded] = []
    append = out.append
    shape_of = CURRENT_SHAPE.get
    decode = decode_current_payload
    for seq, stream, version, tag, schema_version, recorded_at_ms, payload in rows:
        # Inlined fast path (a function call per row is a tenth of a replay): a row at
        # this arenad's schema version whose payload is of its tag's class.
        shape = shape_of(tag)
        try:
            if (
                shape is None
                or shape[0] != schema_version
                or type(event := decode(payload)) is not shape[1]
            ):
                event = decode_event(payload, tag, schema_version)
        except (UnknownEventError, msgspec.DecodeError) as exc:
            raise StoreError(
                f"event #{seq} ({tag!r} v{schema_version}) on {stream!r} cannot be read: {exc}"
            ) from exc
        append(Recorded(seq, stream, version, tag, schema_version, recorded_at_ms, event))
    return out
