"""The wire formats the gateway speaks: one row per protocol, looked up by the call's path.

A row says everything the shared forward/record path (:mod:`arenad.gateway.server`) needs
to know of a wire format, so that path has no branch on it:

- ``path``: where it is served (``/v1`` + path) and appended to the upstream's ``base_url``;
- ``endpoint``: the record's ``endpoint`` field;
- ``auth``: the header the upstream's key goes in (the style of the wire: the agent sends
  its gateway token there too);
- ``prompt``: the request's prompt as a list of items, chained and recorded as new since
  the previous call (:func:`arenad.gateway.record.request_part`);
- ``sampling``: the request keys recorded as its sampling parameters;
- ``fold``: a new :class:`~arenad.gateway.record.Result` folding the answer (content, tool
  calls, finish reason, usage, token IDs and logprobs, the stream's end and its in-stream
  errors);
- ``error``: an error body in the wire's shape, and ``refusal``: the status a provider of
  that wire answers when its money is gone (the gateway's cap refusal).

Usage is mapped to opencode's buckets (``input`` without cached reads/writes, ``output``
without reasoning; see :mod:`arenad.gateway.record`):

- chat: input = prompt − cached − cache_write, output = completion − reasoning, reasoning,
  cache_read = ``cached_tokens``, cache_write = ``cache_write_tokens`` (the details blocks);
- responses: input = input − cached, output = output − reasoning, reasoning, cache_read =
  ``input_tokens_details.cached_tokens``, no cache write;
- messages: input = ``input_tokens``, output = ``output_tokens`` (Anthropic does not split
  reasoning out), cache_read = ``cache_read_input_tokens``, cache_write =
  ``cache_creation_input_tokens``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from arenad.gateway import record
from arenad.gateway.record import Result, Usage, count
from arenad.provider_errors import anthropic_error_type

Auth = Literal["bearer", "x-api-key"]


@dataclass(frozen=True, kw_only=True)
class Protocol:
    endpoint: str
    path: str
    auth: Auth
    prompt: Callable[[Mapping[str, Any]], list[Any]]
    sampling: tuple[str, ...]
    fold: Callable[[], Result]
    error: Callable[[int, str, str], bytes]
    refusal: int


def _details(raw: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    value = raw.get(key)
    return value if isinstance(value, dict) else {}


# -- error shapes ------------------------------------------------------------------------------


def openai_error(status: int, message: str, code: str) -> bytes:
    """OpenAI's ``{"error": {message, type, code}}``; the type a provider gives ``status``."""
    kind = {
        401: "invalid_request_error",
        402: "insufficient_quota",
        404: "invalid_request_error",
        502: "upstream",
        504: "upstream",
    }.get(status, "invalid_request_error")
    return json.dumps({"error": {"message": message, "type": kind, "code": code}}).encode()


def anthropic_error(status: int, message: str, code: str) -> bytes:
    """Anthropic's ``{"type": "error", "error": {type, message}}`` (``code`` has no field
    there: the type says it), typed by the one table the scripted model uses too."""
    kind = anthropic_error_type(status)
    return json.dumps({"type": "error", "error": {"type": kind, "message": message}}).encode()


# -- chat completions --------------------------------------------------------------------------


def openai_usage(raw: Mapping[str, Any]) -> Usage:
    prompt = count(raw.get("prompt_tokens"))
    completion = count(raw.get("completion_tokens"))
    pdetails = _details(raw, "prompt_tokens_details")
    cache_read = count(pdetails.get("cached_tokens"))
    cache_write = count(pdetails.get("cache_write_tokens"))
    reasoning = count(_details(raw, "completion_tokens_details").get("reasoning_tokens"))
    return Usage(
        input=max(prompt - cache_read - cache_write, 0),
        output=max(completion - reasoning, 0),
        reasoning=reasoning,
        cache_read=cache_read,
        cache_write=cache_write,
    )


class ChatResult(Result):
    """A chat-completions answer: one ``chat.completion`` or its ``chat.completion.chunk``s;
    the stream ends at ``[DONE]`` (or a finish reason); vLLM-style token IDs are kept."""

    def _choice(self, choice: Mapping[str, Any], part_key: str) -> None:
        part = choice.get(part_key)
        if isinstance(part, dict):
            if isinstance(part.get("content"), str):
                self.content.append(part["content"])
            for key in ("reasoning_content", "reasoning"):
                if isinstance(part.get(key), str):
                    self.reasoning.append(part[key])
            for call in part.get("tool_calls") or []:
                if not isinstance(call, dict):
                    continue
                index = call.get("index", len(self.tool_calls))
                slot = self.tool_slot(index if isinstance(index, int) else len(self.tool_calls))
                if call.get("id"):
                    slot["id"] = call["id"]
                fn = call.get("function") or {}
                if isinstance(fn, dict):
                    if fn.get("name"):
                        slot["name"] = fn["name"]
                    if isinstance(fn.get("arguments"), str):
                        slot["arguments"] += fn["arguments"]
        if choice.get("finish_reason"):
            self.finish_reason = str(choice["finish_reason"])
            self.ended = True
        ids = choice.get("token_ids")
        if isinstance(ids, list):
            self.completion_token_ids = (self.completion_token_ids or []) + [
                i for i in ids if isinstance(i, int)
            ]
        prompt_ids = choice.get("prompt_token_ids")
        if isinstance(prompt_ids, list):
            self.prompt_token_ids = [i for i in prompt_ids if isinstance(i, int)]
        logprobs = choice.get("logprobs")
        if isinstance(logprobs, dict):
            self.add_logprobs(logprobs.get("content"))

    def add(self, obj: Mapping[str, Any], *, streamed: bool) -> None:
        if isinstance(obj.get("id"), str):
            self.id = obj["id"]
        if isinstance(obj.get("model"), str):
            self.model = obj["model"]
        prompt_ids = obj.get("prompt_token_ids")
        if isinstance(prompt_ids, list):
            self.prompt_token_ids = [i for i in prompt_ids if isinstance(i, int)]
        for choice in obj.get("choices") or []:
            if isinstance(choice, dict) and choice.get("index", 0) == 0:
                self._choice(choice, "delta" if streamed else "message")
        if isinstance(obj.get("usage"), dict):
            self.usage = openai_usage(obj["usage"])
        error = obj.get("error")
        if streamed and isinstance(error, dict):
            self.stream_error = str(error.get("message") or error.get("type") or "error")


def _chat_prompt(body: Mapping[str, Any]) -> list[Any]:
    messages = body.get("messages")
    return list(messages) if isinstance(messages, list) else []


CHAT = Protocol(
    endpoint="chat.completions",
    path="/chat/completions",
    auth="bearer",
    prompt=_chat_prompt,
    sampling=record.SAMPLING_KEYS,
    fold=ChatResult,
    error=openai_error,
    refusal=402,
)


# -- responses ---------------------------------------------------------------------------------


def responses_usage(raw: Mapping[str, Any]) -> Usage:
    given = count(raw.get("input_tokens"))
    produced = count(raw.get("output_tokens"))
    cache_read = count(_details(raw, "input_tokens_details").get("cached_tokens"))
    reasoning = count(_details(raw, "output_tokens_details").get("reasoning_tokens"))
    return Usage(
        input=max(given - cache_read, 0),
        output=max(produced - reasoning, 0),
        reasoning=reasoning,
        cache_read=cache_read,
    )


def _raw_tokens(messages: Any) -> list[int] | None:
    """The token ids of vLLM's raw messages, in order (None: not that form, or absent)."""
    if not isinstance(messages, list):
        return None
    raw = [m for m in messages if isinstance(m, dict) and isinstance(m.get("tokens"), list)]
    if not raw:
        return None
    return [i for m in raw for i in m["tokens"] if isinstance(i, int) and not isinstance(i, bool)]


_RESPONSE_ENDS = ("response.completed", "response.incomplete", "response.failed")


class ResponsesResult(Result):
    """A responses answer: one ``response`` object, or its ``response.*`` events; the stream
    ends at ``response.completed`` / ``.incomplete`` / ``.failed``."""

    def _item(self, index: int, item: Mapping[str, Any], *, text: bool) -> None:
        kind = item.get("type")
        if kind == "function_call":
            slot = self.tool_slot(index)
            slot["id"] = item.get("call_id") or slot["id"]
            slot["name"] = item.get("name") or slot["name"]
            if isinstance(item.get("arguments"), str) and item["arguments"]:
                slot["arguments"] = item["arguments"]
        elif kind == "message" and text:
            for part in item.get("content") or []:
                if isinstance(part, dict) and part.get("type") == "output_text":
                    if isinstance(part.get("text"), str):
                        self.content.append(part["text"])
                    self.add_logprobs(part.get("logprobs"))
        elif kind == "reasoning" and text:
            for part in item.get("summary") or []:
                if isinstance(part, dict) and isinstance(part.get("text"), str):
                    self.reasoning.append(part["text"])

    def _response(self, response: Mapping[str, Any], *, whole: bool) -> None:
        if isinstance(response.get("id"), str):
            self.id = response["id"]
        if isinstance(response.get("model"), str):
            self.model = response["model"]
        if isinstance(response.get("usage"), dict):
            self.usage = responses_usage(response["usage"])
        status = response.get("status")
        incomplete = _details(response, "incomplete_details").get("reason")
        if isinstance(incomplete, str):
            self.finish_reason = incomplete
        elif isinstance(status, str) and status not in ("in_progress", "queued"):
            self.finish_reason = status
        error = response.get("error")
        if isinstance(error, dict):
            self.stream_error = str(error.get("message") or error.get("code") or "failed")
        # vLLM's token ids (asked with ``enable_response_messages``): the prompt's and the
        # answer's raw messages, each ``{"type": "raw_message_tokens", "tokens": [...]}``.
        prompt_ids = _raw_tokens(response.get("input_messages"))
        if prompt_ids is not None:
            self.prompt_token_ids = prompt_ids
        completion_ids = _raw_tokens(response.get("output_messages"))
        if completion_ids is not None:
            self.completion_token_ids = completion_ids
        if whole:
            for index, item in enumerate(response.get("output") or []):
                if isinstance(item, dict):
                    self._item(index, item, text=True)

    def add(self, obj: Mapping[str, Any], *, streamed: bool) -> None:
        if not streamed:
            self._response(obj, whole=True)
            return
        kind = obj.get("type")
        given = obj.get("output_index")
        index = given if isinstance(given, int) else 0
        response = obj.get("response")
        if isinstance(response, dict):
            self._response(response, whole=False)
        if kind in _RESPONSE_ENDS:
            self.ended = True
        elif kind == "response.output_text.delta":
            if isinstance(obj.get("delta"), str):
                self.content.append(obj["delta"])
            self.add_logprobs(obj.get("logprobs"))
        elif kind in ("response.reasoning_summary_text.delta", "response.reasoning_text.delta"):
            if isinstance(obj.get("delta"), str):
                self.reasoning.append(obj["delta"])
        elif kind in ("response.output_item.added", "response.output_item.done"):
            item = obj.get("item")
            if isinstance(item, dict):
                self._item(index, item, text=False)
        elif kind == "response.function_call_arguments.delta":
            if isinstance(obj.get("delta"), str):
                self.tool_slot(index)["arguments"] += obj["delta"]
        elif kind == "error":
            self.stream_error = str(obj.get("message") or obj.get("code") or "error")


def _responses_prompt(body: Mapping[str, Any]) -> list[Any]:
    items: list[Any] = []
    if body.get("instructions"):
        items.append({"role": "system", "content": body["instructions"]})
    given = body.get("input")
    if isinstance(given, str):
        items.append({"role": "user", "content": given})
    elif isinstance(given, list):
        items += given
    return items


RESPONSES = Protocol(
    endpoint="responses",
    path="/responses",
    auth="bearer",
    prompt=_responses_prompt,
    sampling=(
        "temperature",
        "top_p",
        "max_output_tokens",
        "top_logprobs",
        "include",
        "reasoning",
        "text",
        "tool_choice",
        "parallel_tool_calls",
        "truncation",
        "previous_response_id",
        "store",
        "seed",
        "enable_response_messages",
    ),
    fold=ResponsesResult,
    error=openai_error,
    refusal=402,
)


# -- anthropic messages ------------------------------------------------------------------------


def anthropic_usage(raw: Mapping[str, Any]) -> Usage:
    """Anthropic's ``input_tokens`` already leaves the cache out; it reports no reasoning
    apart from ``output_tokens``."""
    return Usage(
        input=count(raw.get("input_tokens")),
        output=count(raw.get("output_tokens")),
        cache_read=count(raw.get("cache_read_input_tokens")),
        cache_write=count(raw.get("cache_creation_input_tokens")),
    )


class MessagesResult(Result):
    """An Anthropic messages answer: one ``message``, or ``message_start`` /
    ``content_block_*`` / ``message_delta`` events; the stream ends at ``message_stop``.
    Streamed usage arrives in pieces (``message_start``, then cumulative ``message_delta``
    counts): the latest value of each field wins."""

    def __init__(self) -> None:
        super().__init__()
        self._usage: dict[str, Any] = {}

    def _usage_from(self, raw: Any) -> None:
        if isinstance(raw, dict):
            self._usage.update({k: v for k, v in raw.items() if v is not None})
            self.usage = anthropic_usage(self._usage)

    def _message(self, message: Mapping[str, Any]) -> None:
        if isinstance(message.get("id"), str):
            self.id = message["id"]
        if isinstance(message.get("model"), str):
            self.model = message["model"]
        if isinstance(message.get("stop_reason"), str):
            self.finish_reason = message["stop_reason"]
        self._usage_from(message.get("usage"))

    def _block(self, index: int, block: Mapping[str, Any]) -> None:
        kind = block.get("type")
        if kind == "text" and isinstance(block.get("text"), str):
            self.content.append(block["text"])
        elif kind == "thinking" and isinstance(block.get("thinking"), str):
            self.reasoning.append(block["thinking"])
        elif kind == "tool_use":
            slot = self.tool_slot(index)
            slot["id"] = block.get("id")
            slot["name"] = block.get("name")
            given = block.get("input")
            if isinstance(given, dict) and given:
                slot["arguments"] = record.canonical(given).decode()

    def add(self, obj: Mapping[str, Any], *, streamed: bool) -> None:
        if not streamed:
            self._message(obj)
            for n, block in enumerate(obj.get("content") or []):
                if isinstance(block, dict):
                    self._block(n, block)
            return
        kind = obj.get("type")
        given = obj.get("index")
        index = given if isinstance(given, int) else 0
        if kind == "message_start" and isinstance(obj.get("message"), dict):
            self._message(obj["message"])
        elif kind == "content_block_start" and isinstance(obj.get("content_block"), dict):
            self._block(index, obj["content_block"])
        elif kind == "content_block_delta" and isinstance(obj.get("delta"), dict):
            delta = obj["delta"]
            if isinstance(delta.get("text"), str):
                self.content.append(delta["text"])
            elif isinstance(delta.get("thinking"), str):
                self.reasoning.append(delta["thinking"])
            elif isinstance(delta.get("partial_json"), str):
                self.tool_slot(index)["arguments"] += delta["partial_json"]
        elif kind == "message_delta":
            delta = obj.get("delta")
            if isinstance(delta, dict) and isinstance(delta.get("stop_reason"), str):
                self.finish_reason = delta["stop_reason"]
            self._usage_from(obj.get("usage"))
        elif kind == "message_stop":
            self.ended = True
        elif kind == "error":
            error = _details(obj, "error")
            self.stream_error = str(error.get("type") or "error") + (
                f": {error['message']}" if isinstance(error.get("message"), str) else ""
            )


def _messages_prompt(body: Mapping[str, Any]) -> list[Any]:
    items: list[Any] = []
    if body.get("system"):
        items.append({"role": "system", "content": body["system"]})
    messages = body.get("messages")
    return items + (list(messages) if isinstance(messages, list) else [])


MESSAGES = Protocol(
    endpoint="messages",
    path="/messages",
    auth="x-api-key",
    prompt=_messages_prompt,
    sampling=(
        "max_tokens",
        "temperature",
        "top_p",
        "top_k",
        "stop_sequences",
        "thinking",
        "tool_choice",
    ),
    fold=MessagesResult,
    error=anthropic_error,
    refusal=402,
)


TABLE: tuple[Protocol, ...] = (CHAT, RESPONSES, MESSAGES)
_BY_PATH = {p.path: p for p in TABLE}


def for_path(path: str) -> Protocol | None:
    """The protocol served at ``/v1`` + its path (None: no such route)."""
    return _BY_PATH.get(path.removeprefix("/v1")) if path.startswith("/v1/") else None
