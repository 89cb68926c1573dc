"""The OpenAI wire shapes the scripted model sends (pure builders; no I/O, no clock).

``created`` (epoch seconds) and ids are passed in, so the same reply always yields the same
bytes for the same inputs.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import msgspec

from arenad.scripted_model.script import Reply, ResolvedUsage, Script

SSE_DONE = b"data: [DONE]\n\n"

JSON = dict[str, Any]


def usage_json(usage: ResolvedUsage) -> JSON:
    return {
        "prompt_tokens": usage.prompt_tokens,
        "completion_tokens": usage.completion_tokens,
        "total_tokens": usage.total_tokens,
        "prompt_tokens_details": {"cached_tokens": usage.cached_tokens},
        "completion_tokens_details": {"reasoning_tokens": usage.reasoning_tokens},
    }


def pieces(text: str, size: int) -> Iterator[str]:
    """``text`` cut into consecutive pieces of at most ``size`` characters (none if empty)."""
    for start in range(0, len(text), size):
        yield text[start : start + size]


def _chunk(
    completion_id: str,
    model: str,
    created: int,
    delta: JSON,
    finish_reason: str | None = None,
) -> JSON:
    return {
        "id": completion_id,
        "object": "chat.completion.chunk",
        "created": created,
        "model": model,
        "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}],
    }


def stream_chunks(
    reply: Reply,
    *,
    completion_id: str,
    model: str,
    created: int,
    chunk_chars: int,
    include_usage: bool,
) -> list[JSON]:
    """The chat.completion.chunk objects for ``reply``, in order (without ``[DONE]``).

    Order: a role delta; ``reasoning_content`` pieces; ``content`` pieces; per tool call one
    delta with its index, id, type and name (arguments ``""``) then its argument pieces; a
    chunk with the finish_reason; then, if ``include_usage`` (opencode asks for it), a chunk
    with ``choices: []`` and the usage. Without ``include_usage`` the usage rides on the
    finish chunk instead.
    """
    chunks = [_chunk(completion_id, model, created, {"role": "assistant"})]
    for piece in pieces(reply.reasoning or "", chunk_chars):
        chunks.append(_chunk(completion_id, model, created, {"reasoning_content": piece}))
    for piece in pieces(reply.text or "", chunk_chars):
        chunks.append(_chunk(completion_id, model, created, {"content": piece}))
    for index, call in enumerate(reply.tool_calls):
        head = {
            "index": index,
            "id": call.id,
            "type": "function",
            "function": {"name": call.name, "arguments": ""},
        }
        chunks.append(_chunk(completion_id, model, created, {"tool_calls": [head]}))
        for piece in pieces(call.arguments, chunk_chars):
            part = {"index": index, "function": {"arguments": piece}}
            chunks.append(_chunk(completion_id, model, created, {"tool_calls": [part]}))
    finish = _chunk(completion_id, model, created, {}, reply.finish_reason)
    usage = usage_json(reply.usage)
    if include_usage:
        chunks.append(finish)
        chunks.append(
            {
                "id": completion_id,
                "object": "chat.completion.chunk",
                "created": created,
                "model": model,
                "choices": [],
                "usage": usage,
            }
        )
    else:
        finish["usage"] = usage
        chunks.append(finish)
    return chunks


def sse_event(payload: JSON) -> bytes:
    return b"data: " + msgspec.json.encode(payload) + b"\n\n"


def completion(reply: Reply, *, completion_id: str, model: str, created: int) -> JSON:
    """A non-streaming chat.completion object for ``reply``."""
    message: JSON = {"role": "assistant", "content": reply.text}
    if reply.reasoning:
        message["reasoning_content"] = reply.reasoning
    if reply.tool_calls:
        message["tool_calls"] = [
            {
                "id": call.id,
                "type": "function",
                "function": {"name": call.name, "arguments": call.arguments},
            }
            for call in reply.tool_calls
        ]
    return {
        "id": completion_id,
        "object": "chat.completion",
        "created": created,
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": message,
                "logprobs": None,
                "finish_reason": reply.finish_reason,
            }
        ],
        "usage": usage_json(reply.usage),
    }


def model_object(model_id: str, created: int) -> JSON:
    return {"id": model_id, "object": "model", "created": created, "owned_by": "arenad-scripted"}


def models_list(script: Script, created: int) -> JSON:
    return {"object": "list", "data": [model_object(m, created) for m in script.model_ids]}


def error_type(status: int) -> str:
    """The OpenAI error ``type`` a real provider sends with ``status``. It matters: opencode
    retries any error whose body says ``server_error`` (even a 401), so a 4xx that says so
    would cost ~70 s of retries instead of giving up at once as it does with a provider."""
    if status in (401, 403):
        return "authentication_error" if status == 401 else "permission_error"
    if status == 429:
        return "rate_limit_error"
    if status >= 500:
        return "server_error"
    return "invalid_request_error"


def error_body(message: str, type_: str, code: str | None = None) -> JSON:
    return {"error": {"message": message, "type": type_, "param": None, "code": code}}
