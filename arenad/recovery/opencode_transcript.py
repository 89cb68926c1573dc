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

A tool part whose ``tool`` is neither a string nor null (hostile or broken store) is kept
as it is, like JS, by ``opencode_chat_messages``; a ledger line cannot carry it (the
schema's ``function.name`` is a string), so ``ledger_transcript`` turns that session into
a labeled gap instead of failing the whole projection.
A tool input or output nested more than ``MAX_NESTING`` deep is refused
(``NestedTooDeeply``; JS would write it, Python's writers would run out of stack) and
becomes such a gap too.

Messages are plain dicts in exactly that key order (ledger bytes are compared).

Each session is folded once, when it is captured (``session_transcript``): the capture
keeps the messages' JSON bytes under the number of the rules that folded them
(``TRANSCRIPT_RULES``), and ``ledger_transcript`` hands those bytes to the ledger while
the rules are the same. A capture without them (recorded before they were kept), or
folded under other rules, is folded again from its rows, so the lines are the same
either way.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from operator import attrgetter
from typing import Any, Final

import msgspec

from arenad.chat import EMPTY_ENCODED, ChatMessages, CheckedChatMessages
from arenad.js import js_parse, js_stringify
from events.capture import AgentSessionCaptured, MessageRow, PartRow, SessionTranscript

__all__ = [
    "MAX_NESTING",
    "TRANSCRIPT_RULES",
    "ChatMessage",
    "NestedTooDeeply",
    "OpencodeSessionInfo",
    "capture_chat_messages",
    "ledger_transcript",
    "opencode_chat_messages",
    "opencode_session_info",
    "session_time_created",
    "session_transcript",
]

# The number of the rules above. Bump it with any change to what some rows fold to:
# captures keep the messages folded under the number of their day, and a capture folded
# under another number is folded again (tests/recovery/test_opencode_transcript.py holds
# a digest of the folds of its sessions under each number, to catch a forgotten bump).
TRANSCRIPT_RULES: Final = 1

# How deep a tool's input or output may nest and still be written (real ones nest a few
# levels; Python's writers recurse, about two frames a level, under a 1 000-frame limit).
MAX_NESTING: Final = 100

ChatMessage = dict[str, Any]


class _ToolState(msgspec.Struct):
    input: Any = None
    output: Any = None


class _Part(msgspec.Struct):
    """The keys of a part's data the rules read (others are skipped, not built). A
    ``state`` that is not an object has no ``input``/``output`` (JS: undefined): None."""

    type: Any = None
    text: Any = None
    callID: Any = None  # opencode's key
    tool: Any = None
    state: _ToolState | None = None


class _MessageData(msgspec.Struct):
    role: Any = None


_decode_part = msgspec.json.Decoder(_Part).decode
_decode_message = msgspec.json.Decoder(_MessageData).decode
_encode_json = msgspec.json.Encoder().encode
_DECODE_ERRORS = (msgspec.DecodeError, RecursionError)


def _object_or_none(text: str) -> dict[str, Any] | None:
    try:
        value = js_parse(text)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _part_read_again(text: str) -> _Part | None:
    """A part's data msgspec refused, read by ``js_parse``, which decides: None when it
    is not a JSON object (the part is skipped).

    msgspec reads the keys the rules use straight into a struct (the last of duplicate
    keys wins, as in JSON.parse) and refuses the rest — not an object, not JSON, a
    ``state`` that is not an object, or a number JSON.parse reads as Infinity.
    """
    value = _object_or_none(text)
    if value is None:
        return None
    get = value.get
    state = get("state")
    return _Part(
        type=get("type"),
        text=get("text"),
        callID=get("callID"),
        tool=get("tool"),
        state=(
            _ToolState(input=state.get("input"), output=state.get("output"))
            if isinstance(state, dict)
            else None
        ),
    )


def _role(text: str) -> Any:
    """A message's ``role``; None when its data is not a JSON object (it is skipped)."""
    try:
        return _decode_message(text).role
    except _DECODE_ERRORS:
        pass
    value = _object_or_none(text)
    return value.get("role") if value is not None else None


class NestedTooDeeply(ValueError):
    """A tool part's input or output nested deeper than ``MAX_NESTING``: not written."""


def _nested_deeper_than(value: Any, limit: int) -> bool:
    """Whether ``value`` holds containers more than ``limit`` deep (no recursion)."""
    level: list[Any] = [value]
    for _ in range(limit):
        below: list[Any] = []
        for item in level:
            if type(item) is dict:
                below.extend(item.values())
            elif type(item) is list:
                below.extend(item)
        if not below:
            return False
        level = below
    return any(type(item) is dict or type(item) is list for item in level)


def _json_text(value: Any) -> str:
    """``JSON.stringify(value)`` of a tool's input or output. JS writes any depth, but
    the Python writers recurse: past ``MAX_NESTING`` (only a hostile store nests so deep)
    the session is refused, not left to how deep the caller's stack happens to be."""
    if _nested_deeper_than(value, MAX_NESTING):
        raise NestedTooDeeply
    return js_stringify(value)


def _tool_output(state: _ToolState | None) -> str:
    output = state.output if state is not None else None
    if type(output) is str:
        return output
    if output is None:
        return ""
    return _json_text(output)


def _arguments(state: _ToolState | None) -> str:
    """``JSON.stringify(state.input ?? {})``; the usual input — an object of strings under
    names that are not array indices — straight through msgspec, which writes it alike."""
    value = state.input if state is not None else None
    if value is None:
        return "{}"
    if type(value) is dict:
        for key, item in value.items():
            if type(item) is not str or "0" <= key < ":":
                return _json_text(value)
        try:
            return str(_encode_json(value), "utf-8")
        except UnicodeEncodeError:  # a lone surrogate: the JS escape
            return js_stringify(value)
    return _json_text(value)


def _joined(texts: list[str]) -> str:
    return texts[0] if len(texts) == 1 else "\n".join(texts)


def _emit_step(
    reasoning: list[str], texts: list[str], tools: list[_Part], out: list[ChatMessage]
) -> bool:
    """One step's assistant message, then its tool results; nothing for an empty step.
    False when a tool name is not a str (the transcript cannot be vouched for)."""
    text = _joined(texts) if texts else ""
    if not tools:
        if text:
            assistant: ChatMessage = {"role": "assistant", "content": text}
        elif reasoning:
            assistant = {"role": "assistant", "content": None}
        else:
            return True
        if reasoning:
            assistant["reasoning_content"] = _joined(reasoning)
        out.append(assistant)
        return True
    assistant = {"role": "assistant", "content": text if text else None}
    if reasoning:
        assistant["reasoning_content"] = _joined(reasoning)
    plain = True
    calls = []
    results = []
    for p in tools:
        name = p.tool
        if type(name) is not str:
            # ``part.tool ?? "unknown"``: a non-string name is kept as it is, like JS.
            if name is None:
                name = "unknown"
            else:
                plain = False
        call_id = p.callID
        state = p.state
        calls.append(
            {
                "id": call_id,
                "type": "function",
                "function": {"name": name, "arguments": _arguments(state)},
            }
        )
        output = state.output if state is not None else None
        results.append(
            {
                "role": "tool",
                "tool_call_id": call_id,
                "name": name,
                "content": output if type(output) is str else _tool_output(state),
            }
        )
    assistant["tool_calls"] = calls
    out.append(assistant)
    out.extend(results)
    return plain


_DATA = attrgetter("data")


def _parsed(rows: Sequence[PartRow]) -> list[_Part]:
    """The parts that read as JSON objects, in order (``_part_read_again`` for the few
    that msgspec refuses)."""
    try:
        # map in C: no bytecode per part on the usual path.
        return list(map(_decode_part, map(_DATA, rows)))
    except _DECODE_ERRORS:
        pass
    out: list[_Part] = []
    for row in rows:
        try:
            out.append(_decode_part(row.data))
        except _DECODE_ERRORS:
            part = _part_read_again(row.data)
            if part is not None:
                out.append(part)
    return out


def _assistant_messages(rows: Sequence[PartRow], out: list[ChatMessage]) -> bool:
    """The steps of one assistant message (its parts in id order); False as
    ``_emit_step`` says."""
    # One pass: a step-start closes the step before it (parts before the first one form
    # an implicit step); other part types (step-finish, snapshot, patch...) count for
    # nothing. The usual types first: every step starts and finishes.
    plain = True
    reasoning: list[str] = []
    texts: list[str] = []
    tools: list[_Part] = []
    decode = _decode_part
    for row in rows:
        try:
            part = decode(row.data)
        except _DECODE_ERRORS:
            again = _part_read_again(row.data)
            if again is None:
                continue
            part = again
        kind = part.type
        if kind == "step-start":
            if reasoning or texts or tools:
                plain = _emit_step(reasoning, texts, tools, out) and plain
                reasoning, texts, tools = [], [], []
        elif kind == "step-finish":
            continue
        elif kind == "tool":
            if type(part.callID) is str:
                tools.append(part)
        elif kind == "text":
            if type(part.text) is str:
                texts.append(part.text)
        elif kind == "reasoning" and type(part.text) is str and part.text:
            reasoning.append(part.text)
    if reasoning or texts or tools:
        plain = _emit_step(reasoning, texts, tools, out) and plain
    return plain


def _user_text(rows: Sequence[PartRow]) -> str:
    texts = [p.text for p in _parsed(rows) if p.type == "text" and type(p.text) is str]
    return texts[0] if len(texts) == 1 else "\n".join(texts)


_BY_TIME_THEN_ID = attrgetter("time_created", "id")
_BY_MESSAGE_THEN_ID = attrgetter("message_id", "id")


def _parts_by_message(parts: Sequence[PartRow]) -> dict[str, list[PartRow]]:
    """Each message's parts in id order (parts of equal ids keep their order).

    A capture holds them so already (read ``ORDER BY message_id, id``): one pass groups
    them and checks it, and only parts found out of that order are sorted."""
    by_message: dict[str, list[PartRow]] = {}
    current: str | None = None
    rows: list[PartRow] = []
    previous = ""
    for part_row in parts:
        message_id = part_row.message_id
        if message_id != current:
            if message_id in by_message:
                break  # the message's parts are not together
            current, previous = message_id, ""
            rows = by_message[message_id] = []
        part_id = part_row.id
        if part_id < previous:
            break
        previous = part_id
        rows.append(part_row)
    else:
        return by_message
    by_message = {}
    for part_row in sorted(parts, key=_BY_MESSAGE_THEN_ID):
        by_message.setdefault(part_row.message_id, []).append(part_row)
    return by_message


def opencode_chat_messages(
    messages: Iterable[MessageRow], parts: Sequence[PartRow]
) -> list[ChatMessage]:
    """One session's captured rows as canonical messages (see the module docstring).
    Raises ``NestedTooDeeply`` for a tool input or output it will not write."""
    by_message = _parts_by_message(parts)
    out: list[ChatMessage] = []
    plain = True
    for row in sorted(messages, key=_BY_TIME_THEN_ID):
        role = _role(row.data)
        if role == "assistant":
            plain = _assistant_messages(by_message.get(row.id, ()), out) and plain
        elif role == "user":
            out.append({"role": "user", "content": _user_text(by_message.get(row.id, ()))})
    # Built in the schema's shape from strs alone (tool arguments are JSON text): vouched
    # for, unless a tool name was some other JSON value.
    return CheckedChatMessages(out) if plain else out


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


def session_time_created(row: dict[str, Any]) -> int | float:
    """``opencode_session_info(row).time_created`` without reading the rest of the row."""
    return _number(row.get("time_created"))


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


def _ledger_messages(
    messages: Iterable[MessageRow], parts: Sequence[PartRow], session_id: str
) -> tuple[list[ChatMessage], str | None]:
    """The session's messages for a ledger line, and None; or no messages and the gap's
    label when a tool name is not a string (the reference would throw on it; arenad's
    rule is that bad input becomes a labeled gap, never a failed projection)."""
    try:
        folded = opencode_chat_messages(messages, parts)
    except NestedTooDeeply:
        return CheckedChatMessages(), (
            f"opencode session {session_id}: a tool part's input or output is nested"
            f" more than {MAX_NESTING} deep"
        )
    if type(folded) is CheckedChatMessages:
        return folded, None
    bad = next(
        call["function"]["name"]
        for m in folded
        for call in m.get("tool_calls", ())
        if type(call["function"]["name"]) is not str
    )
    shown = js_stringify(bad)
    shown = shown if len(shown) <= 60 else shown[:57] + "..."
    return CheckedChatMessages(), (
        f"opencode session {session_id}: a tool part's name is {shown}, not a string"
    )


def session_transcript(
    messages: Iterable[MessageRow], parts: Sequence[PartRow], session_id: str
) -> SessionTranscript | None:
    """What a capture keeps of its session's fold: the ledger's messages as the compact
    JSON array the ledger writes (or the gap's label and ``[]``). None when the messages
    hold a lone surrogate: JSON.stringify escapes it, and no msgspec decoder would read
    the log back, so such a capture is folded again at each projection."""
    folded, gap = _ledger_messages(messages, parts, session_id)
    try:
        # The vouched messages are plain JSON: msgspec writes them as JSON.stringify does.
        encoded = msgspec.Raw(_encode_json(folded)) if folded else EMPTY_ENCODED
    except UnicodeEncodeError:
        return None
    return SessionTranscript(rules=TRANSCRIPT_RULES, messages=encoded, gap=gap)


def ledger_transcript(capture: AgentSessionCaptured) -> tuple[ChatMessages, str | None]:
    """The session's messages for a ledger line (encoded when the capture kept its fold
    under today's rules), and None; or no messages and the gap's label when a tool name
    is not a string."""
    kept = capture.transcript
    if kept is not None and kept.rules == TRANSCRIPT_RULES:
        return kept.messages, kept.gap
    return _ledger_messages(capture.messages, capture.parts, capture.session_id)
