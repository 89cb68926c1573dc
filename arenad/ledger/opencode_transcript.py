"""Captured opencode rows → canonical chat-with-tools messages. Pure: no I/O.

The rules are agent-eval's direct-SQL ``readOpencodeSessionMessages`` (facts
rollout-v1 §4), applied to the rows ``arenad.recovery.opencode_store`` captured
(``message.data`` / ``part.data`` JSON texts, verbatim):

- messages in (time_created, id) order; each one's parts in id order. A message whose
  data is not a JSON object is skipped; a part likewise, its message kept.
- ``role:"user"`` → ``{role, content}``: the ``text`` parts with string text joined by
  ``\\n``, pushed **even when empty**.
- ``role:"assistant"`` is cut into steps at every ``step-start`` (parts before the first
  one form an implicit step); ``step-finish``, ``snapshot`` and ``patch`` parts are
  dropped. opencode ≥1.18 writes one assistant message per step, older stores one
  message spanning several: both come out the same. Per step:
  ``{role:"assistant", content, reasoning_content?, tool_calls?}`` with content the
  ``text`` parts (string text, empty strings included) joined by ``\\n`` or null when
  that is empty, reasoning the non-empty ``reasoning`` texts joined by ``\\n``, one call
  per ``tool`` part whose ``callID`` is a string
  (``{id, type:"function", function:{name, arguments: JSON.stringify(state.input ?? {})}}``);
  a step with none of the three is skipped. Then per tool part
  ``{role:"tool", tool_call_id, name, content}`` with content ``state.output`` if a
  string, ``""`` if null/absent, else its JSON. ``state.status``/``error`` are ignored.
- other roles are skipped.

Messages are plain dicts in exactly that key order (ledger bytes are compared).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import msgspec

from arenad.ledger.js import js_parse, js_stringify
from events.capture import AgentSessionCaptured, MessageRow, PartRow

__all__ = [
    "ChatMessage",
    "OpencodeSessionInfo",
    "capture_chat_messages",
    "opencode_chat_messages",
    "opencode_session_info",
]

ChatMessage = dict[str, Any]

_DROPPED_PART_TYPES = frozenset({"step-finish", "snapshot", "patch"})


def _object_or_none(text: str) -> dict[str, Any] | None:
    try:
        value = js_parse(text)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _js_prop(value: object, key: str) -> Any:
    """``value?.[key]`` for a parsed JSON value (only objects have JSON properties)."""
    return value.get(key) if isinstance(value, dict) else None


def _tool_name(part: dict[str, Any]) -> Any:
    # ``part.tool ?? "unknown"``: a non-string name is kept as it is, like JS does.
    name = part.get("tool")
    return "unknown" if name is None else name


def _tool_output(output: object) -> str:
    if isinstance(output, str):
        return output
    if output is None:
        return ""
    return js_stringify(output)


def _step_messages(step: list[dict[str, Any]]) -> list[ChatMessage]:
    reasoning = "\n".join(
        p["text"]
        for p in step
        if p.get("type") == "reasoning" and isinstance(p.get("text"), str) and p["text"]
    )
    text = "\n".join(
        p["text"] for p in step if p.get("type") == "text" and isinstance(p.get("text"), str)
    )
    tool_parts = [p for p in step if p.get("type") == "tool" and isinstance(p.get("callID"), str)]
    if not reasoning and not text and not tool_parts:
        return []
    assistant: ChatMessage = {"role": "assistant", "content": text if text else None}
    if reasoning:
        assistant["reasoning_content"] = reasoning
    if tool_parts:
        calls = []
        for p in tool_parts:
            arguments = _js_prop(p.get("state"), "input")
            calls.append(
                {
                    "id": p["callID"],
                    "type": "function",
                    "function": {
                        "name": _tool_name(p),
                        "arguments": js_stringify({} if arguments is None else arguments),
                    },
                }
            )
        assistant["tool_calls"] = calls
    out = [assistant]
    for p in tool_parts:
        out.append(
            {
                "role": "tool",
                "tool_call_id": p["callID"],
                "name": _tool_name(p),
                "content": _tool_output(_js_prop(p.get("state"), "output")),
            }
        )
    return out


def _assistant_messages(parts: list[dict[str, Any]]) -> list[ChatMessage]:
    steps: list[list[dict[str, Any]]] = []
    current: list[dict[str, Any]] = []
    for part in parts:
        kind = part.get("type")
        if kind == "step-start":
            if current:
                steps.append(current)
            current = []
        elif kind not in _DROPPED_PART_TYPES:
            current.append(part)
    if current:
        steps.append(current)
    out: list[ChatMessage] = []
    for step in steps:
        out.extend(_step_messages(step))
    return out


def opencode_chat_messages(
    messages: Iterable[MessageRow], parts: Iterable[PartRow]
) -> list[ChatMessage]:
    """One session's captured rows as canonical messages (see the module docstring)."""
    by_message: dict[str, list[PartRow]] = {}
    for part in parts:
        by_message.setdefault(part.message_id, []).append(part)
    out: list[ChatMessage] = []
    for row in sorted(messages, key=lambda m: (m.time_created, m.id)):
        data = _object_or_none(row.data)
        if data is None:
            continue
        role = data.get("role")
        if role != "user" and role != "assistant":
            continue
        parsed: list[dict[str, Any]] = []
        for part in sorted(by_message.get(row.id, ()), key=lambda p: p.id):
            value = _object_or_none(part.data)
            if value is not None:
                parsed.append(value)
        if role == "user":
            content = "\n".join(
                p["text"]
                for p in parsed
                if p.get("type") == "text" and isinstance(p.get("text"), str)
            )
            out.append({"role": "user", "content": content})
        else:
            out.extend(_assistant_messages(parsed))
    return out


def capture_chat_messages(capture: AgentSessionCaptured) -> list[ChatMessage]:
    """``opencode_chat_messages`` of one captured session."""
    return opencode_chat_messages(capture.messages, capture.parts)


class OpencodeSessionInfo(msgspec.Struct, frozen=True, kw_only=True):
    """The session-row fields a ledger line uses (agent-eval's ``OpencodeSessionRow``).

    ``model_id``/``provider_id`` come from the JSON ``session.model`` object (``None``
    when absent or not an object); numbers are ``Number(col ?? 0)``, so a store without
    the 1.15.0 usage columns reads 0 here: use ``arenad.recovery.opencode_spend`` for
    spend, which falls back to the step-finish parts.
    """

    id: str
    parent_id: str | None
    directory: str
    agent: str | None
    model_id: str | None
    provider_id: str | None
    time_created: int | float
    time_updated: int | float


def _number(value: object) -> int | float:
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int | float):
        return value
    if value is None:
        return 0
    try:
        return float(str(value))
    except ValueError:
        return float("nan")


def _model_field(model: dict[str, Any] | None, key: str) -> str | None:
    value = model.get(key) if model is not None else None
    return value if isinstance(value, str) else None


def opencode_session_info(row: dict[str, Any]) -> OpencodeSessionInfo:
    """Read the fields of one captured ``session`` row (``AgentSessionCaptured.row``)."""
    raw_model = row.get("model")
    model = _object_or_none(raw_model) if isinstance(raw_model, str) and raw_model else None
    parent = row.get("parent_id")
    agent = row.get("agent")
    return OpencodeSessionInfo(
        id=str(row.get("id")),
        parent_id=None if parent is None else str(parent),
        directory=str(row.get("directory")),
        agent=None if agent is None else str(agent),
        model_id=_model_field(model, "id"),
        provider_id=_model_field(model, "providerID"),
        time_created=_number(row.get("time_created")),
        time_updated=_number(row.get("time_updated")),
    )
