"""The data contract: tags, round trips, the upcast chain and the golden v1 rows."""

from __future__ import annotations

import json
from pathlib import Path

import msgspec
import pytest

import events
from events import capture, cell, codec, control, ingest
from events.base import Event
from events.codec import (
    CURRENT_VERSION,
    EVENT_TYPES,
    UnknownEventError,
    decode_event,
    encode_event,
    event_tag,
    event_version,
)
from tests.events.samples import SAMPLE_TYPES, sample

GOLDEN_V1 = Path(__file__).with_name("golden_v1.jsonl")


def _all_event_subclasses(base: type[Event]) -> set[type[Event]]:
    found: set[type[Event]] = set()
    for sub in base.__subclasses__():
        found.add(sub)
        found |= _all_event_subclasses(sub)
    return found


def test_every_event_class_is_registered_and_sampled() -> None:
    # Import every module that defines events, then compare with the registry:
    # an event class missing from EVENT_TYPES could be appended but never decoded.
    assert {capture, cell, control, ingest}
    defined = {t for t in _all_event_subclasses(Event) if t.__module__.startswith("events.")}
    assert defined == set(EVENT_TYPES)
    assert set(SAMPLE_TYPES) == set(EVENT_TYPES)
    assert len(EVENT_TYPES) == len(set(EVENT_TYPES))


def test_tags_are_explicit_stable_strings_and_unique() -> None:
    tags = [t.__struct_config__.tag for t in EVENT_TYPES]
    for kind, tag in zip(EVENT_TYPES, tags, strict=True):
        assert isinstance(tag, str), kind
        # The default tag is the class name: renaming the class would orphan rows.
        assert tag != kind.__name__, kind
        assert tag == tag.lower() and " " not in tag, tag
        assert kind.__struct_config__.tag_field == "type"
        assert kind.__struct_config__.frozen, kind
    assert len(tags) == len(set(tags)), "two event types share a tag"


@pytest.mark.parametrize("kind", EVENT_TYPES, ids=lambda k: str(k.__struct_config__.tag))
def test_every_event_type_round_trips(kind: type[Event]) -> None:
    event = sample(kind)
    tag = event_tag(event)
    payload = encode_event(event)
    raw = json.loads(payload)
    # The payload is self-describing: its tag and version travel inside it.
    assert raw["type"] == tag
    assert raw["v"] == event_version(event) == CURRENT_VERSION[tag] == kind.VERSION
    decoded = decode_event(payload, tag, event_version(event))
    assert type(decoded) is kind
    assert decoded == event
    assert encode_event(decoded) == payload
    # str payloads (a TEXT column) decode the same way.
    assert decode_event(payload.decode(), tag, event_version(event)) == event


def test_unknown_tag_is_a_clear_error() -> None:
    with pytest.raises(UnknownEventError, match=r"unknown event tag 'cell\.exploded'"):
        decode_event(b'{"type":"cell.exploded","v":1}', "cell.exploded", 1)


def test_newer_schema_version_is_a_clear_error() -> None:
    payload = encode_event(sample(cell.RunCompleted))
    with pytest.raises(
        UnknownEventError, match=r"schema version 7, newer than this arenad.*upgrade"
    ):
        decode_event(payload, "run.completed", 7)


def test_missing_upcaster_is_a_clear_error() -> None:
    payload = encode_event(sample(cell.RunCompleted))
    with pytest.raises(UnknownEventError, match=r"no upcaster from version 0 to 1"):
        decode_event(payload, "run.completed", 0)


def test_a_payload_of_another_type_under_a_tag_is_refused() -> None:
    payload = encode_event(sample(cell.RunCompleted))
    with pytest.raises(
        UnknownEventError, match=r"tagged 'run\.timed_out' holds a 'run\.completed'"
    ):
        decode_event(payload, "run.timed_out", 1)


def test_a_payload_that_does_not_match_its_type_is_a_validation_error() -> None:
    with pytest.raises(msgspec.ValidationError, match=r"\$\.rc"):
        decode_event(
            b'{"type":"run.completed","v":1,"attempt":1,"rc":"zero","wall_s":1.0}',
            "run.completed",
            1,
        )


def test_unknown_fields_in_stored_payloads_are_tolerated() -> None:
    # forbid_unknown_fields is never set on stored events: a row written by a newer
    # arenad that only added a defaulted field still decodes.
    decoded = decode_event(
        b'{"type":"run.completed","v":1,"attempt":1,"rc":0,"wall_s":1.0,"later":"x"}',
        "run.completed",
        1,
    )
    assert decoded == cell.RunCompleted(attempt=1, rc=0, wall_s=1.0)


def test_cell_failed_v1_upcasts_infra_to_classification() -> None:
    v1 = b'{"type":"cell.failed","v":1,"attempt":1,"stage":"run","error":"boom","infra":true}'
    decoded = decode_event(v1, "cell.failed", 1)
    assert decoded == cell.CellFailed(
        attempt=1, stage="run", error="boom", classification="infrastructure"
    )
    assert decoded.v == 2
    agent = decode_event(v1.replace(b"true", b"false"), "cell.failed", 1)
    assert isinstance(agent, cell.CellFailed) and agent.classification == "agent"


def test_upcasters_form_a_complete_chain() -> None:
    for tag, current in CURRENT_VERSION.items():
        for version in range(1, current):
            assert (tag, version) in codec.UPCASTERS, f"{tag} v{version} has no upcaster"
    for tag, version in codec.UPCASTERS:
        assert version < CURRENT_VERSION[tag]


def _golden_rows() -> list[tuple[str, int, str]]:
    rows = []
    for line in GOLDEN_V1.read_text().splitlines():
        row = json.loads(line)
        rows.append((row["tag"], row["schema_version"], row["payload"]))
    return rows


def test_golden_v1_fixture_covers_every_tag() -> None:
    """Every tag known today has a frozen v1 row. When a new event type is added, add
    its first row to golden_v1.jsonl; never edit or remove an existing row."""
    rows = _golden_rows()
    assert {tag for tag, _, _ in rows} == set(CURRENT_VERSION)
    assert all(version == 1 for _, version, _ in rows)
    assert any('"infra":true' in payload for tag, _, payload in rows if tag == "cell.failed")


@pytest.mark.parametrize(("tag", "schema_version", "payload"), _golden_rows())
def test_golden_v1_rows_decode_forever(tag: str, schema_version: int, payload: str) -> None:
    event = decode_event(payload.encode(), tag, schema_version)
    assert event_tag(event) == tag
    assert event.v == CURRENT_VERSION[tag]
    # What it decodes to is a current event that round-trips on its own.
    assert decode_event(encode_event(event), tag, CURRENT_VERSION[tag]) == event


def test_golden_cell_failed_rows_keep_their_meaning() -> None:
    failed = [decode_event(p.encode(), t, v) for t, v, p in _golden_rows() if t == "cell.failed"]
    assert [(f.attempt, f.classification) for f in failed if isinstance(f, cell.CellFailed)] == [
        (1, "infrastructure"),
        (2, "agent"),
    ]


def test_an_old_recovery_of_a_forged_store_decodes_as_unknown_with_its_evidence() -> None:
    # An older arenad recorded a forged store's cost as is (1e300) and a stream whose
    # token parts summed to inf (JSON null under a float): the row decodes, its usage is
    # unknown, and the recorded value is kept as evidence (the folds refuse the 1e300:
    # tests/recovery/test_bounds.py).
    [old] = [
        decode_event(p.encode(), t, v)
        for t, v, p in _golden_rows()
        if t == "cell.recovered" and '"oc_cost":null' in p
    ]
    assert isinstance(old, cell.CellRecovered)
    assert old.usage is None and old.spend.cost_usd == 1e300
    assert [(r.source, r.field, r.raw) for r in old.rejected] == [("stream", "cost", "null")]


def test_import_events_is_this_repo() -> None:
    # The PyPI distribution named `events` must never shadow the data contract.
    repo = Path(__file__).resolve().parents[2]
    assert Path(events.__file__).resolve() == repo / "events" / "__init__.py"
    assert events.EVENT_TYPES is EVENT_TYPES
