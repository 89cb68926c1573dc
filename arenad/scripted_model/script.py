"""The scripted model's script: what it answers, and how a request picks its answer.

A script is a TOML file. Everything here is pure: parsing text into a :class:`Script`, and
:func:`plan_reply`, which maps (script, request body) to the :class:`Reply` to send. The server
(``arenad.scripted_model.server``) only does I/O around it.

Format (every key is checked; an unknown key is an error naming it and where it is)::

    # Script-level settings (all optional).
    final_text = "Done."        # answer once a conversation's steps have run out
    title = "Scripted session"  # answer to opencode's title-generation request
    chunk_chars = 24            # stream text / tool arguments in pieces of this many chars
    delay_s = 0.0               # default wait before answering a request
    chunk_delay_s = 0.0         # default wait between streamed chunks
    logprobs = false            # always answer with OpenAI chosen-token logprobs (else
                                # only when the request says logprobs / top_logprobs)
    token_ids = false           # always answer with vLLM-style prompt_token_ids and
                                # token_ids (else only for return_token_ids = true)

    [usage]                     # default usage reported for every answer
    prompt_tokens = 1000        # (these four are the defaults if [usage] is left out:
    completion_tokens = 50      #  100 / 20 / 0 / 0)
    cached_tokens = 0           # -> prompt_tokens_details.cached_tokens
    reasoning_tokens = 0        # -> completion_tokens_details.reasoning_tokens
    cache_write_tokens = 0      # part of prompt_tokens written to the cache (Anthropic's
                                # cache_creation_input_tokens; chat: prompt_tokens_details.
                                # cache_write_tokens, sent only when > 0)

    [[models]]                  # at least one; GET /v1/models lists them
    id = "fixer"
    name = "Scripted fixer"     # optional, for the opencode config
    context = 128000            # optional limit.context (default 128000)
    output = 4096               # optional limit.output (default 4096)
    cost = { input = 3.0, output = 15.0, cache_read = 0.3 }   # optional, USD per 1M tokens

    [[conversations]]           # tried in order; the first that matches answers
    name = "fix-bug"            # optional, for logs
    match = "fix the bug"       # substring of the FIRST user message ...
    # regex = "fix .* bug"      # ... or a Python regex searched in it (not both)
    # model = "fixer"           # optional: only for requests to this model
    # final_text = "Fixed."     # optional: overrides the script's final_text

    [[conversations.steps]]     # step 1: tool calls (and optionally text)
    text = "Let me write the fix."
    [[conversations.steps.tool_calls]]
    name = "write"
    arguments = { filePath = "fix.txt", content = "fixed\\n" }   # encoded to a JSON string
    # id = "call_custom"        # default: call_<step>_<n>, both counted from 1
    [conversations.steps.usage] # per step; a missing field falls back to [usage]
    prompt_tokens = 1200
    cached_tokens = 200

    [[conversations.steps]]     # step 2: text only -> finish_reason "stop"
    text = "Fixed it."
    delay_s = 0.5               # wait before answering (tests use a long one for timeouts)

A conversation with neither ``match`` nor ``regex`` catches every request that reaches it (a
default conversation); put it last. A request nothing matches is answered with ``final_text``.

How a request is answered (stateless, so the server needs no memory and survives restarts):

* opencode sends the whole history on every request. The conversation is chosen from the
  request's first user message; the step to answer is the number of assistant messages
  already in the history (0 -> the first step). Steps are walked in order, one per model
  call, and keep counting across turns of the same session.
* Past the last step, the answer is the conversation's (or the script's) ``final_text``.
* opencode's title-generation request (sent when ``opencode run`` gets no ``--title``; its
  first user message is "Generate a title for this conversation:") is always answered with
  ``title``, before any conversation is tried, and never advances a conversation.
* A step has ``text``, ``tool_calls`` or both (finish_reason "tool_calls" if it has any tool
  call, else "stop"); optionally ``reasoning`` (streamed as ``reasoning_content``). A step
  may instead be ``error = { status = 500, message = "...", retry_after_ms = 0 }``: the
  request gets that HTTP error, with the error ``type`` a real provider gives that status
  (``server_error`` only for 5xx) and, when set, a ``retry-after-ms`` header. Since nothing
  is recorded for a failed call, every retry at that position fails too: opencode gives up
  at once on a 4xx but 429, and retries a 429 or 5xx five times (``retry_after_ms = 0``
  makes those retries immediate). With ``in_stream = true`` a streamed request gets 200
  and the error as the wire's in-stream error event instead (chat: a ``data: {"error":
  {...}}`` chunk; responses: an ``error`` event; messages: Anthropic's ``error`` event),
  after the stream's first event and without its end.
* ``delay_s`` / ``chunk_delay_s`` on a step override the script's defaults.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import msgspec

from arenad.errors import UserError

TITLE_REQUEST_PREFIX = "Generate a title for this conversation"
"""How opencode 1.18.33's title-generation request starts its first user message."""

TITLE_SYSTEM_PREFIX = "You are a title generator"
"""How the title agent's system prompt starts (a second signal, if the first one changes)."""


class ScriptError(UserError):
    """A script that does not parse or validate; the message names the file and the key."""


class _Config(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    pass


def _check_non_negative(where: str, **values: float | int | None) -> None:
    for key, value in values.items():
        if value is not None and value < 0:
            raise ValueError(f"{where}{key} must be >= 0, got {value}")


class Usage(_Config, frozen=True):
    """Token counts for one answer; ``None`` falls back to the script's defaults."""

    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cached_tokens: int | None = None
    reasoning_tokens: int | None = None
    cache_write_tokens: int | None = None

    def __post_init__(self) -> None:
        _check_non_negative(
            "",
            prompt_tokens=self.prompt_tokens,
            completion_tokens=self.completion_tokens,
            cached_tokens=self.cached_tokens,
            reasoning_tokens=self.reasoning_tokens,
            cache_write_tokens=self.cache_write_tokens,
        )


class ResolvedUsage(msgspec.Struct, frozen=True, kw_only=True):
    """Usage with every count filled in, as reported on the wire."""

    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int
    reasoning_tokens: int
    cache_write_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


DEFAULT_USAGE = ResolvedUsage(
    prompt_tokens=100, completion_tokens=20, cached_tokens=0, reasoning_tokens=0
)


class Cost(_Config, frozen=True):
    """USD per 1M tokens, as opencode's model ``cost`` block."""

    input: float = 0.0
    output: float = 0.0
    cache_read: float = 0.0
    cache_write: float = 0.0

    def __post_init__(self) -> None:
        _check_non_negative(
            "",
            input=self.input,
            output=self.output,
            cache_read=self.cache_read,
            cache_write=self.cache_write,
        )


class Model(_Config, frozen=True):
    id: str
    name: str | None = None
    context: int = 128_000
    output: int = 4_096
    cost: Cost | None = None

    def __post_init__(self) -> None:
        if not self.id or "/" in self.id:
            raise ValueError(f"id must be a non-empty model id without '/', got {self.id!r}")
        if self.context <= 0 or self.output <= 0:
            raise ValueError("context and output must be > 0")


class ToolCall(_Config, frozen=True):
    name: str
    arguments: dict[str, Any] = {}
    id: str | None = None

    def __post_init__(self) -> None:
        if not self.name:
            raise ValueError("name must not be empty")


class ErrorReply(_Config, frozen=True):
    status: int = 500
    message: str = "scripted error"
    # Sent as the ``retry-after-ms`` header: opencode then waits this long between its
    # retries of a retryable error (0: retry at once) instead of its 2-30 s backoff.
    retry_after_ms: int | None = None
    # A streamed request gets 200, the stream's first event, then the error as the wire's
    # error event, and the stream ends without its end event: a provider failing
    # mid-answer (Anthropic's ``overloaded_error`` event). A request that does not stream
    # still gets the HTTP status.
    in_stream: bool = False

    def __post_init__(self) -> None:
        if not 400 <= self.status <= 599:
            raise ValueError(f"status must be an HTTP error status (400-599), got {self.status}")
        if self.retry_after_ms is not None and self.retry_after_ms < 0:
            raise ValueError(f"retry_after_ms must be >= 0, got {self.retry_after_ms}")


class Step(_Config, frozen=True):
    text: str | None = None
    reasoning: str | None = None
    tool_calls: list[ToolCall] = []
    usage: Usage | None = None
    delay_s: float | None = None
    chunk_delay_s: float | None = None
    error: ErrorReply | None = None

    def __post_init__(self) -> None:
        _check_non_negative("", delay_s=self.delay_s, chunk_delay_s=self.chunk_delay_s)
        if self.error is not None:
            if self.text is not None or self.tool_calls or self.reasoning is not None:
                raise ValueError(
                    "a step with `error` cannot also have text, reasoning or tool_calls"
                )
        elif not self.text and not self.tool_calls:
            # An empty answer would not show up as an assistant message in the next
            # request's history, so the step counter could never move past it.
            raise ValueError(
                "a step needs a non-empty `text`, at least one `tool_calls`, or `error`"
            )
        ids = [call.id for call in self.tool_calls if call.id is not None]
        if len(ids) != len(set(ids)):
            raise ValueError("tool_calls ids must be unique within a step")


class Conversation(_Config, frozen=True):
    name: str | None = None
    match: str | None = None
    regex: str | None = None
    model: str | None = None
    final_text: str | None = None
    steps: list[Step] = []

    def __post_init__(self) -> None:
        if self.match is not None and self.regex is not None:
            raise ValueError("give `match` or `regex`, not both")
        if self.match == "":
            raise ValueError("match must not be empty (leave it out for a default conversation)")
        if self.regex is not None:
            try:
                re.compile(self.regex)
            except re.error as exc:
                raise ValueError(f"regex {self.regex!r} does not compile: {exc}") from None

    @property
    def is_default(self) -> bool:
        return self.match is None and self.regex is None

    def label(self, index: int) -> str:
        return self.name or f"conversations[{index}]"


class Script(_Config, frozen=True):
    models: list[Model]
    conversations: list[Conversation] = []
    usage: Usage | None = None
    final_text: str = "Done."
    title: str = "Scripted session"
    chunk_chars: int = 24
    delay_s: float = 0.0
    chunk_delay_s: float = 0.0
    # Every answer carries OpenAI logprobs / vLLM token ids, asked for or not (an agent such
    # as opencode cannot ask).
    logprobs: bool = False
    token_ids: bool = False

    def __post_init__(self) -> None:
        if not self.models:
            raise ValueError("models: at least one [[models]] entry is required")
        ids = [m.id for m in self.models]
        dupes = sorted({i for i in ids if ids.count(i) > 1})
        if dupes:
            raise ValueError(f"models: duplicate id(s) {', '.join(dupes)}")
        if self.chunk_chars <= 0:
            raise ValueError(f"chunk_chars must be > 0, got {self.chunk_chars}")
        _check_non_negative("", delay_s=self.delay_s, chunk_delay_s=self.chunk_delay_s)
        if not self.final_text or not self.title:
            raise ValueError("final_text and title must not be empty")
        for i, conv in enumerate(self.conversations):
            if conv.model is not None and conv.model not in ids:
                known = ", ".join(ids)
                raise ValueError(
                    f"conversations[{i}].model {conv.model!r} is not one of the models ({known})"
                )

    @property
    def model_ids(self) -> list[str]:
        return [m.id for m in self.models]

    @property
    def default_usage(self) -> ResolvedUsage:
        return resolve_usage(DEFAULT_USAGE, self.usage)

    def model(self, model_id: str) -> Model | None:
        for m in self.models:
            if m.id == model_id:
                return m
        return None


def resolve_usage(base: ResolvedUsage, override: Usage | None) -> ResolvedUsage:
    if override is None:
        return base
    return ResolvedUsage(
        prompt_tokens=_pick(override.prompt_tokens, base.prompt_tokens),
        completion_tokens=_pick(override.completion_tokens, base.completion_tokens),
        cached_tokens=_pick(override.cached_tokens, base.cached_tokens),
        reasoning_tokens=_pick(override.reasoning_tokens, base.reasoning_tokens),
        cache_write_tokens=_pick(override.cache_write_tokens, base.cache_write_tokens),
    )


def _pick(value: int | None, default: int) -> int:
    return default if value is None else value


# -- loading -------------------------------------------------------------------------------


def parse_script(text: str, source: str = "<script>") -> Script:
    """Parse TOML text into a Script; errors are ScriptError naming ``source`` and the key."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ScriptError(f"{source}: not valid TOML: {exc}") from None
    return script_from_dict(data, source)


def script_from_dict(data: Mapping[str, Any], source: str = "<script>") -> Script:
    try:
        script = msgspec.convert(data, Script)
    except msgspec.ValidationError as exc:
        raise ScriptError(f"{source}: {_toml_path(str(exc))}") from None
    _check_usage_consistency(script, source)
    return script


def load_script(path: Path) -> Script:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ScriptError(f"{path}: cannot read the script: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise ScriptError(f"{path}: the script is not UTF-8 text") from None
    return parse_script(text, str(path))


def _toml_path(message: str) -> str:
    # msgspec says "... - at `$.conversations[0].steps[1]`"; TOML users think in keys.
    return message.replace("`$.", "`").replace("- at `$`", "- at the top level")


def _check_usage_consistency(script: Script, source: str) -> None:
    checks: list[tuple[str, ResolvedUsage]] = [("usage", script.default_usage)]
    for ci, conv in enumerate(script.conversations):
        for si, step in enumerate(conv.steps):
            checks.append(
                (
                    f"conversations[{ci}].steps[{si}].usage",
                    resolve_usage(script.default_usage, step.usage),
                )
            )
    for where, usage in checks:
        if usage.cached_tokens > usage.prompt_tokens:
            raise ScriptError(
                f"{source}: cached_tokens ({usage.cached_tokens}) exceeds prompt_tokens "
                f"({usage.prompt_tokens}) - at `{where}`"
            )
        if usage.cached_tokens + usage.cache_write_tokens > usage.prompt_tokens:
            raise ScriptError(
                f"{source}: cached_tokens + cache_write_tokens "
                f"({usage.cached_tokens + usage.cache_write_tokens}) exceeds prompt_tokens "
                f"({usage.prompt_tokens}) - at `{where}`"
            )
        if usage.reasoning_tokens > usage.completion_tokens:
            raise ScriptError(
                f"{source}: reasoning_tokens ({usage.reasoning_tokens}) exceeds "
                f"completion_tokens ({usage.completion_tokens}) - at `{where}`"
            )


# -- answering -----------------------------------------------------------------------------


class PlannedToolCall(msgspec.Struct, frozen=True, kw_only=True):
    id: str
    name: str
    arguments: str
    """The arguments encoded as a JSON object string, as the wire carries them."""


class Reply(msgspec.Struct, frozen=True, kw_only=True):
    """What to send for one request (pure data; the server turns it into bytes)."""

    kind: Literal["step", "final", "title", "fallback"]
    conversation: str | None
    step: int | None
    """0-based step index within the conversation (for ``kind == "step"``)."""
    text: str | None = None
    reasoning: str | None = None
    tool_calls: tuple[PlannedToolCall, ...] = ()
    usage: ResolvedUsage = DEFAULT_USAGE
    delay_s: float = 0.0
    chunk_delay_s: float = 0.0
    error: ErrorReply | None = None

    @property
    def finish_reason(self) -> str:
        return "tool_calls" if self.tool_calls else "stop"


def message_text(message: Mapping[str, Any]) -> str:
    """The text of a chat message whose content is a string or a list of content parts."""
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = [
            part["text"]
            for part in content
            if isinstance(part, Mapping) and isinstance(part.get("text"), str)
        ]
        return "\n".join(texts)
    return ""


def _messages(body: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    raw = body.get("messages")
    if not isinstance(raw, list):
        return []
    return [m for m in raw if isinstance(m, Mapping)]


def first_user_text(body: Mapping[str, Any]) -> str:
    for message in _messages(body):
        if message.get("role") == "user":
            return message_text(message)
    return ""


def assistant_count(body: Mapping[str, Any]) -> int:
    return sum(1 for m in _messages(body) if m.get("role") == "assistant")


def is_title_request(body: Mapping[str, Any]) -> bool:
    if first_user_text(body).lstrip().startswith(TITLE_REQUEST_PREFIX):
        return True
    return any(
        m.get("role") == "system" and message_text(m).lstrip().startswith(TITLE_SYSTEM_PREFIX)
        for m in _messages(body)
    )


def select_conversation(
    script: Script, first_user: str, model: str | None
) -> tuple[int, Conversation] | None:
    for index, conv in enumerate(script.conversations):
        if conv.model is not None and conv.model != model:
            continue
        if conv.match is not None and conv.match not in first_user:
            continue
        if conv.regex is not None and re.search(conv.regex, first_user) is None:
            continue
        return index, conv
    return None


def tool_call_id(step: int, n: int) -> str:
    """The default id of the n-th (0-based) tool call of step ``step`` (0-based): 1-based text."""
    return f"call_{step + 1}_{n + 1}"


def encode_arguments(arguments: Mapping[str, Any]) -> str:
    return msgspec.json.encode(arguments).decode("utf-8")


def plan_reply(script: Script, body: Mapping[str, Any]) -> Reply:
    """Decide the answer to one chat-completions request body (pure)."""
    base_usage = script.default_usage
    delay, chunk_delay = script.delay_s, script.chunk_delay_s
    if is_title_request(body):
        return Reply(
            kind="title",
            conversation=None,
            step=None,
            text=script.title,
            usage=base_usage,
            delay_s=delay,
            chunk_delay_s=chunk_delay,
        )
    model = body.get("model")
    chosen = select_conversation(
        script, first_user_text(body), model if isinstance(model, str) else None
    )
    if chosen is None:
        return Reply(
            kind="fallback",
            conversation=None,
            step=None,
            text=script.final_text,
            usage=base_usage,
            delay_s=delay,
            chunk_delay_s=chunk_delay,
        )
    index, conv = chosen
    label = conv.label(index)
    position = assistant_count(body)
    if position >= len(conv.steps):
        return Reply(
            kind="final",
            conversation=label,
            step=None,
            text=conv.final_text or script.final_text,
            usage=base_usage,
            delay_s=delay,
            chunk_delay_s=chunk_delay,
        )
    step = conv.steps[position]
    calls = tuple(
        PlannedToolCall(
            id=call.id or tool_call_id(position, n),
            name=call.name,
            arguments=encode_arguments(call.arguments),
        )
        for n, call in enumerate(step.tool_calls)
    )
    return Reply(
        kind="step",
        conversation=label,
        step=position,
        text=step.text,
        reasoning=step.reasoning,
        tool_calls=calls,
        usage=resolve_usage(base_usage, step.usage),
        delay_s=delay if step.delay_s is None else step.delay_s,
        chunk_delay_s=chunk_delay if step.chunk_delay_s is None else step.chunk_delay_s,
        error=step.error,
    )
