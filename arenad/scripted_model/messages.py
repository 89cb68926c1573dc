"""Anthropic's messages wire (``POST /v1/messages``) for the scripted model (pure builders).

The request is read as a chat history (:func:`chat_view`: the top-level ``system`` first,
then the messages as they are), so the script picks the answer as for chat completions. The
answer is one ``message``, or its events (``message_start``, per content block
``content_block_start`` / ``_delta`` / ``_stop``, ``message_delta`` with the stop reason and
the output count, ``message_stop``). Usage is Anthropic's: ``input_tokens`` leaves out the
cache (``cache_read_input_tokens`` = the script's ``cached_tokens``,
``cache_creation_input_tokens`` = its ``cache_write_tokens``); ``output_tokens`` includes
reasoning. Errors are ``{"type": "error", "error": {type, message}}``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgspec

from arenad.provider_errors import anthropic_error_type
from arenad.scripted_model import wire
from arenad.scripted_model.responses import named_event
from arenad.scripted_model.script import Reply, ResolvedUsage

JSON = dict[str, Any]


def chat_view(body: Mapping[str, Any]) -> JSON:
    messages: list[Any] = []
    if body.get("system"):
        messages.append({"role": "system", "content": body["system"]})
    given = body.get("messages")
    messages += given if isinstance(given, list) else []
    return {"model": body.get("model"), "messages": messages}


def usage_json(usage: ResolvedUsage, output_tokens: int | None = None) -> JSON:
    cached = usage.cached_tokens + usage.cache_write_tokens
    return {
        "input_tokens": max(usage.prompt_tokens - cached, 0),
        "cache_creation_input_tokens": usage.cache_write_tokens,
        "cache_read_input_tokens": usage.cached_tokens,
        "output_tokens": usage.completion_tokens if output_tokens is None else output_tokens,
    }


def stop_reason(reply: Reply) -> str:
    return "tool_use" if reply.tool_calls else "end_turn"


def _blocks(reply: Reply) -> list[JSON]:
    blocks: list[JSON] = []
    if reply.reasoning:
        blocks.append({"type": "thinking", "thinking": reply.reasoning, "signature": ""})
    if reply.text:
        blocks.append({"type": "text", "text": reply.text})
    for call in reply.tool_calls:
        arguments = msgspec.json.decode(call.arguments)
        blocks.append({"type": "tool_use", "id": call.id, "name": call.name, "input": arguments})
    return blocks


def message(reply: Reply, *, message_id: str, model: str) -> JSON:
    return {
        "id": message_id,
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": _blocks(reply),
        "stop_reason": stop_reason(reply),
        "stop_sequence": None,
        "usage": usage_json(reply.usage),
    }


def events(reply: Reply, *, message_id: str, model: str, chunk_chars: int) -> list[bytes]:
    """The events of ``reply``, SSE-encoded, in order."""
    start = message(reply, message_id=message_id, model=model)
    start.update(content=[], stop_reason=None, usage=usage_json(reply.usage, output_tokens=1))
    out: list[JSON] = [{"type": "message_start", "message": start}, {"type": "ping"}]
    for index, block in enumerate(_blocks(reply)):
        kind = block["type"]
        if kind == "tool_use":
            shell: JSON = {**block, "input": {}}
            text = msgspec.json.encode(block["input"]).decode()
            delta_kind, key = "input_json_delta", "partial_json"
        else:  # "thinking" / "text": the block's text streams as <kind>_delta pieces
            key = kind
            shell, text, delta_kind = {**block, key: ""}, block[key], f"{kind}_delta"
        out.append({"type": "content_block_start", "index": index, "content_block": shell})
        for piece in wire.pieces(text, chunk_chars):
            out.append(
                {
                    "type": "content_block_delta",
                    "index": index,
                    "delta": {"type": delta_kind, key: piece},
                }
            )
        out.append({"type": "content_block_stop", "index": index})
    out.append(
        {
            "type": "message_delta",
            "delta": {"stop_reason": stop_reason(reply), "stop_sequence": None},
            "usage": {"output_tokens": reply.usage.completion_tokens},
        }
    )
    out.append({"type": "message_stop"})
    return [named_event(-1, e) for e in out]


def error_body(status: int, message_text: str) -> JSON:
    """Anthropic's error shape, typed by the table the gateway uses too."""
    kind = anthropic_error_type(status)
    return {"type": "error", "error": {"type": kind, "message": message_text}}
