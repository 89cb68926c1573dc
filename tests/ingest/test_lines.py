from __future__ import annotations

import base64
import hashlib

from hypothesis import given
from hypothesis import strategies as st

from arenad.ingest.lines import (
    HEAD_BYTES,
    MAX_LINE_BYTES,
    LineEvent,
    LineSplitter,
    classify_line,
    decode_raw,
    line_bytes,
    parse_lines,
    split_lines,
)
from arenad.ingest.offsets import fold_positions, line_end
from events.codec import encode_event
from events.ingest import LineIngested, LineMalformed, LineOversized


def test_object_with_kind() -> None:
    e = classify_line("s", "j.jsonl", b'{"kind":"spawned","id":"r"}', 7, observed_at_ms=5)
    assert isinstance(e, LineIngested)
    assert (e.kind, e.offset, e.length, e.raw, e.encoding) == (
        "spawned",
        7,
        27,
        '{"kind":"spawned","id":"r"}',
        "utf-8",
    )
    assert e.observed_at_ms == 5 and not e.partial


def test_kind_falls_back_to_type_then_none() -> None:
    e = classify_line("s", "p", b'{"type":"step_start"}', 0)
    assert isinstance(e, LineIngested) and e.kind == "step_start"
    e = classify_line("s", "p", b'{"kind":5,"type":"text"}', 0)
    assert isinstance(e, LineIngested) and e.kind == "text"
    e = classify_line("s", "p", b'{"kind":null,"type":[1]}', 0)
    assert isinstance(e, LineIngested) and e.kind is None


def test_not_an_object_is_malformed() -> None:
    e = classify_line("s", "p", b"[1,2]", 0)
    assert isinstance(e, LineMalformed)
    assert e.raw == "[1,2]" and "object" in e.error


def test_invalid_json_is_malformed_with_raw() -> None:
    e = classify_line("s", "p", b'{"kind": "x",', 3)
    assert isinstance(e, LineMalformed)
    assert e.raw == '{"kind": "x",' and e.offset == 3 and e.length == 13
    assert e.error


def test_non_utf8_is_base64() -> None:
    raw = b'{"kind":"x","m":"\xff\xfe"}'
    e = classify_line("s", "p", raw, 0)
    assert isinstance(e, LineMalformed)
    assert e.encoding == "base64" and base64.b64decode(e.raw) == raw
    assert e.error.startswith("invalid UTF-8")
    assert decode_raw(e.raw, e.encoding) == raw and e.length == len(raw)


def test_empty_and_blank_lines_are_malformed_not_dropped() -> None:
    for raw in (b"", b"   ", b"\r", b"\t \r"):
        e = classify_line("s", "p", raw, 0)
        assert isinstance(e, LineMalformed)
        assert e.error == "empty line" and e.raw == raw.decode()


def test_crlf_keeps_the_cr_in_raw_and_length() -> None:
    e = classify_line("s", "p", b'{"kind":"a"}\r', 0)
    assert isinstance(e, LineIngested) and e.kind == "a"
    assert e.raw.endswith("\r") and e.length == 13 and line_end(e) == 14


def test_split_keeps_remainder() -> None:
    assert split_lines(b"a\nbb\ncc") == ([b"a", b"bb"], 5)
    assert split_lines(b"abc") == ([], 0)
    assert split_lines(b"\n\n") == ([b"", b""], 2)
    events, consumed = parse_lines("s", "p", b'{"kind":"a"}\nxx\n{"ki', 10)
    assert consumed == 16
    assert [(e.offset, e.length) for e in events] == [(10, 12), (23, 2)]
    assert isinstance(events[1], LineMalformed)


def test_splitter_across_feeds_and_limits() -> None:
    sp = LineSplitter("s", "p", 100)
    sp.feed(b'{"kind":"a"}\n{"ki')
    sp.feed(b'nd":"b"}\n{"kind":"c"}\n')
    assert sp.has_line()
    first, n = sp.take(max_events=1)
    assert [e.offset for e in first] == [100] and n == 12
    rest, n = sp.take(max_bytes=1)  # at least one line however small the budget
    assert [e.offset for e in rest] == [113] and n == 12
    last, _ = sp.take()
    assert [e.offset for e in last] == [126] and sp.offset == 139 and sp.buffered == 0


def test_drain_flags_partial() -> None:
    sp = LineSplitter("s", "p")
    sp.feed(b'{"kind":"a"}\n{"kind":"b"}')
    kept, _ = sp.drain(partial=False)
    assert len(kept) == 1 and sp.buffered == 12
    tail, n = sp.drain()
    assert len(tail) == 1 and n == 12
    (e,) = tail
    assert isinstance(e, LineIngested) and e.partial and e.kind == "b"
    assert line_end(e) == sp.offset == 25
    assert sp.drain() == ([], 0)


_content = st.lists(
    st.one_of(
        st.just(b'{"kind":"x","n":1}'),
        st.just(b"[1]"),
        st.just(b""),
        st.just(b"\xff\x00"),
        st.binary(max_size=12).filter(lambda b: b"\n" not in b),
    ),
    max_size=20,
).map(lambda parts: b"\n".join(parts))


@given(content=_content, cuts=st.lists(st.integers(min_value=0, max_value=400), max_size=8))
def test_any_feeding_reproduces_the_bytes(content: bytes, cuts: list[int]) -> None:
    """However the bytes arrive, the events cover them exactly, once, in order."""
    sp = LineSplitter("s", "p")
    events: list[LineIngested | LineMalformed] = []
    points = sorted({min(c, len(content)) for c in cuts})
    prev = 0
    for point in [*points, len(content)]:
        sp.feed(content[prev:point])
        prev = point
        got, _ = sp.take(max_events=3)
        events.extend(got)
        more, _ = sp.take()
        events.extend(more)
    complete = content.rfind(b"\n") + 1
    assert b"".join(line_bytes(e) for e in events) == content[:complete]
    tail, _ = sp.drain()
    events.extend(tail)
    assert b"".join(line_bytes(e) for e in events) == content
    offset = 0
    for e in events:
        assert e.offset == offset
        offset = line_end(e)
    assert fold_positions(events).get("s", "p").offset == len(content)
    assert all(e.partial for e in tail) and not any(e.partial for e in events[: -len(tail) or None])


# -- the line limit and compact storage (issue 14, finding 5) ------------------------------


def test_a_line_past_the_limit_is_recorded_by_length_sha256_and_first_bytes() -> None:
    line = b'{"kind":"big","data":"' + b"x" * 5000 + b'"}'
    e = classify_line("s", "p", line, 10, max_line=100, observed_at_ms=3)
    assert isinstance(e, LineOversized)
    assert (e.offset, e.length, e.limit_bytes, e.partial, e.observed_at_ms) == (
        10,
        len(line),
        100,
        False,
        3,
    )
    assert e.sha256 == hashlib.sha256(line).hexdigest()
    assert decode_raw(e.head, e.encoding) == line[:HEAD_BYTES] and e.encoding == "utf-8"
    assert line_end(e) == 10 + len(line) + 1
    assert fold_positions([e]).get("s", "p").offset == 10 + len(line) + 1


def test_the_first_bytes_of_an_oversized_line_do_not_cut_a_character_in_two() -> None:
    line = b"a" * (HEAD_BYTES - 1) + "é".encode() * 10
    e = classify_line("s", "p", line, 0, max_line=100)
    assert isinstance(e, LineOversized) and e.encoding == "utf-8"
    assert e.head == "a" * (HEAD_BYTES - 1)


def test_control_bytes_are_stored_compactly_not_six_bytes_each() -> None:
    # The finding: a line of NULs (valid UTF-8, not JSON) became an event six times its size.
    line = b"\0" * 100_000
    e = classify_line("s", "p", line, 0)
    assert isinstance(e, LineMalformed) and e.encoding == "base64"
    assert decode_raw(e.raw, e.encoding) == line
    assert len(encode_event(e)) < 1.4 * len(line)
    # Text without control characters stays text; tab and CR are not escaped that way.
    e = classify_line("s", "p", b"not json\t\r", 0)
    assert isinstance(e, LineMalformed) and (e.raw, e.encoding) == ("not json\t\r", "utf-8")


def test_a_fifty_megabyte_line_streams_through_in_bounded_memory() -> None:
    sp = LineSplitter("s", "p")
    chunk = b"\0" * (1 << 20)
    for _ in range(50):
        sp.feed(chunk)
        assert sp.take() == ([], 0)
        assert sp.held <= MAX_LINE_BYTES + len(chunk)
    sp.feed(b'\n{"kind":"after"}\n')
    (big, after), nbytes = sp.take()
    assert isinstance(big, LineOversized) and isinstance(after, LineIngested)
    assert big.length == 50 << 20 and big.encoding == "base64"
    assert big.sha256 == hashlib.sha256(chunk * 50).hexdigest()
    assert decode_raw(big.head, big.encoding) == b"\0" * HEAD_BYTES
    assert after.offset == (50 << 20) + 1 and nbytes == (50 << 20) + len(b'{"kind":"after"}')


def test_an_unterminated_oversized_line_drains_partial() -> None:
    sp = LineSplitter("s", "p", offset=7, max_line=8)
    sp.feed(b"0123456789abcdef")
    assert sp.take() == ([], 0)
    sp.feed(b"ghij")
    (e,), nbytes = sp.drain()
    assert isinstance(e, LineOversized) and e.partial
    assert (e.offset, e.length, nbytes, sp.offset) == (7, 20, 20, 27)
    assert e.sha256 == hashlib.sha256(b"0123456789abcdefghij").hexdigest()


def _covers(events: list[LineEvent], content: bytes, limit: int) -> int:
    """Check each event against the bytes it stands for; return the offset reached."""
    offset = 0
    for e in events:
        assert e.offset == offset
        end = offset + e.length
        if isinstance(e, LineOversized):
            assert e.length > limit
            assert e.sha256 == hashlib.sha256(content[offset:end]).hexdigest()
            assert content[offset:end].startswith(decode_raw(e.head, e.encoding))
        else:
            assert e.length <= limit
            assert decode_raw(e.raw, e.encoding) == content[offset:end]
        if not e.partial:
            assert content[end : end + 1] == b"\n"
        offset = line_end(e)
    return offset


_long_lines = st.lists(
    st.one_of(
        st.just(b'{"kind":"x","n":1}'),
        st.just(b"\0" * 40),
        st.binary(max_size=60).filter(lambda b: b"\n" not in b),
    ),
    max_size=12,
).map(lambda parts: b"\n".join(parts))


@given(content=_long_lines, cuts=st.lists(st.integers(min_value=0, max_value=400), max_size=8))
def test_any_feeding_with_a_small_limit_covers_the_bytes_once(
    content: bytes, cuts: list[int]
) -> None:
    limit = 16
    sp = LineSplitter("s", "p", max_line=limit)
    events: list[LineEvent] = []
    prev = 0
    for point in [*sorted({min(c, len(content)) for c in cuts}), len(content)]:
        sp.feed(content[prev:point])
        assert sp.held <= limit + (point - prev) + HEAD_BYTES
        prev = point
        got, _ = sp.take(max_events=3)
        events.extend(got)
        more, _ = sp.take()
        events.extend(more)
    tail, _ = sp.drain()
    events.extend(tail)
    assert _covers(events, content, limit) == len(content)
