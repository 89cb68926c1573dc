from __future__ import annotations

import json
from typing import Any

from arenad.js import js_stringify
from arenad.ledger.claude_transcript import (
    ClaudeUsage,
    claude_project_slug,
    claude_transcript,
)


def jsonl(*entries: Any) -> str:
    return "\n".join(e if isinstance(e, str) else json.dumps(e) for e in entries) + "\n"


def user(content: Any, ts: Any = "2026-08-22T10:00:00.000Z", **extra: Any) -> dict[str, Any]:
    return {
        "type": "user",
        "timestamp": ts,
        "message": {"role": "user", "content": content},
        **extra,
    }


def assistant(
    blocks: Any,
    mid: Any = "msg_1",
    usage: Any = None,
    model: Any = "claude-sonnet-4-5",
    ts: Any = "2026-08-22T10:00:01.000Z",
    **extra: Any,
) -> dict[str, Any]:
    message: dict[str, Any] = {"id": mid, "role": "assistant", "model": model, "content": blocks}
    if usage is not None:
        message["usage"] = usage
    return {"type": "assistant", "timestamp": ts, "message": message, **extra}


USAGE = {
    "input_tokens": 10,
    "output_tokens": 5,
    "cache_read_input_tokens": 100,
    "cache_creation_input_tokens": 7,
}


def test_project_slug() -> None:
    assert claude_project_slug("/tmp/claude-1000/-home-drew/x.y_z") == (
        "-tmp-claude-1000--home-drew-x-y-z"
    )
    assert claude_project_slug("/w/é😀") == "-w----"  # 😀 is two UTF-16 code units


def test_lines_that_are_not_conversation_are_dropped() -> None:
    text = jsonl(
        "",
        "   ",
        "\u00a0\ufeff",
        "{not json",
        "[1, 2]",
        '"string"',
        {"type": "queue-operation", "timestamp": "2026-01-01T00:00:00Z"},
        {"type": "summary", "summary": "x"},
        {"type": "user", "timestamp": "2026-01-01T00:00:00Z", "message": "not an object"},
        {"type": "attachment", "message": {"role": "user", "content": "x"}},
        user("hello"),
    )
    out = claude_transcript(text)
    assert out.messages == [{"role": "user", "content": "hello"}]
    assert out.started_at == out.ended_at == "2026-08-22T10:00:00.000Z"


def test_sidechain_filter() -> None:
    text = jsonl(
        user("main", ts="t1"),
        user("side", ts="t2", isSidechain=True, agentId="a1"),
        user("main again", ts="t3", isSidechain=False),
    )
    main = claude_transcript(text)
    assert [m["content"] for m in main.messages] == ["main", "main again"]
    assert (main.started_at, main.ended_at) == ("t1", "t3")
    side = claude_transcript(text, include_sidechain=True)
    assert [m["content"] for m in side.messages] == ["side"]
    assert (side.started_at, side.ended_at) == ("t2", "t2")


def test_times_and_model_come_from_every_kept_entry() -> None:
    text = jsonl(
        user([], ts=None),
        user([{"type": "image"}], ts="first"),
        assistant([{"type": "text", "text": "hi"}], model="model-a", ts=123),
        assistant([], mid="msg_2", model="model-b", ts="last"),  # no content, still counts
        assistant([], mid="msg_3", model=None, ts=None),
    )
    out = claude_transcript(text)
    assert (out.started_at, out.ended_at, out.model) == ("first", "last", "model-b")
    assert out.messages == [{"role": "assistant", "content": "hi"}]
    empty = claude_transcript("")
    assert (empty.messages, empty.started_at, empty.ended_at, empty.model) == ([], None, None, None)
    assert empty.usage == ClaudeUsage()


def test_user_entries() -> None:
    text = jsonl(
        user(""),
        user(
            [
                {"type": "text", "text": ""},
                {"type": "tool_result", "tool_use_id": "t1", "content": "plain"},
                {"type": "text", "text": "after"},
                {
                    "type": "tool_result",
                    "tool_use_id": "t2",
                    "is_error": True,
                    "content": [
                        {"type": "text", "text": "a"},
                        {"type": "image", "source": {}},
                        {"type": "text", "text": "b"},
                    ],
                },
                {"type": "tool_result", "tool_use_id": "t3", "content": None},
                {"type": "tool_result", "tool_use_id": 4, "content": "no id"},
                {"type": "tool_result", "tool_use_id": "t5", "content": [{"type": "image"}]},
                {"type": "text", "text": "more"},
                "junk",
            ]
        ),
        user([{"type": "text", "text": ""}]),
        user({"not": "a list"}),
    )
    out = claude_transcript(text)
    assert out.messages == [
        {"role": "user", "content": ""},
        {"role": "tool", "tool_call_id": "t1", "content": "plain"},
        {"role": "tool", "tool_call_id": "t2", "content": "a\nb"},
        {"role": "tool", "tool_call_id": "t3", "content": ""},
        {"role": "tool", "tool_call_id": "t5", "content": ""},
        {"role": "user", "content": "after\nmore"},
    ]
    assert js_stringify(out.messages[1]) == '{"role":"tool","tool_call_id":"t1","content":"plain"}'


def test_assistant_blocks() -> None:
    text = jsonl(
        assistant(
            [
                {"type": "thinking", "thinking": ""},
                {"type": "thinking", "thinking": "hmm"},
                {"type": "text", "text": "one"},
                {"type": "tool_use", "id": "tu1", "name": "Bash", "input": {"b": 1, "a": [1.0]}},
                {"type": "tool_use", "id": "tu2", "input": None},
                {"type": "tool_use", "name": "no id"},
                {"type": "text", "text": "two"},
                {"type": "redacted_thinking", "data": "x"},
            ]
        ),
        assistant([{"type": "thinking", "thinking": ""}], mid="msg_skip"),
    )
    out = claude_transcript(text)
    assert [js_stringify(m) for m in out.messages] == [
        '{"role":"assistant","content":"one\\ntwo","reasoning_content":"hmm","tool_calls":['
        '{"id":"tu1","type":"function","function":{"name":"Bash","arguments":'
        '"{\\"b\\":1,\\"a\\":[1]}"}},'
        '{"id":"tu2","type":"function","function":{"name":"unknown","arguments":"{}"}}]}'
    ]


def test_blocks_of_one_api_message_merge_in_arrival_order() -> None:
    call = {"type": "tool_use", "id": "tu1", "name": "Read", "input": {"path": "a"}}
    text = jsonl(
        assistant([call], usage=USAGE),
        assistant([{"type": "text", "text": "hi"}], usage=USAGE),
        assistant([{"type": "thinking", "thinking": "late thought"}], usage=USAGE),
        assistant([{"type": "text", "text": "more"}], usage=USAGE),
        assistant([{"type": "thinking", "thinking": "again"}], usage=USAGE),
        assistant([{**call, "id": "tu2"}], usage=USAGE),
    )
    out = claude_transcript(text)
    assert len(out.messages) == 1
    merged = out.messages[0]
    # content (created with the message) keeps its place; reasoning_content lands last.
    assert list(merged) == ["role", "content", "tool_calls", "reasoning_content"]
    assert merged["content"] == "hi\nmore"
    assert merged["reasoning_content"] == "late thought\nagain"
    assert [c["id"] for c in merged["tool_calls"]] == ["tu1", "tu2"]
    assert out.usage == ClaudeUsage(tokens_in=10, tokens_out=5, cache_read=100, cache_write=7)


def test_a_user_entry_ends_the_merge_and_usage_counts_again() -> None:
    text = jsonl(
        assistant([{"type": "text", "text": "a"}], usage=USAGE),
        user([{"type": "tool_result", "tool_use_id": "x", "content": "r"}]),
        assistant([{"type": "text", "text": "b"}], usage=USAGE),
        assistant([{"type": "text", "text": "c"}], mid="msg_2", usage={"input_tokens": 1}),
        assistant([{"type": "text", "text": "d"}], mid=None, usage={"output_tokens": 2}),
        assistant([{"type": "text", "text": "e"}], mid=None, usage={"output_tokens": 2}),
    )
    out = claude_transcript(text)
    assert [m["content"] for m in out.messages] == ["a", "r", "b", "c", "d", "e"]
    assert out.usage == ClaudeUsage(tokens_in=21, tokens_out=14, cache_read=200, cache_write=14)


def test_an_empty_first_block_counts_usage_twice_as_agent_eval_does() -> None:
    text = jsonl(
        assistant([{"type": "thinking", "thinking": ""}], usage=USAGE),
        assistant([{"type": "text", "text": "x"}], usage=USAGE),
        assistant([{"type": "text", "text": "y"}], usage=USAGE),
    )
    out = claude_transcript(text)
    assert out.messages == [{"role": "assistant", "content": "x\ny"}]
    assert out.usage.tokens_in == 20


def test_usage_non_numbers_count_zero() -> None:
    usage = {"input_tokens": "10", "output_tokens": True, "cache_read_input_tokens": 2.5}
    text = jsonl(
        assistant([{"type": "text", "text": "x"}], usage=usage),
        assistant([{"type": "text", "text": "x"}], mid="m2", usage="not an object"),
    )
    out = claude_transcript(text)
    assert out.usage == ClaudeUsage(tokens_in=0, tokens_out=0, cache_read=2.5, cache_write=0)


def test_crlf_lines_still_parse() -> None:
    text = json.dumps(user("hi")) + "\r\n" + json.dumps(user("there")) + "\r\n"
    assert [m["content"] for m in claude_transcript(text).messages] == ["hi", "there"]
