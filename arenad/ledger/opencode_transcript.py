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
from operator import attrgetter
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


class _Part(msgspec.Struct):
    """The keys of a part's data the rules read (others are skipped, not built)."""

    type: Any = None
    text: Any = None
    callID: Any = None  # opencode's key
    tool: Any = None
    state: Any = None


class _MessageData(msgspec.Struct):
    role: Any = None


_decode_part = msgspec.json.Decoder(_Part).decode
_decode_message = msgspec.json.Decoder(_MessageData).decode


def _object_or_none(text: str) -> dict[str, Any] | None:
    try:
        value = js_parse(text)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _part(text: str) -> _Part | None:
    """A part's data, or None when it is not a JSON object (the part is skipped).

    msgspec reads the keys the rules use straight into a struct (the last of duplicate
    keys wins, as in JSON.parse); a text it refuses — not an object, not JSON, or a
    number JSON.parse reads as Infinity — is read again by ``js_parse``, which decides.
    """
    try:
        return _decode_part(text)
    except (msgspec.DecodeError, RecursionError):
        pass
    value = _object_or_none(text)
    if value is None:
        return None
    get = value.get
    return _Part(
        type=get("type"),
        text=get("text"),
        callID=get("callID"),
        tool=get("tool"),
        state=get("state"),
    )


def _role(text: str) -> Any:
    """A message's ``role``; None when its data is not a JSON object (it is skipped)."""
    try:
        return _decode_message(text).role
    except (msgspec.DecodeError, RecursionError):
        pass
    value = _object_or_none(text)
    return value.get("role") if value is not None else None


def _tool_name(part: _Part) -> Any:
    # ``part.tool ?? "unknown"``: a non-string name is kept as it is, like JS does.
    name = part.tool
    return "unknown" if name is None else name


def _tool_output(output: object) -> str:
    if isinstance(output, str):
        return output
    if output is None:
        return ""
    return js_stringify(output)


def _state_prop(part: _Part, key: str) -> Any:
    """``part.state?.[key]`` (only an object has JSON properties)."""
    state = part.state
    return state.get(key) if type(state) is dict else None


def _emit_step(
    reasoning: list[str], texts: list[str], tools: list[_Part], out: list[ChatMessage]
) -> None:
    """One step's assistant message, then its tool results; nothing for an empty step."""
    text = "\n".join(texts)
    joined_reasoning = "\n".join(reasoning)
    if not joined_reasoning and not text and not tools:
        return
    assistant: ChatMessage = {"role": "assistant", "content": text if text else None}
    if joined_reasoning:
        assistant["reasoning_content"] = joined_reasoning
    if tools:
        calls = []
        for p in tools:
            arguments = _state_prop(p, "input")
            calls.append(
                {
                    "id": p.callID,
                    "type": "function",
                    "function": {
                        "name": _tool_name(p),
                        "arguments": js_stringify({} if arguments is None else arguments),
                    },
                }
            )
        assistant["tool_calls"] = calls
    out.append(assistant)
    for p in tools:
        out.append(
            {
                "role": "tool",
                "tool_call_id": p.callID,
                "name": _tool_name(p),
                "content": _tool_output(_state_prop(p, "output")),
            }
        )


def _assistant_messages(parts: list[_Part], out: list[ChatMessage]) -> None:
    # One pass: a step-start closes the step before it (parts before the first one form
    # an implicit step); dropped part types take no part in any step.
    reasoning: list[str] = []
    texts: list[str] = []
    tools: list[_Part] = []
    for part in parts:
        kind = part.type
        if kind == "text":
            if type(part.text) is str:
                texts.append(part.text)
        elif kind == "tool":
            if type(part.callID) is str:
                tools.append(part)
        elif kind == "reasoning":
            if type(part.text) is str and part.text:
                reasoning.append(part.text)
        elif kind == "step-start" and (reasoning or texts or tools):
            _emit_step(reasoning, texts, tools, out)
            reasoning, texts, tools = [], [], []
    if reasoning or texts or tools:
        _emit_step(reasoning, texts, tools, out)


_BY_TIME_THEN_ID = attrgetter("time_created", "id")
_BY_ID = attrgetter("id")


def opencode_chat_messages(
    messages: Iterable[MessageRow], parts: Iterable[PartRow]
) -> list[ChatMessage]:
    """One session's captured rows as canonical messages (see the module docstring)."""
    by_message: dict[str, list[PartRow]] = {}
    for part_row in parts:
        rows = by_message.get(part_row.message_id)
        if rows is None:
            by_message[part_row.message_id] = [part_row]
        else:
            rows.append(part_row)
    out: list[ChatMessage] = []
    for row in sorted(messages, key=_BY_TIME_THEN_ID):
        role = _role(row.data)
        if role != "user" and role != "assistant":
            continue
        rows = by_message.get(row.id)
        parsed: list[_Part] = []
        if rows:
            if len(rows) > 1:
                rows.sort(key=_BY_ID)
            for part_row in rows:
                part = _part(part_row.data)
                if part is not None:
                    parsed.append(part)
        if role == "user":
            texts = [p.text for p in parsed if p.type == "text" and type(p.text) is str]
            out.append({"role": "user", "content": "\n".join(texts)})
        else:
            _assistant_messages(parsed, out)
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
