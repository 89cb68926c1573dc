"""The gateway's wire formats (pure): each fold, usage mapping, error shape and route."""

from __future__ import annotations

import json
from typing import Any

from arenad.gateway import protocols, record
from arenad.gateway.grants import Price


def _sse(events: list[dict[str, Any]], named: bool) -> bytes:
    out = b""
    for e in events:
        if named:
            out += b"event: " + str(e["type"]).encode() + b"\n"
        out += b"data: " + json.dumps(e).encode() + b"\n\n"
    return out


def _fold(protocol: protocols.Protocol, wire: bytes) -> record.Result:
    splitter = record.SseSplitter()
    result = protocol.fold()
    # Arbitrary cuts: events are whole whatever the pieces.
    for i in range(0, len(wire), 5):
        result.add_sse(splitter.feed(wire[i : i + 5]))
    result.add_sse(splitter.rest())
    return result


def test_usage_and_cost_follow_opencodes_arithmetic() -> None:
    usage = protocols.openai_usage(
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
    assert protocols.openai_usage({"prompt_tokens": -5, "completion_tokens": True}).total == 0


def test_a_chat_stream_folds_into_content_tool_calls_and_usage() -> None:
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
    result = protocols.ChatResult()
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


def test_each_path_has_one_row_and_nothing_else_is_routed() -> None:
    assert protocols.for_path("/v1/chat/completions") is protocols.CHAT
    assert protocols.for_path("/v1/responses") is protocols.RESPONSES
    assert protocols.for_path("/v1/messages") is protocols.MESSAGES
    assert protocols.for_path("/v1/completions") is None
    assert protocols.for_path("/messages") is None
    assert len({p.endpoint for p in protocols.TABLE}) == len(protocols.TABLE)


def test_a_responses_stream_folds_text_logprobs_tool_calls_and_usage() -> None:
    usage = {
        "input_tokens": 1000,
        "output_tokens": 50,
        "input_tokens_details": {"cached_tokens": 200},
        "output_tokens_details": {"reasoning_tokens": 7},
    }
    lp = [{"token": "Hi", "logprob": -0.1, "top_logprobs": [{"token": "Hi", "logprob": -0.1}]}]
    events: list[dict[str, Any]] = [
        {"type": "response.created", "response": {"id": "r1", "status": "in_progress"}},
        {"type": "response.output_text.delta", "output_index": 0, "delta": "Hi", "logprobs": lp},
        {"type": "response.output_text.delta", "output_index": 0, "delta": " you"},
        {
            "type": "response.output_item.added",
            "output_index": 1,
            "item": {"type": "function_call", "call_id": "c1", "name": "bash", "arguments": ""},
        },
        {"type": "response.function_call_arguments.delta", "output_index": 1, "delta": "{}"},
        {"type": "response.completed", "response": {"status": "completed", "usage": usage}},
    ]
    result = _fold(protocols.RESPONSES, _sse(events, named=True))
    response = result.response()
    assert response["content"] == "Hi you" and response["id"] == "r1"
    assert response["tool_calls"] == [{"id": "c1", "name": "bash", "arguments": "{}"}]
    assert response["finish_reason"] == "completed"
    assert result.ended and result.stream_error is None
    assert result.logprobs == [
        {"token": "Hi", "logprob": -0.1, "top": [{"token": "Hi", "logprob": -0.1}]}
    ]
    assert result.usage_json() == {
        "input": 800,
        "output": 43,
        "reasoning": 7,
        "cache_read": 200,
        "cache_write": 0,
    }


def test_a_responses_body_folds_the_same() -> None:
    result = protocols.RESPONSES.fold()
    result.add(
        {
            "id": "r2",
            "status": "incomplete",
            "incomplete_details": {"reason": "max_output_tokens"},
            "output": [
                {"type": "reasoning", "summary": [{"type": "summary_text", "text": "think"}]},
                {"type": "message", "content": [{"type": "output_text", "text": "Hello"}]},
            ],
            "usage": {"input_tokens": 10, "output_tokens": 2},
        },
        streamed=False,
    )
    response = result.response()
    assert (response["content"], response["reasoning"]) == ("Hello", "think")
    assert response["finish_reason"] == "max_output_tokens"
    assert result.usage is not None and (result.usage.input, result.usage.output) == (10, 2)


def test_a_messages_stream_folds_usage_from_start_and_delta() -> None:
    start_usage = {
        "input_tokens": 600,
        "cache_read_input_tokens": 200,
        "cache_creation_input_tokens": 100,
        "output_tokens": 1,
    }
    events: list[dict[str, Any]] = [
        {"type": "message_start", "message": {"id": "m1", "model": "m", "usage": start_usage}},
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Yo"}},
        {
            "type": "content_block_start",
            "index": 1,
            "content_block": {"type": "tool_use", "id": "t1", "name": "bash", "input": {}},
        },
        {
            "type": "content_block_delta",
            "index": 1,
            "delta": {"type": "input_json_delta", "partial_json": '{"a":'},
        },
        {
            "type": "content_block_delta",
            "index": 1,
            "delta": {"type": "input_json_delta", "partial_json": "1}"},
        },
        {
            "type": "message_delta",
            "delta": {"stop_reason": "tool_use"},
            "usage": {"output_tokens": 50},
        },
        {"type": "message_stop"},
    ]
    result = _fold(protocols.MESSAGES, _sse(events, named=True))
    response = result.response()
    assert response["content"] == "Yo"
    assert response["tool_calls"] == [{"id": "t1", "name": "bash", "arguments": '{"a":1}'}]
    assert response["finish_reason"] == "tool_use" and result.ended
    assert result.usage_json() == {
        "input": 600,
        "output": 50,
        "reasoning": 0,
        "cache_read": 200,
        "cache_write": 100,
    }
    price = Price(input=3.0, output=15.0, cache_read=0.3, cache_write=3.75)
    assert result.usage is not None
    expected = (600 * 3.0 + 50 * 15.0 + 200 * 0.3 + 100 * 3.75) / 1e6
    assert abs((record.cost_usd(result.usage, price) or 0) - expected) < 1e-12


def test_an_error_inside_a_stream_and_a_stream_cut_short_are_seen() -> None:
    overloaded = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
    result = _fold(protocols.MESSAGES, _sse([overloaded], named=True))
    assert result.stream_error == "overloaded_error: Overloaded"
    started = {"type": "message_start", "message": {"id": "m", "usage": {"input_tokens": 1}}}
    assert not _fold(protocols.MESSAGES, _sse([started], named=True)).ended


def test_refusals_and_errors_are_in_each_wires_shape() -> None:
    anthropic = json.loads(protocols.MESSAGES.error(402, "cap", "budget"))
    assert anthropic == {"type": "error", "error": {"type": "billing_error", "message": "cap"}}
    assert protocols.MESSAGES.refusal == 402
    openai = json.loads(protocols.RESPONSES.error(402, "cap", "budget"))
    assert openai["error"]["type"] == "insufficient_quota"
    assert (protocols.CHAT.auth, protocols.RESPONSES.auth, protocols.MESSAGES.auth) == (
        "bearer",
        "bearer",
        "x-api-key",
    )
