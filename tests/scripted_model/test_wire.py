"""The OpenAI chunk / completion shapes."""

from __future__ import annotations

import msgspec

from arenad.scripted_model.script import PlannedToolCall, Reply, ResolvedUsage
from arenad.scripted_model.wire import completion, pieces, sse_event, stream_chunks, usage_json

USAGE = ResolvedUsage(
    prompt_tokens=1000, completion_tokens=50, cached_tokens=200, reasoning_tokens=7
)


def reply(**kw: object) -> Reply:
    base: dict[str, object] = {"kind": "step", "conversation": "c", "step": 0, "usage": USAGE}
    base.update(kw)
    return msgspec.convert(base, Reply)


def test_usage_has_the_openai_detail_fields() -> None:
    assert usage_json(USAGE) == {
        "prompt_tokens": 1000,
        "completion_tokens": 50,
        "total_tokens": 1050,
        "prompt_tokens_details": {"cached_tokens": 200},
        "completion_tokens_details": {"reasoning_tokens": 7},
    }


def test_pieces() -> None:
    assert list(pieces("abcdefg", 3)) == ["abc", "def", "g"]
    assert list(pieces("", 3)) == []


def test_text_stream_chunks() -> None:
    chunks = stream_chunks(
        reply(text="Hello there", reasoning="hmm"),
        completion_id="id1",
        model="m",
        created=7,
        chunk_chars=5,
        include_usage=True,
    )
    for chunk in chunks:
        assert (chunk["id"], chunk["object"], chunk["created"], chunk["model"]) == (
            "id1",
            "chat.completion.chunk",
            7,
            "m",
        )
    deltas = [c["choices"][0]["delta"] for c in chunks[:-1]]
    assert deltas == [
        {"role": "assistant"},
        {"reasoning_content": "hmm"},
        {"content": "Hello"},
        {"content": " ther"},
        {"content": "e"},
        {},
    ]
    assert [c["choices"][0]["finish_reason"] for c in chunks[:-1]] == [None] * 5 + ["stop"]
    assert chunks[-1]["choices"] == []
    assert chunks[-1]["usage"] == usage_json(USAGE)


def test_tool_call_stream_chunks_reassemble() -> None:
    calls = (
        PlannedToolCall(id="call_1_1", name="write", arguments='{"filePath":"a","content":"xyz"}'),
        PlannedToolCall(id="call_1_2", name="bash", arguments='{"command":"ls"}'),
    )
    chunks = stream_chunks(
        reply(tool_calls=calls),
        completion_id="id",
        model="m",
        created=0,
        chunk_chars=8,
        include_usage=True,
    )
    assert chunks[-2]["choices"][0]["finish_reason"] == "tool_calls"
    # Reassemble the way a client does: by index, first delta carries id/type/name.
    got: dict[int, dict[str, str]] = {}
    for chunk in chunks[1:-2]:
        for delta in chunk["choices"][0]["delta"]["tool_calls"]:
            entry = got.setdefault(delta["index"], {"arguments": ""})
            if "id" in delta:
                assert delta["type"] == "function"
                entry["id"] = delta["id"]
                entry["name"] = delta["function"]["name"]
            entry["arguments"] += delta["function"]["arguments"]
    assert got == {
        0: {"id": "call_1_1", "name": "write", "arguments": calls[0].arguments},
        1: {"id": "call_1_2", "name": "bash", "arguments": calls[1].arguments},
    }


def test_without_include_usage_the_usage_rides_on_the_finish_chunk() -> None:
    chunks = stream_chunks(
        reply(text="x"), completion_id="i", model="m", created=0, chunk_chars=4, include_usage=False
    )
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop"
    assert chunks[-1]["usage"]["total_tokens"] == 1050


def test_sse_event_framing() -> None:
    assert sse_event({"a": 1}) == b'data: {"a":1}\n\n'


def test_non_stream_completion() -> None:
    call = PlannedToolCall(id="c1", name="read", arguments='{"filePath":"x"}')
    out = completion(
        reply(text="Reading.", tool_calls=(call,)), completion_id="i", model="m", created=3
    )
    assert out["object"] == "chat.completion"
    choice = out["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    assert choice["message"] == {
        "role": "assistant",
        "content": "Reading.",
        "tool_calls": [
            {
                "id": "c1",
                "type": "function",
                "function": {"name": "read", "arguments": call.arguments},
            }
        ],
    }
    assert out["usage"]["prompt_tokens_details"] == {"cached_tokens": 200}
