"""A capture of the agent's store is bounded (issue 27, finding 2): a huge part keeps its
size and sha256 and stays a readable tool part, a huge session keeps what fits and counts
the rest, and a store with too many sessions is a labeled gap. Real SQLite stores, written
as opencode writes them (tests/recovery/opencode_fixture.py)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import msgspec

from arenad.recovery.capture_bounds import (
    MAX_SESSIONS,
    PART_KEEP_BYTES,
    SESSION_KEEP_BYTES,
    cut_data,
    cut_row,
)
from arenad.recovery.opencode_spend import session_spend
from arenad.recovery.opencode_store import StoreUnavailable, capture_session_tree
from arenad.recovery.opencode_transcript import capture_chat_messages
from events.codec import encode_event
from tests.recovery.opencode_fixture import StoreWriter, assistant_data, step_finish, user_data


def _tool(call: str, output: str) -> dict[str, object]:
    return {
        "type": "tool",
        "callID": call,
        "tool": "bash",
        "state": {"status": "completed", "input": {"command": "cat big"}, "output": output},
    }


def test_a_huge_tool_output_is_cut_inside_its_json() -> None:
    output = "x" * (3 * 1024 * 1024)
    data = json.dumps(_tool("call_1", output))
    cut = cut_data(data)
    assert cut is not None
    assert len(cut.text.encode()) <= PART_KEEP_BYTES
    assert (
        cut.size == len(data.encode()) and cut.sha256 == hashlib.sha256(data.encode()).hexdigest()
    )
    kept = json.loads(cut.text)
    assert kept["tool"] == "bash" and kept["callID"] == "call_1"
    assert kept["state"]["output"].endswith("more characters cut by arenad]")
    assert cut_data(json.dumps(_tool("c", "small"))) is None


def test_data_that_is_not_json_or_all_shape_keeps_its_head() -> None:
    text = "é" * PART_KEEP_BYTES  # two bytes each: past the bound, and not JSON
    cut = cut_data(text)
    assert (
        cut is not None and text.startswith(cut.text) and len(cut.text.encode()) <= PART_KEEP_BYTES
    )
    shape = json.dumps([[1]] * PART_KEEP_BYTES)  # nothing to shorten
    cut = cut_data(shape)
    assert cut is not None and len(cut.text) <= PART_KEEP_BYTES


def test_row_values_are_cut_with_a_note() -> None:
    row, notes = cut_row({"id": "s", "title": "t" * 10_000, "cost": 1.5}, 100)
    assert row == {"id": "s", "title": "t" * 100, "cost": 1.5}
    digest = hashlib.sha256(b"t" * 10_000).hexdigest()
    assert notes == [f"row column title: 10000 bytes, sha256 {digest}, kept 100"]


def test_a_huge_session_is_one_bounded_event(tmp_path: Path) -> None:
    db = tmp_path / "opencode.db"
    store = StoreWriter(db)
    store.session("ses_big", "/w", usage=(0.5, 10, 2, 0, 0, 0))
    store.conn.execute("UPDATE session SET title = ? WHERE id = 'ses_big'", ("T" * 100_000,))
    store.message("ses_big", "msg_0", 1, user_data())
    store.part("ses_big", "msg_0", "prt_0", {"type": "text", "text": "read the big file"})
    # 40 steps, each printing 1 MB: 40 MB of tool output.
    for i in range(1, 41):
        mid = f"msg_{i:03d}"
        store.message("ses_big", mid, 1 + i, assistant_data())
        store.part("ses_big", mid, f"prt_{i:03d}a", {"type": "step-start"})
        store.part("ses_big", mid, f"prt_{i:03d}b", _tool(f"call_{i}", f"{i}" * 1_000_000))
        store.part("ses_big", mid, f"prt_{i:03d}c", step_finish(0.01, 1, 1, 0, 0, 0))
    store.close()
    [capture] = capture_session_tree(db, None, 1)  # type: ignore[misc]
    size = len(encode_event(capture))
    assert size < 2 * SESSION_KEEP_BYTES + 200_000, size
    # Every kept tool part stayed a tool part: the transcript reads its call and cut output.
    cut = [p for p in capture.parts if p.size is not None]
    assert cut and all(len(p.data.encode()) <= PART_KEEP_BYTES for p in cut)
    assert all(p.size is not None and p.size > 1_000_000 for p in cut)
    tools = [m for m in capture_chat_messages(capture) if m["role"] == "tool"]
    assert tools and tools[0]["content"].startswith("1" * 100)
    # 40 x 64 KiB fits in a session's 16 MiB: nothing was left out here, and the row's
    # usage columns are still the session's spend.
    assert (capture.omitted_messages, capture.omitted_parts) == (0, 0)
    assert session_spend(capture).usd == 0.5
    assert capture.row["title"] == "T" * 4096
    assert capture.cut == [
        f"row column title: 100000 bytes, sha256 {hashlib.sha256(b'T' * 100_000).hexdigest()},"
        " kept 4096"
    ]


def test_a_session_past_its_budget_counts_what_it_left_out(tmp_path: Path) -> None:
    db = tmp_path / "opencode.db"
    store = StoreWriter(db, old=True)  # no usage columns: spend from step-finish parts
    store.session("ses_many", "/w")
    store.message("ses_many", "msg_0", 1, assistant_data())
    # 400 parts of 60 KB: 24 MB, past a session's 16 MiB.
    for i in range(400):
        store.part("ses_many", "msg_0", f"prt_{i:04d}", {"type": "text", "text": "y" * 60_000})
    store.part("ses_many", "msg_0", "prt_9999", step_finish(0.25, 1, 1, 0, 0, 0))
    store.close()
    [capture] = capture_session_tree(db, None, 1)  # type: ignore[misc]
    kept = sum(len(p.data) for p in capture.parts)
    assert kept <= SESSION_KEEP_BYTES
    assert capture.omitted_parts == 401 - len(capture.parts) > 0
    assert capture.omitted_bytes >= capture.omitted_parts * 100
    assert len(encode_event(capture)) < 2 * SESSION_KEEP_BYTES + 100_000
    # Its step-finish part was among those left out: its spend is unknown, not a sum of some.
    spend = session_spend(capture)
    assert "usd" in spend.unknown and spend.rejected[-1].field == "step-finish parts"


def test_a_store_with_too_many_sessions_is_a_gap(tmp_path: Path) -> None:
    db = tmp_path / "opencode.db"
    store = StoreWriter(db)
    store.conn.execute("BEGIN")
    for i in range(MAX_SESSIONS + 1):
        store.session(f"ses_{i:05d}", "/w", time_created=i)
    store.conn.execute("COMMIT")
    store.close()
    found = capture_session_tree(db, None, 1)
    assert isinstance(found, StoreUnavailable)
    assert f"holds {MAX_SESSIONS + 1} sessions" in found.error
    assert msgspec.json.decode(encode_event(found.event(1)))["error"] == found.error
