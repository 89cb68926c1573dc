"""What the gateway records of one call (pure): the prompt chain, usage, cost, bounds."""

from __future__ import annotations

import json

from arenad.gateway import record
from arenad.gateway.grants import Price


def test_only_messages_after_a_recorded_prefix_are_new() -> None:
    first = [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}]
    part, prompt_hash = record.request_part({"model": "m", "messages": first}, set())
    assert part["prefix_len"] == 0 and part["new_messages"] == first
    assert part["prefix_hash"] == record.EMPTY_CHAIN
    second = [*first, {"role": "assistant", "content": "a"}, {"role": "tool", "content": "t"}]
    part2, prompt_hash2 = record.request_part({"model": "m", "messages": second}, {prompt_hash})
    assert part2["prefix_len"] == 2 and part2["prefix_hash"] == prompt_hash
    assert part2["new_messages"] == second[2:]
    # The chain of the full prompt is the chain of the prefix extended by the new messages.
    assert record.chain(second)[-1] == prompt_hash2
    # A changed earlier message breaks the chain: everything is new again.
    edited = [{"role": "system", "content": "other"}, *second[1:]]
    part3, _ = record.request_part({"messages": edited}, {prompt_hash, prompt_hash2})
    assert part3["prefix_len"] == 0


def test_usage_and_cost_follow_opencodes_arithmetic() -> None:
    usage = record.openai_usage(
        {
            "prompt_tokens": 1000,
            "completion_tokens": 50,
            "prompt_tokens_details": {"cached_tokens": 200},
            "completion_tokens_details": {"reasoning_tokens": 7},
        }
    )
    assert (usage.input, usage.output, usage.reasoning, usage.cache_read) == (800, 43, 7, 200)
    price = Price(input=3.0, output=15.0, cache_read=0.3)
    assert abs((record.cost_usd(usage, price) or 0) - 0.00321) < 1e-12
    assert record.cost_usd(usage, None) is None
    # Hostile numbers count as nothing, never negative.
    assert record.openai_usage({"prompt_tokens": -5, "completion_tokens": True}).total == 0


def test_a_stream_folds_into_content_tool_calls_and_usage() -> None:
    chunks = [
        {"id": "x", "choices": [{"index": 0, "delta": {"content": "Hel"}}]},
        {"choices": [{"index": 0, "delta": {"content": "lo"}}]},
        {
            "choices": [
                {
                    "index": 0,
                    "delta": {
                        "tool_calls": [
                            {"index": 0, "id": "c1", "function": {"name": "bash", "arguments": ""}}
                        ]
                    },
                }
            ]
        },
        {
            "choices": [
                {
                    "index": 0,
                    "delta": {"tool_calls": [{"index": 0, "function": {"arguments": "{}"}}]},
                }
            ]
        },
        {"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]},
        {"choices": [], "usage": {"prompt_tokens": 10, "completion_tokens": 2}},
    ]
    wire = b"".join(b"data: " + json.dumps(c).encode() + b"\r\n\r\n" for c in chunks)
    wire += b"data: [DONE]\n\ndata: {not json\n\n"
    splitter = record.SseSplitter()
    result = record.ChatResult()
    # Arbitrary cuts: events are whole whatever the pieces.
    for i in range(0, len(wire), 7):
        result.add_sse(splitter.feed(wire[i : i + 7]))
    result.add_sse(splitter.rest())
    response = result.response()
    assert response["content"] == "Hello"
    assert response["tool_calls"] == [{"id": "c1", "name": "bash", "arguments": "{}"}]
    assert response["finish_reason"] == "tool_calls"
    assert response["malformed_chunks"] == 1
    assert result.usage is not None and result.usage.input == 10


def test_a_record_past_the_bound_elides_and_labels_what_it_left_out() -> None:
    big = "x" * 5000
    entry = {
        "call": "c",
        "request": {"new_messages": [{"role": "user", "content": big}], "prompt_hash": "h"},
        "response": {"content": "short"},
        "usage": {"input": 1},
    }
    line = record.bounded(entry, 1000)
    assert len(line) <= 1000 and line.endswith(b"\n")
    out = json.loads(line)
    assert out["request"]["new_messages"] is None
    assert out["elided"]["request.new_messages"]["bytes"] > 5000
    assert out["usage"] == {"input": 1} and out["response"] == {"content": "short"}
    small = record.bounded({"a": 1}, 1000)
    assert json.loads(small) == {"a": 1}
