"""One encoder, one decoder, and the upcast chain.

Stored rows are never rewritten. When an event's shape changes, its class's
``VERSION`` goes up and an upcaster from the previous version is registered in
``UPCASTERS``; a row written at version *n* is decoded by applying the upcasters
n→n+1→…→current to its raw dict first. Adding a field with a default needs no
upcaster; renaming or retyping one does. Tags are never renamed.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Union

import msgspec

from events import capture, cell, control, ingest
from events.base import Event

EVENT_TYPES: tuple[type[Event], ...] = (
    cell.CellSubmitted,
    cell.CellMaterialized,
    cell.RunStarted,
    cell.RunAdopted,
    cell.RunCompleted,
    cell.RunTimedOut,
    cell.RunAborted,
    cell.CellVerified,
    cell.CellReverified,
    cell.CellRecovered,
    cell.CellFailed,
    cell.CellRetried,
    cell.ProvenanceRecorded,
    cell.SupervisorOutcome,
    cell.AbortRequested,
    cell.CellPaused,
    cell.CellResumed,
    cell.HangDetected,
    cell.RunOutputCapped,
    cell.JudgeVerdictRecorded,
    cell.PatchCaptured,
    cell.VerifyLogCaptured,
    ingest.LineIngested,
    ingest.LineMalformed,
    ingest.LineOversized,
    ingest.FileTruncated,
    ingest.FileSnapshotted,
    ingest.FileRefused,
    ingest.IngestionClosed,
    ingest.InotifyEventsLost,
    ingest.InotifyWatchFailed,
    capture.AgentSessionCaptured,
    capture.AgentStoreUnavailable,
    capture.WorkerCwdUnmatched,
    capture.ProposerShotCaptured,
    capture.ClaudeTranscriptCaptured,
    control.CampaignSubmitted,
    control.BudgetSet,
    control.BudgetReached,
    control.BreakerTripped,
    control.DaemonStarted,
    control.DaemonStopped,
    control.DiskFull,
    control.MaxParallelChanged,
)

AnyEvent = Union[EVENT_TYPES]  # type: ignore[valid-type]  # noqa: UP007

_TAGS: dict[type[Event], str] = {t: str(t.__struct_config__.tag) for t in EVENT_TYPES}
_BY_TAG: dict[str, type[Event]] = {tag: t for t, tag in _TAGS.items()}
CURRENT_VERSION: dict[str, int] = {tag: t.VERSION for tag, t in _BY_TAG.items()}
# tag -> (schema version, class) that this arenad writes: a replay's fast path.
CURRENT_SHAPE: dict[str, tuple[int, type[Event]]] = {
    tag: (t.VERSION, t) for tag, t in _BY_TAG.items()
}

Upcaster = Callable[[dict[str, Any]], dict[str, Any]]


def _cell_failed_v1_to_v2(raw: dict[str, Any]) -> dict[str, Any]:
    # v1 carried a boolean ``infra``; v2 names the classification, which also
    # admits "operator" (an abort before the run started).
    out = {k: v for k, v in raw.items() if k != "infra"}
    out["classification"] = "infrastructure" if raw.get("infra") else "agent"
    return out


def _cell_recovered_v1_to_v2(raw: dict[str, Any]) -> dict[str, Any]:
    # v2 adds ``spend_gap`` and ``rejected`` (defaults). A v1 row may hold what no v1
    # reader could decode: an older arenad summed a stream's token parts to ±inf, which
    # JSON records as ``"oc_cost": null`` under a float. Its usage is unknown (None), and
    # what was recorded is kept as evidence, never read as a number.
    usage = raw.get("usage")
    if isinstance(usage, dict) and usage.get("oc_cost") is None:
        out = dict(raw, usage=None)
        out["rejected"] = [
            *(raw.get("rejected") or []),
            {
                "source": "stream",
                "where": "all steps",
                "field": "cost",
                "raw": "null",
                "reason": "not a finite number (recorded as null by an older arenad)",
            },
        ]
        return out
    return raw


# (tag, from_version) -> upcaster to from_version + 1.
UPCASTERS: dict[tuple[str, int], Upcaster] = {
    ("cell.failed", 1): _cell_failed_v1_to_v2,
    ("cell.recovered", 1): _cell_recovered_v1_to_v2,
}

_encoder = msgspec.json.Encoder()
_decoder: msgspec.json.Decoder[Any] = msgspec.json.Decoder(AnyEvent)
_raw_decoder: msgspec.json.Decoder[dict[str, Any]] = msgspec.json.Decoder(dict[str, Any])

# Decode a payload by its own ``type`` alone: only for a row whose envelope tag and
# schema version match ``CURRENT_SHAPE`` (check the result's class against it). The
# bound method itself, not a wrapper: a replay calls it once per event.
decode_current_payload: Callable[[bytes | str], Event] = _decoder.decode


class UnknownEventError(ValueError):
    """A row this version of arenad cannot read: an unknown tag, a schema version newer
    than this arenad (or with no upcast path), or a payload of another event type."""


def event_tag(event: Event) -> str:
    return _TAGS[type(event)]


def event_tag_of_type(kind: type[Event]) -> str:
    try:
        return _TAGS[kind]
    except KeyError:
        raise UnknownEventError(
            f"{kind.__name__} is not an event type of events.codec.EVENT_TYPES"
        ) from None


def event_version(event: Event) -> int:
    return type(event).VERSION


def event_type(tag: str) -> type[Event]:
    """The event class of a tag (UnknownEventError if this arenad does not know it)."""
    try:
        return _BY_TAG[tag]
    except KeyError:
        raise UnknownEventError(f"unknown event tag {tag!r}") from None


def encode_event(event: Event) -> bytes:
    return _encoder.encode(event)


def decode_event(payload: bytes | str, tag: str, schema_version: int) -> Event:
    """Decode a stored payload, upcasting it first when it is older than current.

    Raises UnknownEventError for a row this arenad cannot read, msgspec.ValidationError
    (a ValueError) for a payload that does not match its type.
    """
    current = CURRENT_VERSION.get(tag)
    if current is None:
        raise UnknownEventError(f"unknown event tag {tag!r}")
    if schema_version == current:
        event: Event = _decoder.decode(payload)
    elif schema_version > current:
        raise UnknownEventError(
            f"event {tag!r} is at schema version {schema_version}, newer than this arenad"
            f" ({current}); upgrade arenad to read this log"
        )
    else:
        raw = _raw_decoder.decode(payload)
        for version in range(schema_version, current):
            upcaster = UPCASTERS.get((tag, version))
            if upcaster is None:
                raise UnknownEventError(
                    f"event {tag!r} at schema version {schema_version} has no upcaster"
                    f" from version {version} to {version + 1}"
                )
            raw = upcaster(raw)
        raw["v"] = current
        event = msgspec.convert(raw, _BY_TAG[tag])
    if type(event) is not _BY_TAG[tag]:
        # The envelope's tag is what indexes and folds trust; a payload of another
        # type under it is a damaged row, never something to guess about.
        raise UnknownEventError(f"a row tagged {tag!r} holds a {_TAGS[type(event)]!r} payload")
    return event
