"""The responses wire of the scripted model (pure): the request read as a chat history, and
the answer's object and events."""

from __future__ import annotations

import json
from typing import Any

from arenad.scripted_model import responses, wire
from arenad.scripted_model.script import (
    PlannedToolCall,
    Reply,
    ResolvedUsage,
    parse_script,
)

USAGE = ResolvedUsage(
    prompt_tokens=1000, completion_tokens=50, cached_tokens=200, reasoning_tokens=7
)
SCRIPT = parse_script('[[models]]\nid = "m"\n', "<test>")


def _events(raw: list[bytes]) -> list[dict[str, Any]]:
    out = []
    for event in raw:
        name, data = event.decode().rstrip("\n").split("\n")
        payload = json.loads(data.removeprefix("data: "))
        assert name == f"event: {payload['type']}"
        out.append(payload)
    return out


def test_each_run_of_the_assistants_items_is_one_turn() -> None:
    body = {
        "model": "m",
        "instructions": "be brief",
        "input": [
            {"role": "user", "content": [{"type": "input_text", "text": "fix it"}]},
            {"type": "reasoning", "summary": []},
            {
                "type": "message",
                "role": "assistant",
                "content": [{"type": "output_text", "text": "ok"}],
            },
            {"type": "function_call", "call_id": "c1", "name": "bash", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c1", "output": "done"},
            {"type": "function_call", "call_id": "c2", "name": "bash", "arguments": "{}"},
        ],
    }
    roles = [m["role"] for m in responses.chat_view(body)["messages"]]
    assert roles == ["system", "user", "assistant", "tool", "assistant"]
    assert responses.chat_view({"input": "hi"})["messages"] == [{"role": "user", "content": "hi"}]


def test_a_reply_streams_as_response_events_ending_in_completed() -> None:
    reply = Reply(
        kind="step",
        conversation=None,
        step=0,
        text="Hello there",
        tool_calls=(PlannedToolCall(id="c1", name="bash", arguments='{"a":1}'),),
        usage=USAGE,
    )
    extras = responses.extras_for({"include": [responses.LOGPROBS_INCLUDE]}, SCRIPT)
    events = _events(
        responses.events(reply, response_id="r", model="m", created=1, extras=extras, chunk_chars=5)
    )
    assert events[0]["type"] == "response.created" and events[-1]["type"] == "response.completed"
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    deltas = [e for e in events if e["type"] == "response.output_text.delta"]
    assert [d["delta"] for d in deltas] == ["Hello", " ther", "e"]
    assert deltas[0]["logprobs"][0]["logprob"] == wire.token_logprob("Hello")
    args = [e["delta"] for e in events if e["type"] == "response.function_call_arguments.delta"]
    assert "".join(args) == '{"a":1}'
    final = events[-1]["response"]
    assert final["usage"]["input_tokens_details"] == {"cached_tokens": 200}
    assert final["usage"]["output_tokens_details"] == {"reasoning_tokens": 7}
    whole = responses.response(
        reply, response_id="r", model="m", created=1, extras=extras, chunk_chars=5
    )
    assert whole == final


def test_token_ids_ride_on_the_completed_response_as_vllms_raw_messages() -> None:
    reply = Reply(
        kind="step",
        conversation=None,
        step=0,
        text="Hello there",
        tool_calls=(PlannedToolCall(id="c1", name="bash", arguments='{"a":1}'),),
        usage=USAGE,
    )
    body = {"enable_response_messages": True, "instructions": "be brief", "input": "hi"}
    script = parse_script('chunk_chars = 5\n[[models]]\nid = "m"\n', "<test>")
    extras = responses.extras_for(body, script)
    given = responses.raw_input_messages(body, script)
    assert [(m["type"], m["message"]) for m in given] == [
        ("raw_message_tokens", "be brief"),
        ("raw_message_tokens", "hi"),
    ]
    assert [m["tokens"] for m in given] == [
        [wire.token_id("be br"), wire.token_id("ief")],
        [wire.token_id("hi")],
    ]
    assert extras.token_ids and extras.prompt_token_ids == [i for m in given for i in m["tokens"]]
    kwargs: dict[str, Any] = {
        "response_id": "r",
        "model": "m",
        "created": 1,
        "extras": extras,
        "chunk_chars": 5,
        "input_messages": given,
    }
    whole = responses.response(reply, **kwargs)
    pieces = ["Hello", " ther", "e", '{"a":', "1}"]
    assert whole["input_messages"] == given
    assert whole["output_messages"] == [
        {
            "type": "raw_message_tokens",
            "message": "".join(pieces),
            "tokens": [wire.token_id(p) for p in pieces],
        }
    ]
    events = _events(responses.events(reply, **kwargs))
    assert events[-1]["response"] == whole
    # Only the completed response carries them, and only when asked.
    assert "input_messages" not in events[0]["response"]
    plain = responses.extras_for({"input": "hi"}, SCRIPT)
    assert not plain.token_ids
    assert "output_messages" not in responses.response(reply, **{**kwargs, "extras": plain})
