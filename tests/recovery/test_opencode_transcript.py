from __future__ import annotations

import hashlib
import json
from typing import Any

import msgspec
import pytest

from arenad.chat import EMPTY_ENCODED
from arenad.js import js_stringify, js_stringify_bytes
from arenad.recovery.opencode_transcript import (
    MAX_NESTING,
    TRANSCRIPT_RULES,
    NestedTooDeeply,
    capture_chat_messages,
    ledger_transcript,
    opencode_chat_messages,
    opencode_session_info,
    session_transcript,
)
from events.capture import AgentSessionCaptured, MessageRow, PartRow, SessionTranscript
from tests.recovery.opencode_fixture import with_kept_fold


class Session:
    """Rows as the capture holds them: message/part data as JSON text."""

    def __init__(self) -> None:
        self.messages: list[MessageRow] = []
        self.parts: list[PartRow] = []
        self._t = 0

    def message(self, data: Any, *, mid: str | None = None, t: int | None = None) -> str:
        self._t += 1
        mid = mid or f"msg_{self._t:03d}"
        text = data if isinstance(data, str) else json.dumps(data)
        self.messages.append(
            MessageRow(id=mid, time_created=self._t if t is None else t, data=text)
        )
        return mid

    def parts_of(self, mid: str, *parts: Any) -> None:
        for i, part in enumerate(parts):
            text = part if isinstance(part, str) else json.dumps(part)
            self.parts.append(PartRow(id=f"prt_{mid}_{i:03d}", message_id=mid, data=text))

    def user(self, *parts: Any) -> str:
        mid = self.message({"role": "user", "agent": "build"})
        self.parts_of(mid, *parts)
        return mid

    def assistant(self, *parts: Any) -> str:
        mid = self.message({"role": "assistant", "modelID": "mock"})
        self.parts_of(mid, *parts)
        return mid

    def chat(self) -> list[dict[str, Any]]:
        check_the_kept_fold(self)
        return opencode_chat_messages(self.messages, self.parts)


def check_the_kept_fold(s: Session) -> None:
    """What a capture keeps of the session is what the projection would fold from its
    rows, byte for byte; the ledger is handed the kept bytes."""
    capture = _capture(s, {"id": "ses_1"})
    folded, gap = ledger_transcript(capture)  # no fold kept: the rows are folded
    with_kept = with_kept_fold(capture)
    kept = with_kept.transcript
    if kept is None:  # only a lone surrogate, which no msgspec decoder would read back
        with pytest.raises(UnicodeEncodeError):
            msgspec.json.encode(folded)
        return
    assert (kept.rules, bytes(kept.messages), kept.gap) == (
        TRANSCRIPT_RULES,
        js_stringify_bytes(folded),
        gap,
    )
    assert ledger_transcript(with_kept) == (kept.messages, gap)


def text(t: Any, **extra: Any) -> dict[str, Any]:
    return {"type": "text", "text": t, **extra}


def reasoning(t: Any) -> dict[str, Any]:
    return {"type": "reasoning", "text": t, "time": {"start": 1}}


def tool(call_id: Any, name: Any = "bash", state: Any = None) -> dict[str, Any]:
    part: dict[str, Any] = {"type": "tool", "callID": call_id, "tool": name}
    if state is not None:
        part["state"] = state
    return part


def done(inp: Any, out: Any) -> dict[str, Any]:
    return {"status": "completed", "input": inp, "output": out, "title": "t", "metadata": {}}


START = {"type": "step-start", "snapshot": "abc"}
FINISH = {"type": "step-finish", "reason": "stop", "cost": 0, "tokens": {"input": 1}}


def test_user_text_parts_joined_and_pushed_even_when_empty() -> None:
    s = Session()
    s.user(text("a"), {"type": "file", "mime": "text/plain"}, text(""), text("b", synthetic=True))
    s.user()
    s.user({"type": "agent", "name": "x"}, text(5))
    assert s.chat() == [
        {"role": "user", "content": "a\n\nb"},
        {"role": "user", "content": ""},
        {"role": "user", "content": ""},
    ]


def test_one_assistant_row_spanning_steps_is_split_at_step_start() -> None:
    s = Session()
    s.assistant(
        reasoning("plan"),  # before the first step-start: an implicit step
        START,
        text("Let me read it."),
        tool("call_1", "read", done({"filePath": "a.py"}, "x = 1")),
        tool("call_2", "bash", done({"command": "ls"}, "a.py")),
        FINISH,
        START,
        {"type": "snapshot", "snapshot": "s"},
        {"type": "patch", "hash": "h", "files": []},
        text("done"),
        FINISH,
    )
    assert s.chat() == [
        {"role": "assistant", "content": None, "reasoning_content": "plan"},
        {
            "role": "assistant",
            "content": "Let me read it.",
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "read", "arguments": '{"filePath":"a.py"}'},
                },
                {
                    "id": "call_2",
                    "type": "function",
                    "function": {"name": "bash", "arguments": '{"command":"ls"}'},
                },
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "name": "read", "content": "x = 1"},
        {"role": "tool", "tool_call_id": "call_2", "name": "bash", "content": "a.py"},
        {"role": "assistant", "content": "done"},
    ]


def test_one_row_per_step_reads_the_same_as_one_row_for_all_steps() -> None:
    step1 = [START, reasoning("think"), text("Let me read it."), tool("c1", "read", done({}, "o"))]
    step2 = [START, text("done"), FINISH]
    combined = Session()
    combined.user(text("go"))
    combined.assistant(*step1, FINISH, *step2)
    per_step = Session()  # opencode 1.18.33: one assistant message per model step
    per_step.user(text("go"))
    per_step.assistant(*step1, FINISH)
    per_step.assistant(*step2)
    assert combined.chat() == per_step.chat()
    assert js_stringify(combined.chat()) == js_stringify(per_step.chat())
    assert len(per_step.chat()) == 4


def test_key_order_is_exact_in_the_bytes() -> None:
    s = Session()
    s.assistant(START, tool("c1", "read", done({"b": 1, "a": 2}, "out")), reasoning("r"), text("t"))
    assert [js_stringify(m) for m in s.chat()] == [
        '{"role":"assistant","content":"t","reasoning_content":"r","tool_calls":[{"id":"c1",'
        '"type":"function","function":{"name":"read","arguments":"{\\"b\\":1,\\"a\\":2}"}}]}',
        '{"role":"tool","tool_call_id":"c1","name":"read","content":"out"}',
    ]


def test_text_and_reasoning_joining() -> None:
    s = Session()
    s.assistant(START, text(""), text("x"), reasoning(""), reasoning("r1"), reasoning("r2"))
    s.assistant(START, text(""), text(""))
    s.assistant(START, text(""))  # nothing: skipped
    s.assistant(START, reasoning(""), text(None), {"type": "file", "mime": "image/png"})
    assert s.chat() == [
        {"role": "assistant", "content": "\nx", "reasoning_content": "r1\nr2"},
        {"role": "assistant", "content": "\n"},
    ]


def test_tool_call_and_result_rules() -> None:
    s = Session()
    s.assistant(
        START,
        tool("c_none", None, {"status": "pending", "input": None}),
        {"type": "tool", "callID": "c_missing"},
        tool("c_obj", "x", {"status": "completed", "input": {"2": 0, "1": 1}, "output": {"a": 1}}),
        tool("c_num", "x", {"status": "completed", "input": [1.0], "output": 3.0}),
        tool("c_err", "x", {"status": "error", "input": {}, "error": "rejected"}),
        tool("c_null", "x", {"status": "completed", "input": {}, "output": None}),
        tool("c_str_state", "x", "weird"),
        tool(7, "not a call"),
        {"type": "tool", "tool": "no call id"},
    )
    out = s.chat()
    assert [c["function"] for c in out[0]["tool_calls"]] == [
        {"name": "unknown", "arguments": "{}"},
        {"name": "unknown", "arguments": "{}"},
        {"name": "x", "arguments": '{"1":1,"2":0}'},
        {"name": "x", "arguments": "[1]"},
        {"name": "x", "arguments": "{}"},
        {"name": "x", "arguments": "{}"},
        {"name": "x", "arguments": "{}"},
    ]
    assert out[0]["content"] is None and "reasoning_content" not in out[0]
    assert [(m["tool_call_id"], m["name"], m["content"]) for m in out[1:]] == [
        ("c_none", "unknown", ""),
        ("c_missing", "unknown", ""),
        ("c_obj", "x", '{"a":1}'),
        ("c_num", "x", "3"),
        ("c_err", "x", ""),  # state.error is ignored
        ("c_null", "x", ""),
        ("c_str_state", "x", ""),
    ]


def test_bad_rows_are_skipped() -> None:
    s = Session()
    s.message("{not json")
    s.message("[1, 2]")
    s.message({"role": "system"})
    mid = s.user("{broken", "null", text("kept"))
    s.parts_of("msg_orphan", text("orphan"))
    assert mid
    assert s.chat() == [{"role": "user", "content": "kept"}]


def test_parts_msgspec_refuses_are_read_as_json_parse_reads_them() -> None:
    s = Session()
    mid = s.assistant(
        '{"type":"tool","callID":"c1","tool":"t","state":{"input":{"n":1e400}}}',
        '{"type":"text","text":"first","type":"reasoning"}',  # the last duplicate wins
        '"just a string"',
        '{"type":"text","text":"\\ud83d"}',
    )
    assert mid
    assert s.chat() == [
        {
            "role": "assistant",
            "content": "\ud83d",
            "reasoning_content": "first",
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "t", "arguments": '{"n":null}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "name": "t", "content": ""},
    ]


def test_a_part_is_what_json_parse_makes_of_it_duplicate_keys_and_escapes_too() -> None:
    s = Session()
    s.assistant(
        text("a"),
        # A second top-level type (the last wins): a text after all, so it is read.
        '{"type":"step-finish","text":"b","type":"text"}',
        # The same with the key escaped: read too.
        '{"type":"snapshot","text":"c","\\u0074ype":"text"}',
        '{"type": "patch", "text": "lost"}',  # dropped: whatever it holds
        '{"type":"step-start"',  # not JSON: no boundary, the step goes on
        text("d"),
        '{"type":"step-start"}',  # a boundary: the step closes
        text("e"),
    )
    assert [m["content"] for m in s.chat()] == ["a\nb\nc\nd", "e"]


def test_messages_by_time_then_id_and_parts_by_id() -> None:
    s = Session()
    later = s.message({"role": "user"}, mid="msg_b", t=20)
    first = s.message({"role": "user"}, mid="msg_z", t=10)
    tie = s.message({"role": "user"}, mid="msg_a", t=20)
    s.parts.extend(
        [
            PartRow(id="prt_2", message_id=later, data=json.dumps(text("b2"))),
            PartRow(id="prt_1", message_id=later, data=json.dumps(text("b1"))),
            PartRow(id="prt_3", message_id=first, data=json.dumps(text("z"))),
            PartRow(id="prt_4", message_id=tie, data=json.dumps(text("a"))),
        ]
    )
    assert [m["content"] for m in s.chat()] == ["z", "a", "b1\nb2"]


def _capture(s: Session, row: dict[str, Any]) -> AgentSessionCaptured:
    return AgentSessionCaptured(
        attempt=1,
        purpose="solo",
        store_path="/s",
        session_id="ses_1",
        parent_id=None,
        directory="/w",
        row=row,
        messages=s.messages,
        parts=s.parts,
    )


def test_capture_chat_messages_and_session_info() -> None:
    s = Session()
    s.user(text("hi"))
    row = {
        "id": "ses_1",
        "parent_id": "ses_0",
        "directory": "/w",
        "agent": "general",
        "model": '{"id":"glm-5.2","providerID":"zai-coding-plan","variant":"default"}',
        "time_created": 1_000,
        "time_updated": 5_600,
    }
    cap = _capture(s, row)
    assert capture_chat_messages(cap) == [{"role": "user", "content": "hi"}]
    info = opencode_session_info(row)
    assert (info.model_id, info.provider_id) == ("glm-5.2", "zai-coding-plan")
    assert (info.parent_id, info.agent, info.directory) == ("ses_0", "general", "/w")
    assert info.time_updated - info.time_created == 4_600
    bare = opencode_session_info({"id": "s", "directory": "/w", "model": "not json"})
    assert (bare.model_id, bare.provider_id, bare.parent_id, bare.agent) == (None,) * 4
    assert bare.time_created == 0


def test_a_lone_surrogate_is_not_kept_and_the_rows_are_folded_again() -> None:
    s = Session()
    s.user(text("\ud83d"))
    assert session_transcript(s.messages, s.parts, "ses_1") is None
    assert js_stringify(s.chat()) == '[{"role":"user","content":"\\ud83d"}]'


def test_a_hostile_tool_name_is_kept_as_its_gap() -> None:
    s = Session()
    s.assistant(START, tool("c1", 42, done({}, "ok")), FINISH)
    kept = session_transcript(s.messages, s.parts, "ses_1")
    assert kept == SessionTranscript(
        rules=TRANSCRIPT_RULES,
        messages=EMPTY_ENCODED,
        gap="opencode session ses_1: a tool part's name is 42, not a string",
    )
    check_the_kept_fold(s)


def test_a_fold_kept_under_other_rules_is_not_used() -> None:
    s = Session()
    s.user(text("hi"))
    stale = SessionTranscript(rules=TRANSCRIPT_RULES - 1, messages=msgspec.Raw(b'["stale"]'))
    capture = msgspec.structs.replace(_capture(s, {"id": "ses_1"}), transcript=stale)
    assert ledger_transcript(capture) == ([{"role": "user", "content": "hi"}], None)
    current = msgspec.structs.replace(stale, rules=TRANSCRIPT_RULES)
    capture = msgspec.structs.replace(capture, transcript=current)
    assert ledger_transcript(capture) == (msgspec.Raw(b'["stale"]'), None)


def _rules_corpus() -> list[Session]:
    """Sessions that exercise every rule of the fold, for the digest below."""
    user = Session()
    user.user(text("a"), text(""), text(7), {"type": "file"}, text("b"))
    user.user()
    steps = Session()
    steps.user(text("fix it"))
    steps.assistant(
        reasoning("think"),
        text("before any step"),
        START,
        reasoning(""),
        reasoning("plan"),
        text("one"),
        text(""),
        tool("c1", "bash", done({"cmd": "ls", "n": 1}, "out")),
        tool("c2", None, done(None, None)),
        tool("c3", "read", done({"0": "x"}, {"lines": [1, 2.5]})),
        tool(7, "skipped"),
        FINISH,
        START,
        {"type": "snapshot", "snapshot": "s"},
        {"type": "patch", "hash": "h"},
        FINISH,
        START,
        text("last"),
        tool("c4", "bash", {"status": "error", "error": "boom"}),
        tool("c5", "bash", "not an object"),
    )
    steps.message({"role": "system"})
    steps.message("not json")
    bad = Session()
    bad.assistant("{broken", '"str"', text("kept"), '{"type":"text","text":"x","type":"tool"}')
    hostile = Session()
    hostile.assistant(START, tool("c1", ["x"], done({}, "ok")))
    deep: Any = 0
    for _ in range(MAX_NESTING + 1):
        deep = [deep]
    too_deep = Session()
    too_deep.assistant(START, tool("c1", "bash", done({}, deep)))
    return [user, steps, bad, hostile, too_deep]


# The digest of the corpus's folds under each TRANSCRIPT_RULES: when a change to the fold
# moves it, bump TRANSCRIPT_RULES and add the new digest (a capture keeps the fold of its
# day; a forgotten bump would hand the ledger a fold these rules no longer make).
RULES_DIGESTS = {1: "c26ae0544cf0cada447ad315e092ef6f315968cdc8221737c9f00bcd43bf0218"}


def test_the_rules_number_names_the_fold_it_makes() -> None:
    folds = [ledger_transcript(_capture(s, {"id": "ses_1"})) for s in _rules_corpus()]
    digest = hashlib.sha256(js_stringify_bytes([[m, g] for m, g in folds])).hexdigest()
    assert RULES_DIGESTS.get(TRANSCRIPT_RULES) == digest, (
        "the transcript fold changed: bump TRANSCRIPT_RULES and record this digest"
    )


@pytest.mark.parametrize("where", ["input", "output"])
def test_a_tool_value_nested_too_deep_is_a_gap_not_a_crash(where: str) -> None:
    deep: Any = "x"
    for _ in range(MAX_NESTING + 1):
        deep = [deep]
    state = {"input": {"n": 1}, "output": "ok", where: {"v": deep} if where == "input" else deep}
    s = Session()
    s.assistant(START, tool("c1", "bash", state))
    gap = (
        "opencode session ses_1: a tool part's input or output is nested"
        f" more than {MAX_NESTING} deep"
    )
    with pytest.raises(NestedTooDeeply):
        opencode_chat_messages(s.messages, s.parts)
    assert ledger_transcript(_capture(s, {"id": "ses_1"})) == ([], gap)
    kept = session_transcript(s.messages, s.parts, "ses_1")
    assert kept is not None and (kept.messages, kept.gap) == (EMPTY_ENCODED, gap)


def test_a_tool_value_nested_to_the_limit_is_written() -> None:
    deep: Any = 1
    for _ in range(MAX_NESTING - 1):
        deep = [deep]
    s = Session()
    s.assistant(START, tool("c1", "bash", done({"v": deep}, deep)))
    (call, result) = s.chat()
    assert result["content"] == "[" * (MAX_NESTING - 1) + "1" + "]" * (MAX_NESTING - 1)
    assert call["tool_calls"][0]["function"]["arguments"] == '{"v":' + result["content"] + "}"
