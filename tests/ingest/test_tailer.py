from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from arenad.ingest.offsets import fold_positions
from arenad.ingest.tailer import FileTailer
from events.base import Event
from events.codec import encode_event
from events.ingest import (
    FileSnapshotted,
    FileTruncated,
    LineIngested,
    LineMalformed,
    LineOversized,
)
from tests.ingest._util import append, rebuild


def _poll_all(t: FileTailer, **kw: int) -> list[Event]:
    out: list[Event] = []
    while True:
        events, _ = t.poll(**kw)
        if not events:
            return out
        out.extend(events)


def _lines(n: int, start: int = 0) -> bytes:
    return b"".join(b'{"kind":"k","i":%d}\n' % i for i in range(start, start + n))


def test_lines_equal_the_file_bytes(tmp_path: Path) -> None:
    f = tmp_path / "j.jsonl"
    content = _lines(50) + b"not json\n\n" + b'{"kind":"\xff"}\n' + b"[1]\n"
    f.write_bytes(content)
    t = FileTailer("s", "j.jsonl", f)
    events = _poll_all(t)
    assert rebuild(events, "j.jsonl") == content
    kinds = [type(e) for e in events[-4:]]
    assert kinds == [LineMalformed] * 4
    assert t.pending.offset == len(content) and t.committed.offset == 0
    t.commit()
    assert t.committed == fold_positions(events).get("s", "j.jsonl")


def test_missing_file_then_appears(tmp_path: Path) -> None:
    f = tmp_path / "late.jsonl"
    t = FileTailer("s", "late.jsonl", f)
    assert t.poll() == ([], 0)
    f.write_bytes(b'{"kind":"a"}\n')
    (e,), n = t.poll()
    assert isinstance(e, LineIngested) and e.kind == "a" and n == 12


def test_half_line_waits_for_its_newline(tmp_path: Path) -> None:
    f = tmp_path / "j.jsonl"
    f.write_bytes(b'{"kind":"a"}\n{"kind":')
    t = FileTailer("s", "j.jsonl", f)
    (first,), _ = t.poll()
    assert isinstance(first, LineIngested) and first.kind == "a"
    assert t.poll() == ([], 0)
    append(f, b'"b"}\n')
    (second,), _ = t.poll()
    assert isinstance(second, LineIngested)
    assert second.raw == '{"kind":"b"}' and second.offset == 13 and second.kind == "b"


def test_budget_bounds_and_long_lines(tmp_path: Path) -> None:
    f = tmp_path / "j.jsonl"
    long = b'{"kind":"big","p":"' + b"x" * 5000 + b'"}\n'
    content = _lines(30) + long + _lines(5, 30)
    f.write_bytes(content)
    t = FileTailer("s", "j.jsonl", f, chunk_size=64)
    events: list[Event] = []
    while True:
        got, _ = t.poll(max_events=7, max_bytes=10_000)
        if not got:
            break
        assert len(got) <= 7
        events.extend(got)
    assert rebuild(events, "j.jsonl") == content
    big = [e for e in events if isinstance(e, LineIngested) and e.kind == "big"]
    assert len(big) == 1 and big[0].length == len(long) - 1


def test_rollback_rereads_the_same_bytes(tmp_path: Path) -> None:
    f = tmp_path / "j.jsonl"
    f.write_bytes(_lines(10))
    t = FileTailer("s", "j.jsonl", f)
    first, _ = t.poll(max_events=4)
    t.commit()
    second, _ = t.poll()
    t.rollback()
    assert t.pending == t.committed == fold_positions(first).get("s", "j.jsonl")
    again, _ = t.poll()
    assert again == second


def test_shrunk_then_reingest_from_zero(tmp_path: Path) -> None:
    f = tmp_path / "j.jsonl"
    f.write_bytes(_lines(5))
    t = FileTailer("s", "j.jsonl", f)
    first = _poll_all(t)
    t.commit()
    f.write_bytes(_lines(2, 100))  # truncates in place: same inode, shorter
    events = _poll_all(t)
    assert isinstance(events[0], FileTruncated)
    assert events[0].reason == "shrunk"
    assert events[0].previous_offset == len(_lines(5)) and events[0].new_size == len(_lines(2, 100))
    assert rebuild([*first, *events], "j.jsonl") == _lines(2, 100)


def test_cut_off_unread_tail_is_forgotten_silently(tmp_path: Path) -> None:
    f = tmp_path / "j.jsonl"
    f.write_bytes(_lines(2) + b'{"kind":"torn')
    t = FileTailer("s", "j.jsonl", f)
    first = _poll_all(t)
    os.truncate(f, len(_lines(2)))  # a writer's recovery cutting its torn tail
    append(f, _lines(1, 2))
    events = _poll_all(t)
    assert not any(isinstance(e, FileTruncated) for e in events)
    assert rebuild([*first, *events], "j.jsonl") == _lines(3)


def test_replaced_reads_old_to_end_then_new_from_zero(tmp_path: Path) -> None:
    f = tmp_path / "j.jsonl"
    f.write_bytes(_lines(3))
    t = FileTailer("s", "j.jsonl", f)
    first = _poll_all(t)
    t.commit()
    append(f, b'{"kind":"late"}\n{"kind":"cut"')  # written to the old inode before the swap
    tmp = tmp_path / "j.tmp"
    tmp.write_bytes(_lines(20, 50))
    os.replace(tmp, f)
    events = _poll_all(t)
    late, cut, truncated = events[:3]
    assert isinstance(late, LineIngested) and late.kind == "late" and not late.partial
    assert isinstance(cut, LineMalformed) and cut.partial and cut.raw == '{"kind":"cut"'
    assert isinstance(truncated, FileTruncated) and truncated.reason == "replaced"
    assert truncated.new_size == len(_lines(20, 50))
    assert rebuild([*first, *events], "j.jsonl") == _lines(20, 50)


def test_restart_resumes_without_duplicates(tmp_path: Path) -> None:
    f = tmp_path / "j.jsonl"
    f.write_bytes(_lines(10))
    t = FileTailer("s", "j.jsonl", f)
    first, _ = t.poll(max_events=6)
    t.close()
    append(f, _lines(5, 10))
    position = fold_positions(first).get("s", "j.jsonl")
    t2 = FileTailer("s", "j.jsonl", f, position=position)
    rest = _poll_all(t2)
    assert rebuild([*first, *rest], "j.jsonl") == _lines(15)


def test_restart_detects_a_replacement_made_while_down(tmp_path: Path) -> None:
    f = tmp_path / "j.jsonl"
    f.write_bytes(_lines(4))
    first = _poll_all(FileTailer("s", "j.jsonl", f))
    position = fold_positions(first).get("s", "j.jsonl")
    f.write_bytes(_lines(40, 1000))  # longer than the position: only the content tells
    events = _poll_all(FileTailer("s", "j.jsonl", f, position=position))
    assert isinstance(events[0], FileTruncated) and events[0].reason == "replaced"
    assert rebuild([*first, *events], "j.jsonl") == _lines(40, 1000)


def test_restart_detects_a_shrink_made_while_down(tmp_path: Path) -> None:
    f = tmp_path / "j.jsonl"
    f.write_bytes(_lines(4))
    first = _poll_all(FileTailer("s", "j.jsonl", f))
    f.write_bytes(b"{}\n")
    events = _poll_all(
        FileTailer("s", "j.jsonl", f, position=fold_positions(first).get("s", "j.jsonl"))
    )
    assert isinstance(events[0], FileTruncated) and events[0].reason == "shrunk"
    assert rebuild([*first, *events], "j.jsonl") == b"{}\n"


def test_drain_flags_the_trailing_partial(tmp_path: Path) -> None:
    f = tmp_path / "j.jsonl"
    f.write_bytes(_lines(2) + b'{"kind":"end"}')
    t = FileTailer("s", "j.jsonl", f)
    events, _ = t.drain()
    assert len(events) == 3
    tail = events[-1]
    assert isinstance(tail, LineIngested) and tail.partial and tail.kind == "end"
    assert t.pending.offset == f.stat().st_size
    assert rebuild(events, "j.jsonl") == f.read_bytes()


def _state(status: str) -> bytes:
    return json.dumps({"id": "r", "status": status}).encode()


def test_snapshot_on_change_only(tmp_path: Path) -> None:
    f = tmp_path / "state.json"
    t = FileTailer("s", "state.json", f, "snapshot")
    assert t.poll() == ([], 0)
    f.write_bytes(_state("running"))
    (snap,), _ = t.poll()
    assert isinstance(snap, FileSnapshotted)
    assert snap.content == _state("running").decode()
    assert snap.sha256 == hashlib.sha256(_state("running")).hexdigest()
    assert snap.size == len(_state("running"))
    assert t.poll() == ([], 0)  # unchanged
    t.commit()
    f.write_bytes(_state("completed")[:10])  # torn write: not recorded
    assert t.poll() == ([], 0)
    f.write_bytes(_state("completed"))
    (done,), _ = t.poll()
    assert isinstance(done, FileSnapshotted) and '"completed"' in done.content
    # restart from the fold: the same content is not snapshotted again
    again = FileTailer(
        "s", "state.json", f, "snapshot", fold_positions([snap, done]).get("s", "state.json")
    )
    assert again.poll() == ([], 0)
    assert again.drain() == ([], 0)


def test_torn_snapshot_at_drain_is_recorded_verbatim(tmp_path: Path) -> None:
    f = tmp_path / "state.json"
    f.write_bytes(b'{"id": "r", "sta')
    t = FileTailer("s", "state.json", f, "snapshot")
    assert t.poll() == ([], 0)
    (e,), _ = t.drain()
    assert isinstance(e, LineMalformed)
    assert e.partial and e.offset == 0 and e.length == 16 and e.raw == '{"id": "r", "sta'
    assert e.error.startswith("torn snapshot")
    assert t.drain() == ([], 0)


def test_an_oversized_line_is_summarised_and_the_file_keeps_it(tmp_path: Path) -> None:
    # Issue 14, finding 5: one 8 MiB line of NULs (the finding's was 50 MB), between two
    # ordinary lines, read in 1 MiB chunks under the default 1 MiB limit.
    f = tmp_path / "oc.jsonl"
    big = b"\0" * (8 << 20)
    content = _lines(1) + big + b"\n" + _lines(1, start=1)
    f.write_bytes(content)
    t = FileTailer("stdout", "oc.jsonl", f)
    events = _poll_all(t)
    t.commit()
    first, oversized, last = events
    assert isinstance(first, LineIngested) and isinstance(last, LineIngested)
    assert isinstance(oversized, LineOversized)
    assert (oversized.offset, oversized.length) == (len(_lines(1)), len(big))
    assert oversized.sha256 == hashlib.sha256(big).hexdigest()
    assert len(encode_event(oversized)) < 8 << 10
    assert f.read_bytes() == content
    # A restart from the log's positions neither re-reads it nor takes the file as replaced.
    positions = fold_positions([first, oversized])
    again = FileTailer("stdout", "oc.jsonl", f, position=positions.get("stdout", "oc.jsonl"))
    assert _poll_all(again) == [last]


def test_a_file_replaced_after_an_oversized_line_is_seen_replaced(tmp_path: Path) -> None:
    f = tmp_path / "oc.jsonl"
    f.write_bytes(b"a" * 300 + b"\n")
    t = FileTailer("stdout", "oc.jsonl", f, max_line=100)
    (oversized,) = _poll_all(t)
    assert isinstance(oversized, LineOversized)
    f.write_bytes(b"b" * 300 + b"\n")
    position = fold_positions([oversized]).get("stdout", "oc.jsonl")
    again = FileTailer("stdout", "oc.jsonl", f, position=position, max_line=100)
    truncated, *_ = _poll_all(again)
    assert isinstance(truncated, FileTruncated) and truncated.reason == "replaced"
