"""The OpenAI wire shapes the scripted model sends (pure builders; no I/O, no clock).

``created`` (epoch seconds) and ids are passed in, so the same reply always yields the same
bytes for the same inputs.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator, Mapping
from typing import Any

import msgspec

from arenad.scripted_model.script import Reply, ResolvedUsage, Script

SSE_DONE = b"data: [DONE]\n\n"

JSON = dict[str, Any]


def usage_json(usage: ResolvedUsage) -> JSON:
    prompt_details: JSON = {"cached_tokens": usage.cached_tokens}
    if usage.cache_write_tokens:
        prompt_details["cache_write_tokens"] = usage.cache_write_tokens
    return {
        "prompt_tokens": usage.prompt_tokens,
        "completion_tokens": usage.completion_tokens,
        "total_tokens": usage.total_tokens,
        "prompt_tokens_details": prompt_details,
        "completion_tokens_details": {"reasoning_tokens": usage.reasoning_tokens},
    }


class Extras(msgspec.Struct, frozen=True, kw_only=True):
    """What an answer carries besides the text: OpenAI's chosen-token ``logprobs`` (with
    ``top_logprobs`` alternatives) and vLLM's ``prompt_token_ids`` / ``token_ids``. Tokens
    are the streamed pieces; their ids and logprobs are a pure function of the piece, so a
    test knows what to expect."""

    logprobs: bool = False
    top_logprobs: int = 0
    token_ids: bool = False
    prompt_token_ids: list[int] = []


def token_id(piece: str) -> int:
    return zlib.crc32(piece.encode("utf-8")) % 100_000


def token_logprob(piece: str) -> float:
    return -round((token_id(piece) % 1000) / 1000, 3)


def extras_for(body: Mapping[str, Any], script: Script) -> Extras:
    """What the request asked for (``logprobs``, ``top_logprobs``, vLLM's
    ``return_token_ids``), or the script's ``logprobs`` / ``token_ids`` always."""
    top = body.get("top_logprobs")
    top = top if isinstance(top, int) and not isinstance(top, bool) and top > 0 else 0
    token_ids = body.get("return_token_ids") is True or script.token_ids
    prompt: list[int] = []
    if token_ids:
        for message in body.get("messages") or []:
            prompt += message_token_ids(message, script.chunk_chars)
    return Extras(
        logprobs=body.get("logprobs") is True or script.logprobs,
        top_logprobs=min(top, 20),
        token_ids=token_ids,
        prompt_token_ids=prompt,
    )


def message_text_of(message: Any) -> str:
    """A chat message's content as the text its prompt tokens are cut from."""
    content = message.get("content") if isinstance(message, dict) else None
    return content if isinstance(content, str) else msgspec.json.encode(content).decode()


def message_token_ids(message: Any, chunk_chars: int) -> list[int]:
    """The prompt token ids of one chat message: its text's pieces (pure)."""
    return [token_id(p) for p in pieces(message_text_of(message), chunk_chars)]


def completion_pieces(reply: Reply, chunk_chars: int) -> list[str]:
    """The tokens an answer is made of: its reasoning, text and tool arguments, in pieces."""
    texts = [reply.reasoning or "", reply.text or ""] + [c.arguments for c in reply.tool_calls]
    return [p for text in texts for p in pieces(text, chunk_chars)]


def logprob_entry(piece: str, top: int) -> JSON:
    entry: JSON = {
        "token": piece,
        "logprob": token_logprob(piece),
        "bytes": list(piece.encode("utf-8")),
        "top_logprobs": [],
    }
    for k in range(top):
        alt = piece if k == 0 else f"{piece}~{k}"
        entry["top_logprobs"].append(
            {"token": alt, "logprob": token_logprob(piece) - k, "bytes": list(alt.encode())}
        )
    return entry


def _tokens(choice: JSON, piece_list: list[str], extras: Extras) -> None:
    if extras.logprobs:
        choice["logprobs"] = {
            "content": [logprob_entry(p, extras.top_logprobs) for p in piece_list]
        }
    if extras.token_ids:
        choice["token_ids"] = [token_id(p) for p in piece_list]


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
    extras: Extras | None = None,
) -> list[JSON]:
    """The chat.completion.chunk objects for ``reply``, in order (without ``[DONE]``).

    Order: a role delta; ``reasoning_content`` pieces; ``content`` pieces; per tool call one
    delta with its index, id, type and name (arguments ``""``) then its argument pieces; a
    chunk with the finish_reason; then, if ``include_usage`` (opencode asks for it), a chunk
    with ``choices: []`` and the usage. Without ``include_usage`` the usage rides on the
    finish chunk instead.
    """
    chunks = [_chunk(completion_id, model, created, {"role": "assistant"})]
    extras = extras or Extras()
    if extras.token_ids:
        chunks[0]["prompt_token_ids"] = extras.prompt_token_ids

    def tokened(chunk: JSON, piece: str) -> JSON:
        _tokens(chunk["choices"][0], [piece], extras)
        return chunk

    for piece in pieces(reply.reasoning or "", chunk_chars):
        chunk = _chunk(completion_id, model, created, {"reasoning_content": piece})
        chunks.append(tokened(chunk, piece))
    for piece in pieces(reply.text or "", chunk_chars):
        chunks.append(tokened(_chunk(completion_id, model, created, {"content": piece}), piece))
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
            chunk = _chunk(completion_id, model, created, {"tool_calls": [part]})
            chunks.append(tokened(chunk, piece))
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


def completion(
    reply: Reply,
    *,
    completion_id: str,
    model: str,
    created: int,
    extras: Extras | None = None,
    chunk_chars: int = 24,
) -> JSON:
    """A non-streaming chat.completion object for ``reply`` (its tokens: the pieces it
    would have been streamed in)."""
    extras = extras or Extras()
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
    choice: JSON = {
        "index": 0,
        "message": message,
        "logprobs": None,
        "finish_reason": reply.finish_reason,
    }
    _tokens(choice, completion_pieces(reply, chunk_chars), extras)
    out: JSON = {
        "id": completion_id,
        "object": "chat.completion",
        "created": created,
        "model": model,
        "choices": [choice],
        "usage": usage_json(reply.usage),
    }
    if extras.token_ids:
        out["prompt_token_ids"] = extras.prompt_token_ids
    return out


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
