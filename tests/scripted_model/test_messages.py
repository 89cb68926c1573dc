"""The Anthropic messages wire of the scripted model (pure): usage, blocks, events, errors."""

from __future__ import annotations

import json

from arenad.scripted_model import messages
from arenad.scripted_model.script import PlannedToolCall, Reply, ResolvedUsage

USAGE = ResolvedUsage(
    prompt_tokens=1000,
    completion_tokens=50,
    cached_tokens=200,
    reasoning_tokens=7,
    cache_write_tokens=100,
)
REPLY = Reply(
    kind="step",
    conversation=None,
    step=0,
    text="Hi",
    reasoning="hmm",
    tool_calls=(PlannedToolCall(id="t1", name="bash", arguments='{"a":1}'),),
    usage=USAGE,
)


def test_usage_leaves_the_cache_out_of_input_tokens() -> None:
    assert messages.usage_json(USAGE) == {
        "input_tokens": 700,
        "cache_creation_input_tokens": 100,
        "cache_read_input_tokens": 200,
        "output_tokens": 50,
    }


def test_a_reply_is_one_message_or_its_events() -> None:
    whole = messages.message(REPLY, message_id="m1", model="m")
    assert [b["type"] for b in whole["content"]] == ["thinking", "text", "tool_use"]
    assert whole["content"][2]["input"] == {"a": 1} and whole["stop_reason"] == "tool_use"
    events = [
        json.loads(e.decode().split("\n")[1].removeprefix("data: "))
        for e in messages.events(REPLY, message_id="m1", model="m", chunk_chars=4)
    ]
    kinds = [e["type"] for e in events]
    assert kinds[0] == "message_start" and kinds[-2:] == ["message_delta", "message_stop"]
    partial = [
        e["delta"]["partial_json"]
        for e in events
        if e["type"] == "content_block_delta" and e["index"] == 2
    ]
    assert "".join(partial) == '{"a":1}'
    assert events[-2]["usage"] == {"output_tokens": 50}
    assert events[0]["message"]["usage"]["cache_read_input_tokens"] == 200


def test_chat_view_puts_the_system_first_and_errors_have_anthropics_shape() -> None:
    view = messages.chat_view({"system": "s", "messages": [{"role": "user", "content": "u"}]})
    assert [m["role"] for m in view["messages"]] == ["system", "user"]
    assert messages.error_body(529, "busy") == {
        "type": "error",
        "error": {"type": "overloaded_error", "message": "busy"},
    }
