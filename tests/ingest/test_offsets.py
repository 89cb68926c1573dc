from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from arenad.ingest.lines import classify_line
from arenad.ingest.offsets import (
    START,
    IngestPosition,
    Positions,
    advance,
    closed_files,
    file_key,
    fold_positions,
    split_file_key,
)
from events.base import Event, Recorded
from events.cell import CellPaused
from events.codec import decode_event, encode_event, event_tag, event_version
from events.ingest import (
    FileSnapshotted,
    FileTruncated,
    IngestionClosed,
    LineIngested,
    LineMalformed,
)


def _line(offset: int, length: int, *, path: str = "j", partial: bool = False) -> LineIngested:
    return LineIngested(
        source="s", path=path, offset=offset, length=length, raw="x" * length, partial=partial
    )


def test_lines_advance_past_the_newline_partial_without() -> None:
    a, b = _line(0, 3), _line(4, 5, partial=True)
    p = fold_positions([a, b])
    assert p.get("s", "j") == IngestPosition(offset=9, last_line=b)
    assert fold_positions([a]).get("s", "j").offset == 4
    assert p.get("s", "other") == START


def test_malformed_advances_too() -> None:
    m = LineMalformed(source="s", path="j", offset=0, length=0, raw="", error="empty line")
    assert fold_positions([m]).get("s", "j").offset == 1


def test_truncation_resets_snapshot_sets_sha_closed_marks() -> None:
    events: list[Event] = [
        _line(0, 3),
        FileTruncated(source="s", path="j", previous_offset=4, new_size=0, reason="shrunk"),
        FileSnapshotted(source="s", path="state.json", content="{}", sha256="ab", size=2),
    ]
    p = fold_positions(events)
    assert p.get("s", "j") == START
    assert p.get("s", "state.json") == IngestPosition(offset=2, sha256="ab")
    assert not p.closed
    assert fold_positions([IngestionClosed(files={})], p).closed


def test_keys_are_per_source() -> None:
    a = _line(0, 3)
    b = LineIngested(source="brain", path="j", offset=0, length=1, raw="x")
    p = fold_positions([a, b])
    assert p.get("s", "j").offset == 4 and p.get("brain", "j").offset == 2


def test_envelopes_and_other_events() -> None:
    rec = Recorded(
        seq=1,
        stream="ingest/c/1",
        version=1,
        tag="ingest.line",
        schema_version=1,
        recorded_at_ms=0,
        event=_line(0, 2),
    )
    other = CellPaused()  # any non-ingest event is ignored
    assert fold_positions([rec, other]).get("s", "j").offset == 3


def test_file_keys() -> None:
    assert file_key("supervisor", "workers/a:b.ndjson") == "supervisor:workers/a:b.ndjson"
    assert split_file_key("supervisor:workers/a:b.ndjson") == ("supervisor", "workers/a:b.ndjson")
    p = Positions(files={("s", "j"): IngestPosition(offset=4)})
    assert closed_files(p) == {"s:j": 4}


_keys = st.sampled_from([("s", "a"), ("s", "b"), ("brain", "a")])


@st.composite
def _event(draw: st.DrawFn) -> Event:
    source, path = draw(_keys)
    n = st.integers(min_value=0, max_value=1000)
    kind = draw(st.sampled_from(["line", "malformed", "truncated", "snapshot", "closed"]))
    if kind == "line":
        return LineIngested(
            source=source,
            path=path,
            offset=draw(n),
            length=draw(n),
            raw="r",
            partial=draw(st.booleans()),
        )
    if kind == "malformed":
        return LineMalformed(
            source=source,
            path=path,
            offset=draw(n),
            length=draw(n),
            raw="r",
            error="e",
            partial=draw(st.booleans()),
        )
    if kind == "truncated":
        return FileTruncated(
            source=source,
            path=path,
            previous_offset=draw(n),
            new_size=draw(n),
            reason=draw(st.sampled_from(["shrunk", "replaced"])),
        )
    if kind == "snapshot":
        return FileSnapshotted(
            source=source, path=path, content="{}", sha256=draw(st.text(max_size=3)), size=draw(n)
        )
    return IngestionClosed(files={})


@given(events=st.lists(_event(), max_size=40), cuts=st.lists(st.integers(0, 40), max_size=5))
def test_fold_of_any_split_equals_fold_of_the_whole(events: list[Event], cuts: list[int]) -> None:
    whole = fold_positions(events)
    points = sorted({min(c, len(events)) for c in cuts})
    positions: Positions | None = None
    prev = 0
    for point in [*points, len(events)]:
        positions = fold_positions(events[prev:point], positions)
        prev = point
    assert positions == whole


@given(events=st.lists(_event(), max_size=40))
def test_fold_is_advance_per_file(events: list[Event]) -> None:
    expected: dict[tuple[str, str], IngestPosition] = {}
    for e in events:
        if isinstance(e, LineIngested | LineMalformed | FileTruncated | FileSnapshotted):
            key = (e.source, e.path)
            expected[key] = advance(expected.get(key), e)
    assert fold_positions(events).files == expected


def test_fold_over_events_read_back_from_the_log_codec() -> None:
    events: list[Event] = [
        classify_line("s", "j", b'{"kind":"a"}', 0),
        classify_line("s", "j", b"\xff", 13),
        FileSnapshotted(source="s", path="state.json", content="{}", sha256="ab", size=2),
    ]
    stored = [decode_event(encode_event(e), event_tag(e), event_version(e)) for e in events]
    assert stored == events
    assert fold_positions(stored) == fold_positions(events)
