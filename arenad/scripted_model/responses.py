"""OpenAI's responses wire (``POST /v1/responses``) for the scripted model (pure builders).

The request is read as a chat history (:func:`chat_view`) so the script picks the answer the
same way as for chat completions: ``instructions`` is the system message, a string ``input``
the user's, and each run of the assistant's own items (``message``, ``function_call``,
``reasoning``) one assistant turn. The answer is one ``response`` object, or its
``response.*`` events (``event: <type>`` + ``data: {...}``, no ``[DONE]``); usage is
``input_tokens`` (with ``input_tokens_details.cached_tokens``) / ``output_tokens`` (with
``output_tokens_details.reasoning_tokens``). Chosen-token logprobs ride on ``output_text``
when the request includes ``message.output_text.logprobs`` (or gives ``top_logprobs``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgspec

from arenad.scripted_model import wire
from arenad.scripted_model.script import Reply, ResolvedUsage, Script

JSON = dict[str, Any]
LOGPROBS_INCLUDE = "message.output_text.logprobs"
_ASSISTANT_ITEMS = ("function_call", "reasoning")


def chat_view(body: Mapping[str, Any]) -> JSON:
    """The request as a chat-completions body (``model`` and ``messages``)."""
    messages: list[JSON] = []
    if isinstance(body.get("instructions"), str):
        messages.append({"role": "system", "content": body["instructions"]})
    given = body.get("input")
    items = [{"role": "user", "content": given}] if isinstance(given, str) else given
    for item in items if isinstance(items, list) else []:
        if not isinstance(item, Mapping):
            continue
        role = item.get("role")
        if item.get("type") in _ASSISTANT_ITEMS:
            role = "assistant"
        elif item.get("type") == "function_call_output":
            role = "tool"
        if not isinstance(role, str):
            continue
        if role == "assistant" and messages and messages[-1]["role"] == "assistant":
            continue  # the same turn's next item
        messages.append({"role": role, "content": item.get("content")})
    return {"model": body.get("model"), "messages": messages}


def extras_for(body: Mapping[str, Any], script: Script) -> wire.Extras:
    """Logprobs when the request includes them (or gives ``top_logprobs``); token ids when
    it sets vLLM's ``enable_response_messages`` (or the script says ``token_ids``)."""
    include = body.get("include")
    top = body.get("top_logprobs")
    top = top if isinstance(top, int) and not isinstance(top, bool) and top > 0 else 0
    asked = isinstance(include, list) and LOGPROBS_INCLUDE in include
    token_ids = body.get("enable_response_messages") is True or script.token_ids
    return wire.Extras(
        logprobs=asked or top > 0 or script.logprobs,
        top_logprobs=min(top, 20),
        token_ids=token_ids,
        prompt_token_ids=[i for m in raw_input_messages(body, script) for i in m["tokens"]]
        if token_ids
        else [],
    )


def raw_input_messages(body: Mapping[str, Any], script: Script) -> list[JSON]:
    """vLLM's ``input_messages``: each prompt message with its token ids
    (``{"type": "raw_message_tokens", "message", "tokens"}``)."""
    return [
        {
            "type": "raw_message_tokens",
            "message": wire.message_text_of(m),
            "tokens": wire.message_token_ids(m, script.chunk_chars),
        }
        for m in chat_view(body)["messages"]
    ]


def _raw_output_messages(reply: Reply, chunk_chars: int) -> list[JSON]:
    pieces = wire.completion_pieces(reply, chunk_chars)
    return [
        {
            "type": "raw_message_tokens",
            "message": "".join(pieces),
            "tokens": [wire.token_id(p) for p in pieces],
        }
    ]


def usage_json(usage: ResolvedUsage) -> JSON:
    return {
        "input_tokens": usage.prompt_tokens,
        "input_tokens_details": {"cached_tokens": usage.cached_tokens},
        "output_tokens": usage.completion_tokens,
        "output_tokens_details": {"reasoning_tokens": usage.reasoning_tokens},
        "total_tokens": usage.total_tokens,
    }


def _text_part(text: str, logprobs: list[JSON] | None) -> JSON:
    part: JSON = {"type": "output_text", "text": text, "annotations": []}
    if logprobs is not None:
        part["logprobs"] = logprobs
    return part


def _items(reply: Reply, response_id: str, extras: wire.Extras, chunk_chars: int) -> list[JSON]:
    items: list[JSON] = []
    if reply.reasoning:
        items.append(
            {
                "type": "reasoning",
                "id": f"rs_{response_id}",
                "summary": [{"type": "summary_text", "text": reply.reasoning}],
            }
        )
    if reply.text:
        logprobs = (
            [
                wire.logprob_entry(p, extras.top_logprobs)
                for p in wire.pieces(reply.text, chunk_chars)
            ]
            if extras.logprobs
            else None
        )
        items.append(
            {
                "type": "message",
                "id": f"msg_{response_id}",
                "status": "completed",
                "role": "assistant",
                "content": [_text_part(reply.text, logprobs)],
            }
        )
    for call in reply.tool_calls:
        items.append(
            {
                "type": "function_call",
                "id": f"fc_{call.id}",
                "call_id": call.id,
                "name": call.name,
                "arguments": call.arguments,
                "status": "completed",
            }
        )
    return items


def response(
    reply: Reply,
    *,
    response_id: str,
    model: str,
    created: int,
    extras: wire.Extras,
    chunk_chars: int,
    status: str = "completed",
    output: list[JSON] | None = None,
    input_messages: list[JSON] | None = None,
) -> JSON:
    """The ``response`` object; a completed one carries vLLM's ``input_messages`` /
    ``output_messages`` (the prompt's and the answer's token ids) when they were asked
    for (``input_messages``: :func:`raw_input_messages`)."""
    done = status == "completed"
    out = {
        "id": response_id,
        "object": "response",
        "created_at": created,
        "status": status,
        "model": model,
        "output": _items(reply, response_id, extras, chunk_chars) if output is None else output,
        "incomplete_details": None,
        "error": None,
        "usage": usage_json(reply.usage) if done else None,
    }
    if done and extras.token_ids:
        out["input_messages"] = input_messages or []
        out["output_messages"] = _raw_output_messages(reply, chunk_chars)
    return out


def events(
    reply: Reply,
    *,
    response_id: str,
    model: str,
    created: int,
    extras: wire.Extras,
    chunk_chars: int,
    input_messages: list[JSON] | None = None,
) -> list[bytes]:
    """The ``response.*`` events of ``reply``, SSE-encoded, in order."""
    out: list[JSON] = []
    started = response(
        reply,
        response_id=response_id,
        model=model,
        created=created,
        extras=extras,
        chunk_chars=chunk_chars,
        status="in_progress",
        output=[],
    )
    out.append({"type": "response.created", "response": started})
    out.append({"type": "response.in_progress", "response": started})
    for index, item in enumerate(_items(reply, response_id, extras, chunk_chars)):
        kind = item["type"]
        shell = {**item, "arguments": ""} if kind == "function_call" else item
        if kind == "message":
            shell = {**item, "content": [], "status": "in_progress"}
        elif kind == "reasoning":
            shell = {**item, "summary": []}
        out.append({"type": "response.output_item.added", "output_index": index, "item": shell})
        where = {"output_index": index, "item_id": item["id"]}
        if kind == "reasoning":
            for piece in wire.pieces(reply.reasoning or "", chunk_chars):
                out.append(
                    {
                        "type": "response.reasoning_summary_text.delta",
                        **where,
                        "summary_index": 0,
                        "delta": piece,
                    }
                )
        elif kind == "message":
            part = {"content_index": 0}
            out.append(
                {
                    "type": "response.content_part.added",
                    **where,
                    **part,
                    "part": _text_part("", None),
                }
            )
            for piece in wire.pieces(reply.text or "", chunk_chars):
                delta: JSON = {"type": "response.output_text.delta", **where, **part}
                delta["delta"] = piece
                if extras.logprobs:
                    delta["logprobs"] = [wire.logprob_entry(piece, extras.top_logprobs)]
                out.append(delta)
            out.append(
                {"type": "response.output_text.done", **where, **part, "text": reply.text or ""}
            )
            out.append(
                {"type": "response.content_part.done", **where, **part, "part": item["content"][0]}
            )
        else:
            for piece in wire.pieces(item["arguments"], chunk_chars):
                out.append(
                    {"type": "response.function_call_arguments.delta", **where, "delta": piece}
                )
            out.append(
                {
                    "type": "response.function_call_arguments.done",
                    **where,
                    "arguments": item["arguments"],
                }
            )
        out.append({"type": "response.output_item.done", "output_index": index, "item": item})
    final = response(
        reply,
        response_id=response_id,
        model=model,
        created=created,
        extras=extras,
        chunk_chars=chunk_chars,
        input_messages=input_messages,
    )
    out.append({"type": "response.completed", "response": final})
    return [named_event(n, e) for n, e in enumerate(out)]


def named_event(sequence: int, payload: JSON) -> bytes:
    """``event: <type>`` + ``data:`` (the shape of OpenAI's and Anthropic's typed streams)."""
    data = {**payload, "sequence_number": sequence} if sequence >= 0 else payload
    return b"event: %s\ndata: %s\n\n" % (str(payload["type"]).encode(), msgspec.json.encode(data))
