"""Chat messages a transcript reader vouches for: a list, or the same already encoded.

A transcript is most of a ledger line. A reader that built it in the rollout schema's
shape says so with ``CheckedChatMessages``, so the line's validator does not walk it.
The opencode reader goes one step further: it folds each session once, when the session
is captured, and keeps the messages' JSON bytes in the capture
(``events.capture.SessionTranscript``). A line then carries those bytes as a
``msgspec.Raw`` (an *encoded* transcript), which the ledger writer copies as they are.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Final, TypeAlias

import msgspec

from arenad.js import PlainJsonList

__all__ = [
    "EMPTY_ENCODED",
    "ChatMessages",
    "CheckedChatMessages",
    "decoded_messages",
    "has_messages",
    "join_messages",
]


class CheckedChatMessages(PlainJsonList):
    """Chat messages a transcript reader built in the schema's shape, which it vouches
    for: each a dict with a chat ``role``, ``content`` a str or None, ``reasoning_content``
    a str when present, ``tool_call_id`` a str on (and only on) ``tool`` messages,
    ``tool_calls`` a list of ``{id: str, type: "function", function: {name: str,
    arguments: str}}``, any other key a str — and plain JSON (``PlainJsonList``). The
    validator does not walk them (they are most of a line); a reader that cannot vouch
    for a transcript (a tool name that is not a str) returns a plain list, which is."""


# A line's messages: a list (vouched for or not), or vouched messages already encoded as
# the compact JSON array the ledger writes (``msgspec.Raw``).
ChatMessages: TypeAlias = list[Any] | msgspec.Raw

EMPTY_ENCODED: Final = msgspec.Raw(b"[]")

_decode_list = msgspec.json.Decoder(list[Any]).decode


def has_messages(messages: ChatMessages) -> bool:
    """Whether the transcript holds at least one message (an encoded one is compact)."""
    if type(messages) is msgspec.Raw:
        return messages != EMPTY_ENCODED
    return bool(messages)


def decoded_messages(messages: ChatMessages) -> list[Any]:
    """The messages as Python values (an encoded transcript decoded, still vouched for)."""
    if type(messages) is msgspec.Raw:
        return CheckedChatMessages(_decode_list(messages))
    assert isinstance(messages, list)
    return messages


def join_messages(transcripts: Iterable[ChatMessages]) -> ChatMessages:
    """Transcripts one after the other, still vouched for when every one of them was;
    encoded ones are joined as bytes (``[a,b]`` + ``[c]`` is ``[a,b,c]``)."""
    parts = list(transcripts)
    if len(parts) == 1:
        return parts[0]
    if parts and all(type(part) is msgspec.Raw for part in parts):
        inner = [bytes(part)[1:-1] for part in parts if part != EMPTY_ENCODED]
        return msgspec.Raw(b"[" + b",".join(inner) + b"]")
    lists = [decoded_messages(part) for part in parts]
    vouched = all(type(part) is CheckedChatMessages for part in lists)
    joined: list[Any] = CheckedChatMessages() if vouched else []
    for part in lists:
        joined.extend(part)
    return joined
