"""A Claude Code JSONL transcript → canonical messages and usage. Pure: no I/O.

The rules are agent-eval's ``readClaudeTranscript`` (facts rollout-v1 §3), applied to
the text ``ClaudeTranscriptCaptured.content`` holds:

- lines split on ``\\n``; blank lines (JS ``trim``), unparseable JSON and non-objects
  are skipped; only ``type`` ``user``/``assistant`` entries whose ``message`` is an
  object are kept, and of those only the entries whose ``isSidechain === true`` equals
  ``include_sidechain`` (default: the main thread).
- ``started_at``/``ended_at``: first and last string ``timestamp`` of the kept entries,
  even those that produce no message. ``model``: the last assistant ``message.model``
  that is a string.
- a user entry resets the merge state. String content → ``{role:"user", content}``.
  Array content, in block order: each ``tool_result`` with a string ``tool_use_id`` →
  ``{role:"tool", tool_call_id, content}`` (content: the string, or its ``text``
  sub-blocks joined by ``\\n``, or ``""``); the ``text`` blocks become one user message
  pushed after that entry's tool messages, only when non-empty.
- an assistant entry: non-empty ``thinking`` → ``reasoning_content``, ``text`` →
  ``content``, ``tool_use`` with a string id → a call with
  ``arguments = JSON.stringify(input ?? {})``; nothing of the three → skipped. New
  message: ``{role, content (or null), reasoning_content?, tool_calls?}``. When its
  ``message.id`` equals the last *pushed* assistant message's (no user entry between),
  it is merged into it: text appended with ``\\n`` (replacing a null content), reasoning
  appended, calls concatenated, a key the merge creates landing last.
- usage: summed once per assistant entry that does not continue a turn
  (``input_tokens``, ``output_tokens``, ``cache_read_input_tokens``,
  ``cache_creation_input_tokens``; a non-number is 0). The merge state moves only when
  a message is pushed, so an empty first block followed by a same-id block counts its
  usage twice, as in agent-eval.

Text accumulates as agent-eval's does (``acc += (acc ? "\\n" : "") + piece``), so a
leading empty text block leaves no separator behind.
"""

from __future__ import annotations

from typing import Any

import msgspec

from arenad.js import js_parse, js_stringify
from arenad.proposer.layout import claude_project_slug  # one rule for capture and join

__all__ = [
    "ClaudeTranscript",
    "ClaudeUsage",
    "claude_project_slug",
    "claude_transcript",
]

ChatMessage = dict[str, Any]

# ECMAScript WhiteSpace + LineTerminator: what ``String.prototype.trim`` removes.
_JS_WHITESPACE = frozenset(
    "\t\n\v\f\r \u00a0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008"
    "\u2009\u200a\u2028\u2029\u202f\u205f\u3000\ufeff"
)


class ClaudeUsage(msgspec.Struct, frozen=True, kw_only=True):
    tokens_in: int | float = 0
    tokens_out: int | float = 0
    cache_read: int | float = 0
    cache_write: int | float = 0


class ClaudeTranscript(msgspec.Struct, frozen=True, kw_only=True):
    messages: list[ChatMessage]
    started_at: str | None
    ended_at: str | None
    model: str | None
    usage: ClaudeUsage


def _is_blank(line: str) -> bool:
    return all(ch in _JS_WHITESPACE for ch in line)


def _entries(text: str, include_sidechain: bool) -> list[dict[str, Any]]:
    kept: list[dict[str, Any]] = []
    for line in text.split("\n"):
        if _is_blank(line):
            continue
        try:
            entry = js_parse(line)
        except ValueError:
            continue
        if not isinstance(entry, dict):
            continue
        if entry.get("type") not in ("user", "assistant"):
            continue
        if not isinstance(entry.get("message"), dict):
            continue
        if (entry.get("isSidechain") is True) != include_sidechain:
            continue
        kept.append(entry)
    return kept


def _append(acc: str, piece: str) -> str:
    return acc + ("\n" if acc else "") + piece


def _block_text(content: object) -> str:
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return ""
    return "\n".join(
        b["text"]
        for b in content
        if isinstance(b, dict) and b.get("type") == "text" and isinstance(b.get("text"), str)
    )


def _usage_number(usage: dict[str, Any], key: str) -> int | float:
    value = usage.get(key)
    if isinstance(value, int | float) and not isinstance(value, bool):
        return value
    return 0


def claude_transcript(text: str, *, include_sidechain: bool = False) -> ClaudeTranscript:
    """Parse one transcript's JSONL text (see the module docstring for every rule)."""
    messages: list[ChatMessage] = []
    started_at: str | None = None
    ended_at: str | None = None
    model: str | None = None
    tokens_in: int | float = 0
    tokens_out: int | float = 0
    cache_read: int | float = 0
    cache_write: int | float = 0
    last_api_id: str | None = None
    last_index = -1

    for entry in _entries(text, include_sidechain):
        message: dict[str, Any] = entry["message"]
        timestamp = entry.get("timestamp")
        if isinstance(timestamp, str):
            if started_at is None:
                started_at = timestamp
            ended_at = timestamp

        if entry["type"] == "user":
            last_api_id = None
            last_index = -1
            content = message.get("content")
            if isinstance(content, str):
                messages.append({"role": "user", "content": content})
                continue
            if not isinstance(content, list):
                continue
            user_text = ""
            for block in content:
                if not isinstance(block, dict):
                    continue
                kind = block.get("type")
                if kind == "tool_result" and isinstance(block.get("tool_use_id"), str):
                    messages.append(
                        {
                            "role": "tool",
                            "tool_call_id": block["tool_use_id"],
                            "content": _block_text(block.get("content")),
                        }
                    )
                elif kind == "text" and isinstance(block.get("text"), str):
                    user_text = _append(user_text, block["text"])
            if user_text:
                messages.append({"role": "user", "content": user_text})
            continue

        # assistant
        if isinstance(message.get("model"), str):
            model = message["model"]
        api_id = message.get("id") if isinstance(message.get("id"), str) else None
        continues_turn = api_id is not None and api_id == last_api_id and last_index >= 0
        usage = message.get("usage")
        if isinstance(usage, dict) and not continues_turn:
            tokens_in += _usage_number(usage, "input_tokens")
            tokens_out += _usage_number(usage, "output_tokens")
            cache_read += _usage_number(usage, "cache_read_input_tokens")
            cache_write += _usage_number(usage, "cache_creation_input_tokens")
        content = message.get("content")
        if not isinstance(content, list):
            continue
        reasoning = ""
        text_acc = ""
        calls: list[dict[str, Any]] = []
        for block in content:
            if not isinstance(block, dict):
                continue
            kind = block.get("type")
            thinking = block.get("thinking")
            if kind == "thinking" and isinstance(thinking, str) and thinking:
                reasoning = _append(reasoning, thinking)
            elif kind == "text" and isinstance(block.get("text"), str):
                text_acc = _append(text_acc, block["text"])
            elif kind == "tool_use" and isinstance(block.get("id"), str):
                name = block.get("name")
                arguments = block.get("input")
                calls.append(
                    {
                        "id": block["id"],
                        "type": "function",
                        "function": {
                            "name": name if isinstance(name, str) else "unknown",
                            "arguments": js_stringify({} if arguments is None else arguments),
                        },
                    }
                )
        if not reasoning and not text_acc and not calls:
            continue
        if continues_turn:
            prev = messages[last_index]
            if text_acc:
                prev["content"] = (
                    text_acc if prev["content"] is None else f"{prev['content']}\n{text_acc}"
                )
            if reasoning:
                earlier = prev.get("reasoning_content")
                prev["reasoning_content"] = (
                    reasoning if earlier is None else f"{earlier}\n{reasoning}"
                )
            if calls:
                prev["tool_calls"] = [*prev.get("tool_calls", []), *calls]
            continue
        new: ChatMessage = {"role": "assistant", "content": text_acc if text_acc else None}
        if reasoning:
            new["reasoning_content"] = reasoning
        if calls:
            new["tool_calls"] = calls
        messages.append(new)
        last_api_id = api_id
        last_index = len(messages) - 1

    return ClaudeTranscript(
        messages=messages,
        started_at=started_at,
        ended_at=ended_at,
        model=model,
        usage=ClaudeUsage(
            tokens_in=tokens_in,
            tokens_out=tokens_out,
            cache_read=cache_read,
            cache_write=cache_write,
        ),
    )
