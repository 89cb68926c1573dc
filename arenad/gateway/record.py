"""What the gateway records of one call (pure: bodies and chunks in, a record out).

A chat request carries the conversation's whole history; recording it whole on every call
grows the journal quadratically. Each message is hashed into a chain
(``h_0 = sha256("")``, ``h_i = sha256(h_{i-1} || canonical(m_i))``); a call records the hash
of its full prompt (``prompt_hash``), the longest prefix whose hash an earlier call of the same
attempt recorded as its ``prompt_hash`` (``prefix_hash``, ``prefix_len``) and only the
messages after it (``new_messages``). The full prompt of a call is that earlier call's full
prompt plus its ``new_messages``: a chain a reader walks back to ``prefix_len == 0``.

Usage follows opencode's own arithmetic (facts/opencode.md §2.4) so that the gateway's sums
and opencode's store can be compared to the token and cent: ``input`` excludes cached reads and
writes, ``output`` excludes reasoning, and
``cost = (input*in + (output+reasoning)*out + cache_read*cr + cache_write*cw) / 1e6``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import msgspec

from arenad.gateway.grants import Price

EMPTY_CHAIN = hashlib.sha256(b"").hexdigest()
# Chat-completions request keys that shape sampling (recorded as given; everything else is the
# prompt or tools). Each wire format names its own (arenad.gateway.protocols).
SAMPLING_KEYS = (
    "temperature",
    "top_p",
    "top_k",
    "max_tokens",
    "max_completion_tokens",
    "n",
    "stop",
    "seed",
    "presence_penalty",
    "frequency_penalty",
    "logprobs",
    "top_logprobs",
    "tool_choice",
    "parallel_tool_calls",
    "reasoning_effort",
    "response_format",
    "return_token_ids",
)


def canonical(value: Any) -> bytes:
    """Compact JSON with sorted keys (UTF-8 as is): the bytes that are hashed and journaled."""
    return msgspec.json.encode(value, order="sorted")


def chain(messages: Sequence[Any]) -> list[str]:
    """``[h_0, h_1, ..., h_n]`` for ``n`` messages."""
    hashes = [EMPTY_CHAIN]
    for message in messages:
        hashes.append(hashlib.sha256(hashes[-1].encode() + canonical(message)).hexdigest())
    return hashes


def tools_digest(tools: Any) -> str | None:
    return None if not tools else hashlib.sha256(canonical(tools)).hexdigest()


def split_prompt(messages: Sequence[Any], known: set[str]) -> tuple[int, str, str]:
    """(prefix_len, prefix_hash, prompt_hash): the longest prefix already recorded."""
    hashes = chain(messages)
    for k in range(len(messages), 0, -1):
        if hashes[k] in known:
            return k, hashes[k], hashes[-1]
    return 0, EMPTY_CHAIN, hashes[-1]


class Usage(msgspec.Struct, kw_only=True):
    """opencode's token buckets (see the module doc); None: the upstream reported none."""

    input: int = 0
    output: int = 0
    reasoning: int = 0
    cache_read: int = 0
    cache_write: int = 0

    @property
    def total(self) -> int:
        return self.input + self.output + self.reasoning + self.cache_read + self.cache_write


def count(value: Any) -> int:
    """A token count from hostile JSON: a positive int, else 0 (never negative, never a bool)."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def cost_usd(usage: Usage, price: Price | None) -> float | None:
    """USD of one call by the campaign's price table; None when the model has no price."""
    if price is None:
        return None
    return (
        usage.input * price.input
        + (usage.output + usage.reasoning) * price.output
        + usage.cache_read * price.cache_read
        + usage.cache_write * price.cache_write
    ) / 1e6


class Result:
    """One answer folded from a JSON body or from SSE events: what every wire format's fold
    (:mod:`arenad.gateway.protocols`) fills in, and the record's ``response`` made of it.

    ``ended``: the stream carried its wire's end (an answer cut short without it is an
    upstream error); ``stream_error``: the upstream reported an error inside a 200 stream."""

    def __init__(self) -> None:
        self.id: str | None = None
        self.model: str | None = None
        self.content: list[str] = []
        self.reasoning: list[str] = []
        self.tool_calls: dict[int, dict[str, Any]] = {}
        self.finish_reason: str | None = None
        self.usage: Usage | None = None
        self.prompt_token_ids: list[int] | None = None
        self.completion_token_ids: list[int] | None = None
        self.logprobs: list[dict[str, Any]] | None = None
        self.chunks = 0
        self.malformed = 0
        self.ended = False
        self.stream_error: str | None = None

    def add(self, obj: Mapping[str, Any], *, streamed: bool) -> None:
        """Fold one JSON body (``streamed=False``) or one streamed event's data."""
        raise NotImplementedError

    def add_sse(self, events: Iterable[bytes]) -> None:
        for event in events:
            for line in event.split(b"\n"):
                if not line.startswith(b"data:"):
                    continue
                data = line[5:].strip()
                if data == b"[DONE]":
                    self.ended = True
                    continue
                if not data:
                    continue
                try:
                    obj = msgspec.json.decode(data)
                except msgspec.DecodeError:
                    self.malformed += 1
                    continue
                if isinstance(obj, dict):
                    self.chunks += 1
                    self.add(obj, streamed=True)

    def tool_slot(self, index: int) -> dict[str, Any]:
        return self.tool_calls.setdefault(index, {"id": None, "name": None, "arguments": ""})

    def add_logprobs(self, entries: Any) -> None:
        """OpenAI's chosen-token logprobs (``[{token, logprob, top_logprobs}]``), appended."""
        if not isinstance(entries, list):
            return
        out = self.logprobs if self.logprobs is not None else []
        for entry in entries:
            if not isinstance(entry, dict):
                continue
            item: dict[str, Any] = {"token": entry.get("token"), "logprob": entry.get("logprob")}
            if entry.get("top_logprobs"):
                item["top"] = [
                    {"token": t.get("token"), "logprob": t.get("logprob")}
                    for t in entry["top_logprobs"]
                    if isinstance(t, dict)
                ]
            out.append(item)
        self.logprobs = out

    def usage_json(self) -> dict[str, int] | None:
        u = self.usage
        if u is None:
            return None
        return {
            "input": u.input,
            "output": u.output,
            "reasoning": u.reasoning,
            "cache_read": u.cache_read,
            "cache_write": u.cache_write,
        }

    def response(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "content": "".join(self.content) if self.content else None,
            "finish_reason": self.finish_reason,
            "tool_calls": [self.tool_calls[k] for k in sorted(self.tool_calls)],
        }
        if self.reasoning:
            out["reasoning"] = "".join(self.reasoning)
        if self.id is not None:
            out["id"] = self.id
        if self.malformed:
            out["malformed_chunks"] = self.malformed
        return out


class SseSplitter:
    """Complete SSE events (separated by a blank line) out of arbitrary byte pieces."""

    def __init__(self) -> None:
        self._buf = b""

    def feed(self, data: bytes) -> list[bytes]:
        self._buf += data.replace(b"\r\n", b"\n")
        *events, self._buf = self._buf.split(b"\n\n")
        return events

    def rest(self) -> list[bytes]:
        rest, self._buf = self._buf, b""
        return [rest] if rest.strip() else []


def request_part(
    body: Mapping[str, Any],
    messages: Sequence[Any],
    known: set[str],
    sampling_keys: Iterable[str] = SAMPLING_KEYS,
) -> tuple[dict[str, Any], str]:
    """The request's record (only the new ``messages`` of its prompt, as its wire format
    lists them) and its prompt hash."""
    prefix_len, prefix_hash, prompt_hash = split_prompt(messages, known)
    part: dict[str, Any] = {
        "model": body.get("model"),
        "stream": bool(body.get("stream")),
        "sampling": {k: body[k] for k in sampling_keys if k in body},
        "tools_digest": tools_digest(body.get("tools")),
        "n_messages": len(messages),
        "prefix_len": prefix_len,
        "prefix_hash": prefix_hash,
        "prompt_hash": prompt_hash,
        "new_messages": list(messages[prefix_len:]),
    }
    return part, prompt_hash


def bounded(record: dict[str, Any], limit: int) -> bytes:
    """The record as one JSON line of at most ``limit`` bytes.

    Past the limit the new messages, then the logprobs, then the response text are replaced by
    their size and sha256 (``elided``), so the line is always ingested whole, and what was left
    out is labeled, never silently dropped."""
    line = canonical(record) + b"\n"
    if len(line) <= limit:
        return line
    elided: dict[str, Any] = {}
    for section, key in (("request", "new_messages"), ("", "logprobs"), ("response", "content")):
        holder = record.get(section) if section else record
        if not isinstance(holder, dict) or holder.get(key) is None:
            continue
        raw = canonical(holder[key])
        elided[f"{section + '.' if section else ''}{key}"] = {
            "bytes": len(raw),
            "sha256": hashlib.sha256(raw).hexdigest(),
        }
        holder[key] = None
        record["elided"] = elided
        line = canonical(record) + b"\n"
        if len(line) <= limit:
            return line
    # Still too long (huge tool arguments or token ids): only the call's figures remain.
    response = record.get("response")
    elided["response"] = {"bytes": len(canonical(response))}
    record["response"] = None
    if record.get("token_ids") is not None:
        elided["token_ids"] = {"bytes": len(canonical(record["token_ids"]))}
        record["token_ids"] = None
    return canonical(record) + b"\n"
