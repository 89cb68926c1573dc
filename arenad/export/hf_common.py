"""What the Hugging Face exports share: a ledger line's columns as parquet types."""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from arenad.chat import decoded_messages
from arenad.export.source import LineAttempt

__all__ = ["MESSAGE_TYPE", "TOOL_TYPE", "error_of", "message_rows", "tools_of"]

_FUNCTION_CALL = pa.struct([("name", pa.string()), ("arguments", pa.string())])
MESSAGE_TYPE = pa.struct(
    [
        ("role", pa.string()),
        ("content", pa.string()),
        ("reasoning_content", pa.string()),
        (
            "tool_calls",
            pa.list_(
                pa.struct(
                    [("id", pa.string()), ("type", pa.string()), ("function", _FUNCTION_CALL)]
                )
            ),
        ),
        ("tool_call_id", pa.string()),
        ("name", pa.string()),
    ]
)
# A tool as chat templates take it; the transcript names a tool but not its description
# or JSON-schema parameters (null: unknown, never made up).
TOOL_TYPE = pa.struct(
    [
        ("type", pa.string()),
        (
            "function",
            pa.struct(
                [("name", pa.string()), ("description", pa.string()), ("parameters", pa.string())]
            ),
        ),
    ]
)


def message_rows(la: LineAttempt) -> list[dict[str, Any]]:
    """The line's messages, each with the schema's keys only (``is_copied_context`` turns
    are context another turn already holds, not a sample to learn: left out)."""
    out = []
    for m in decoded_messages(la.line["messages"]):
        if m.get("is_copied_context") is True:
            continue
        out.append(
            {
                "role": m.get("role"),
                "content": m.get("content"),
                "reasoning_content": m.get("reasoning_content"),
                "tool_calls": m.get("tool_calls"),
                "tool_call_id": m.get("tool_call_id"),
                "name": m.get("name") if isinstance(m.get("name"), str) else None,
            }
        )
    return out


def tools_of(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The tools the transcript calls, by first use."""
    names: dict[str, None] = {}
    for m in messages:
        for call in m.get("tool_calls") or ():
            names.setdefault(call["function"]["name"], None)
    return [
        {"type": "function", "function": {"name": n, "description": None, "parameters": None}}
        for n in names
    ]


def error_of(la: LineAttempt) -> str | None:
    """Why the line is not a whole sample: the attempt's error, else its gap."""
    outcome = la.line["outcome"]
    error = outcome.get("error")
    if error is not None:
        return str(error)
    gap = la.line["provenance"].get("gap")
    return str(gap) if gap is not None else None
