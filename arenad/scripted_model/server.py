"""The scripted model server (OpenAI- and Anthropic-compatible): asyncio streams, HTTP/1.1.

Endpoints (everything else is a 404 JSON error):

* ``GET /v1/models`` and ``GET /v1/models/<id>``: the script's models, OpenAI list format.
* ``POST /v1/chat/completions``: answered from the script (see ``arenad.scripted_model.script``
  for the format and how a request picks its answer). ``stream: true`` gets SSE
  (``data: {chunk}\\n\\n`` ... ``data: [DONE]\\n\\n``, then the connection closes);
  ``stream: false`` (or absent) gets one chat.completion JSON on a keep-alive connection.
  A request for a model the script does not list gets 404 ``model_not_found``.
* ``POST /v1/responses`` (OpenAI's responses, :mod:`arenad.scripted_model.responses`) and
  ``POST /v1/messages`` (Anthropic's, :mod:`arenad.scripted_model.messages`): the same script
  answers them, each request read as the chat history it carries; streamed as the wire's
  typed events (``event:`` + ``data:``), errors in the wire's shape.

Three ways to run it:

* :func:`serve` blocks until SIGINT/SIGTERM (``arenad scripted-model --script FILE``).
* :class:`ScriptedModelServer` inside a running event loop (``async with`` or start/stop).
* :func:`run_in_thread` for synchronous callers: its own loop in a daemon thread.

Every parsed request body (of any of the three) is appended to ``.requests`` (before any
scripted delay, so a test can see that a request arrived and is being held), and the answer
chosen for it to ``.replies``.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import signal
import threading
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, Self

import msgspec

from arenad.scripted_model import messages, responses, wire
from arenad.scripted_model.script import Reply, Script, load_script, plan_reply

log = logging.getLogger("arenad.scripted_model")

MAX_BODY_BYTES = 64 * 1024 * 1024
_HEADER_LIMIT = 1024 * 1024
_REASONS = {
    200: "OK",
    400: "Bad Request",
    404: "Not Found",
    405: "Method Not Allowed",
    408: "Request Timeout",
    413: "Payload Too Large",
    429: "Too Many Requests",
    500: "Internal Server Error",
    502: "Bad Gateway",
    503: "Service Unavailable",
    529: "Overloaded",
}


class _BadRequest(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


class _Request(msgspec.Struct, frozen=True, kw_only=True):
    method: str
    path: str
    version: str
    headers: dict[str, str]
    body: bytes

    @property
    def keep_alive(self) -> bool:
        connection = self.headers.get("connection", "").lower()
        if self.version == "HTTP/1.0":
            return connection == "keep-alive"
        return connection != "close"


async def _read_request(reader: asyncio.StreamReader) -> _Request | None:
    """One request from the stream, or None at a clean EOF between requests."""
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError as exc:
        if not exc.partial.strip():
            return None
        raise _BadRequest(400, "incomplete request head") from None
    except asyncio.LimitOverrunError:
        raise _BadRequest(400, "request head too large") from None
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ")
    if len(parts) != 3 or not parts[2].startswith("HTTP/"):
        raise _BadRequest(400, f"bad request line {lines[0][:80]!r}")
    method, target, version = parts
    headers: dict[str, str] = {}
    for line in lines[1:]:
        if not line:
            continue
        name, sep, value = line.partition(":")
        if not sep:
            raise _BadRequest(400, "bad header line")
        headers[name.strip().lower()] = value.strip()
    body = await _read_body(reader, headers)
    path = target.split("?", 1)[0]
    return _Request(method=method.upper(), path=path, version=version, headers=headers, body=body)


async def _read_body(reader: asyncio.StreamReader, headers: dict[str, str]) -> bytes:
    if "chunked" in headers.get("transfer-encoding", "").lower():
        body = bytearray()
        while True:
            size_line = await reader.readuntil(b"\r\n")
            try:
                size = int(size_line.split(b";", 1)[0].strip(), 16)
            except ValueError:
                raise _BadRequest(400, "bad chunk size") from None
            if size == 0:
                while (await reader.readuntil(b"\r\n")) != b"\r\n":
                    pass  # trailers
                return bytes(body)
            if len(body) + size > MAX_BODY_BYTES:
                raise _BadRequest(413, "request body too large")
            body += await reader.readexactly(size)
            await reader.readexactly(2)
    length_text = headers.get("content-length", "0")
    try:
        length = int(length_text)
    except ValueError:
        raise _BadRequest(400, "bad content-length") from None
    if length < 0:
        raise _BadRequest(400, "bad content-length")
    if length > MAX_BODY_BYTES:
        raise _BadRequest(413, "request body too large")
    return await reader.readexactly(length) if length else b""


def _head(status: int, headers: list[tuple[str, str]]) -> bytes:
    lines = [f"HTTP/1.1 {status} {_REASONS.get(status, 'Error')}"]
    lines += [f"{name}: {value}" for name, value in headers]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


class _Answer(msgspec.Struct, frozen=True, kw_only=True):
    """One planned answer and what its wire needs to phrase it."""

    reply: Reply
    body: dict[str, Any]
    script: Script
    model: str
    created: int
    id: str


@dataclass(frozen=True, kw_only=True)
class _Wire:
    """One wire format the server answers: how its request reads as a chat history (the
    script's input), how an answer and an error are phrased, and its stream's last bytes."""

    name: str
    id_prefix: str
    view: Callable[[dict[str, Any]], Mapping[str, Any]]
    whole: Callable[[_Answer], dict[str, Any]]
    events: Callable[[_Answer], list[bytes]]
    error: Callable[[int, str, str | None], dict[str, Any]]
    # The error as an event inside a 200 stream (a provider failing mid-answer).
    stream_error: Callable[[int, str], bytes]
    done: bytes = b""


def _chat_events(a: _Answer) -> list[bytes]:
    options = a.body.get("stream_options")
    chunks = wire.stream_chunks(
        a.reply,
        completion_id=a.id,
        model=a.model,
        created=a.created,
        chunk_chars=a.script.chunk_chars,
        include_usage=isinstance(options, dict) and options.get("include_usage") is True,
        extras=wire.extras_for(a.body, a.script),
    )
    return [wire.sse_event(chunk) for chunk in chunks]


def _chat_whole(a: _Answer) -> dict[str, Any]:
    return wire.completion(
        a.reply,
        completion_id=a.id,
        model=a.model,
        created=a.created,
        extras=wire.extras_for(a.body, a.script),
        chunk_chars=a.script.chunk_chars,
    )


def _openai_error(status: int, message: str, code: str | None) -> dict[str, Any]:
    return wire.error_body(message, wire.error_type(status), code)


def _responses_whole(a: _Answer) -> dict[str, Any]:
    return responses.response(
        a.reply,
        response_id=a.id,
        model=a.model,
        created=a.created,
        extras=responses.extras_for(a.body, a.script),
        chunk_chars=a.script.chunk_chars,
        input_messages=responses.raw_input_messages(a.body, a.script),
    )


def _responses_events(a: _Answer) -> list[bytes]:
    return responses.events(
        a.reply,
        response_id=a.id,
        model=a.model,
        created=a.created,
        extras=responses.extras_for(a.body, a.script),
        chunk_chars=a.script.chunk_chars,
        input_messages=responses.raw_input_messages(a.body, a.script),
    )


def _chat_stream_error(status: int, message: str) -> bytes:
    return wire.sse_event(_openai_error(status, message, "scripted_error"))


def _responses_stream_error(status: int, message: str) -> bytes:
    # OpenAI's responses ``error`` event: code, message, param (no error type).
    event = {"type": "error", "code": "scripted_error", "message": message, "param": None}
    return responses.named_event(1, event)


_WIRES = {
    "/v1/chat/completions": _Wire(
        name="chat",
        id_prefix="chatcmpl",
        view=lambda body: body,
        whole=_chat_whole,
        events=_chat_events,
        error=_openai_error,
        stream_error=_chat_stream_error,
        done=wire.SSE_DONE,
    ),
    "/v1/responses": _Wire(
        name="responses",
        id_prefix="resp",
        view=responses.chat_view,
        whole=_responses_whole,
        events=_responses_events,
        error=_openai_error,
        stream_error=_responses_stream_error,
    ),
    "/v1/messages": _Wire(
        name="messages",
        id_prefix="msg",
        view=messages.chat_view,
        whole=lambda a: messages.message(a.reply, message_id=a.id, model=a.model),
        events=lambda a: messages.events(
            a.reply, message_id=a.id, model=a.model, chunk_chars=a.script.chunk_chars
        ),
        error=lambda status, message, _code: messages.error_body(status, message),
        stream_error=lambda status, message: responses.named_event(
            -1, messages.error_body(status, message)
        ),
    ),
}


class ScriptedModelServer:
    """An OpenAI-compatible chat-completions server answering from a :class:`Script`.

    ``script`` may be replaced between requests (each request reads it once). ``clock``
    (epoch seconds, for ``created``) and ``sleep`` (the scripted delays) can be swapped in
    tests.
    """

    def __init__(
        self,
        script: Script,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self.script = script
        self._sleep = sleep
        self.host = host
        self._requested_port = port
        self._clock = clock
        self._server: asyncio.Server | None = None
        self._port: int | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self._ids = itertools.count(1)
        self.requests: list[dict[str, Any]] = []
        # Each chat request's Authorization header (None: absent). In memory only, for
        # tests that check which credentials reached the model; never logged.
        self.authorizations: list[str | None] = []
        # Each request's x-api-key header (Anthropic's auth; None: absent), the same way.
        self.api_keys: list[str | None] = []
        self.replies: list[Reply] = []

    # -- lifecycle ---------------------------------------------------------------------

    async def start(self) -> int:
        """Bind and start serving; returns the bound port."""
        if self._server is not None:
            raise RuntimeError("the scripted model server is already started")
        self._server = await asyncio.start_server(
            self._handle, self.host, self._requested_port, limit=_HEADER_LIMIT
        )
        self._port = int(self._server.sockets[0].getsockname()[1])
        log.info("scripted model listening on %s", self.base_url)
        return self._port

    async def stop(self) -> None:
        """Stop listening and drop open connections (including ones held by a delay)."""
        server, self._server = self._server, None
        if server is None:
            return
        server.close()
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await server.wait_closed()

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()

    @property
    def port(self) -> int:
        if self._port is None:
            raise RuntimeError("the scripted model server has not been started")
        return self._port

    @property
    def base_url(self) -> str:
        """The OpenAI base URL, ending in ``/v1`` (what opencode's ``baseURL`` wants)."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/v1"

    # -- connections -------------------------------------------------------------------

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._tasks.add(task)
        try:
            while True:
                try:
                    request = await _read_request(reader)
                except _BadRequest as exc:
                    await self._send_json(
                        writer,
                        exc.status,
                        wire.error_body(exc.message, "invalid_request_error"),
                        keep_alive=False,
                    )
                    return
                if request is None:
                    return
                if not await self._dispatch(request, writer):
                    return
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            pass  # the client went away; nothing to answer
        finally:
            if task is not None:
                self._tasks.discard(task)
            writer.close()
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await writer.wait_closed()

    async def _dispatch(self, request: _Request, writer: asyncio.StreamWriter) -> bool:
        """Answer one request; returns whether the connection stays open."""
        keep = request.keep_alive
        path = request.path.rstrip("/") or "/"
        created = int(self._clock())
        if path == "/v1/models":
            if request.method != "GET":
                return await self._method_not_allowed(writer, request, keep)
            return await self._send_json(writer, 200, wire.models_list(self.script, created), keep)
        if path.startswith("/v1/models/"):
            if request.method != "GET":
                return await self._method_not_allowed(writer, request, keep)
            model_id = path.removeprefix("/v1/models/")
            if self.script.model(model_id) is None:
                body = wire.error_body(
                    f"model {model_id!r} not found", "invalid_request_error", "model_not_found"
                )
                return await self._send_json(writer, 404, body, keep)
            return await self._send_json(writer, 200, wire.model_object(model_id, created), keep)
        wire_format = _WIRES.get(path)
        if wire_format is not None:
            if request.method != "POST":
                return await self._method_not_allowed(writer, request, keep)
            return await self._call(wire_format, request, writer, created)
        body = wire.error_body(
            f"unknown path {request.method} {request.path}", "invalid_request_error", "not_found"
        )
        return await self._send_json(writer, 404, body, keep)

    async def _method_not_allowed(
        self, writer: asyncio.StreamWriter, request: _Request, keep: bool
    ) -> bool:
        body = wire.error_body(
            f"method {request.method} not allowed on {request.path}", "invalid_request_error"
        )
        return await self._send_json(writer, 405, body, keep)

    async def _call(
        self, wire_format: _Wire, request: _Request, writer: asyncio.StreamWriter, created: int
    ) -> bool:
        keep = request.keep_alive
        try:
            body = msgspec.json.decode(request.body)
        except msgspec.DecodeError as exc:
            err = wire_format.error(400, f"request body is not JSON: {exc}", None)
            return await self._send_json(writer, 400, err, keep)
        if not isinstance(body, dict):
            err = wire_format.error(400, "request body must be a JSON object", None)
            return await self._send_json(writer, 400, err, keep)
        self.requests.append(body)
        self.authorizations.append(request.headers.get("authorization"))
        self.api_keys.append(request.headers.get("x-api-key"))
        script = self.script
        model = body.get("model")
        if not isinstance(model, str) or script.model(model) is None:
            err = wire_format.error(
                404,
                f"model {model!r} is not in the script (models: {', '.join(script.model_ids)})",
                "model_not_found",
            )
            return await self._send_json(writer, 404, err, keep)
        reply = plan_reply(script, wire_format.view(body))
        self.replies.append(reply)
        log.info(
            "%s request %d: model=%s %s conversation=%s step=%s",
            wire_format.name,
            len(self.requests),
            model,
            reply.kind,
            reply.conversation,
            None if reply.step is None else reply.step + 1,
        )
        if reply.delay_s > 0:
            await self._sleep(reply.delay_s)
        streamed = body.get("stream") is True
        if reply.error is not None and not (reply.error.in_stream and streamed):
            status = reply.error.status
            err = wire_format.error(status, reply.error.message, "scripted_error")
            extra = []
            if reply.error.retry_after_ms is not None:
                extra.append(("retry-after-ms", str(reply.error.retry_after_ms)))
            return await self._send_json(writer, status, err, keep, extra)
        answer = _Answer(
            reply=reply,
            body=body,
            script=script,
            model=model,
            created=created,
            id=f"{wire_format.id_prefix}-scripted-{next(self._ids)}",
        )
        if reply.error is not None:
            # In the stream: it starts as an answer would, then fails without its end.
            failed = wire_format.stream_error(reply.error.status, reply.error.message)
            await self._send_sse(writer, [*wire_format.events(answer)[:1], failed], 0.0, b"")
            return False
        if streamed:
            events = wire_format.events(answer)
            await self._send_sse(writer, events, reply.chunk_delay_s, wire_format.done)
            return False
        return await self._send_json(writer, 200, wire_format.whole(answer), keep)

    async def _send_json(
        self,
        writer: asyncio.StreamWriter,
        status: int,
        payload: dict[str, Any],
        keep_alive: bool,
        extra: Sequence[tuple[str, str]] = (),
    ) -> bool:
        data = msgspec.json.encode(payload)
        headers = [
            ("Content-Type", "application/json"),
            ("Content-Length", str(len(data))),
            ("Connection", "keep-alive" if keep_alive else "close"),
            *extra,
        ]
        writer.write(_head(status, headers) + data)
        await writer.drain()
        return keep_alive

    async def _send_sse(
        self, writer: asyncio.StreamWriter, events: list[bytes], chunk_delay_s: float, done: bytes
    ) -> None:
        headers = [
            ("Content-Type", "text/event-stream; charset=utf-8"),
            ("Cache-Control", "no-cache"),
            ("Connection", "close"),
        ]
        writer.write(_head(200, headers))
        await writer.drain()
        for index, event in enumerate(events):
            if index and chunk_delay_s > 0:
                await self._sleep(chunk_delay_s)
            writer.write(event)
            await writer.drain()
        if done:
            writer.write(done)
            await writer.drain()


# -- blocking entry point --------------------------------------------------------------------


def serve(
    script_path: Path,
    host: str,
    port: int,
    ready: Callable[[int], None] | None = None,
) -> None:
    """Load ``script_path`` and serve it until SIGINT or SIGTERM; blocks.

    Raises ``ScriptError`` (a ``UserError``) if the script is invalid, ``OSError`` if the
    address cannot be bound. ``ready`` is called with the bound port once listening.
    """
    script = load_script(script_path)
    asyncio.run(_serve_until_signalled(script, host, port, ready))


async def _serve_until_signalled(
    script: Script, host: str, port: int, ready: Callable[[int], None] | None
) -> None:
    server = ScriptedModelServer(script, host, port)
    bound = await server.start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    installed: list[signal.Signals] = []
    for sig in (signal.SIGINT, signal.SIGTERM):
        try:
            loop.add_signal_handler(sig, stop.set)
        except (NotImplementedError, RuntimeError, ValueError):
            continue  # not the main thread, or no signal support: rely on cancellation
        installed.append(sig)
    try:
        if ready is not None:
            ready(bound)
        await stop.wait()
    finally:
        for sig in installed:
            loop.remove_signal_handler(sig)
        await server.stop()


# -- background thread for synchronous callers ---------------------------------------------


class ThreadedScriptedModel:
    """A :class:`ScriptedModelServer` on its own event loop in a daemon thread.

    Use :func:`run_in_thread`, or ``with ThreadedScriptedModel(script) as server:``.
    ``requests`` / ``replies`` are the live lists of the server (appended from its thread).
    """

    def __init__(self, script: Script, host: str = "127.0.0.1", port: int = 0) -> None:
        self._server = ScriptedModelServer(script, host, port)
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop_event: asyncio.Event | None = None
        self._started = threading.Event()
        self._error: BaseException | None = None

    def start(self, timeout: float = 30.0) -> int:
        if self._thread is not None:
            raise RuntimeError("already started")
        self._started = threading.Event()
        self._error = None
        self._thread = threading.Thread(target=self._run, name="arenad-scripted-model", daemon=True)
        self._thread.start()
        if not self._started.wait(timeout):
            raise RuntimeError(f"the scripted model server did not start within {timeout} s")
        if self._error is not None:
            self._thread.join()
            self._thread = None
            raise self._error
        return self.port

    def _run(self) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        try:
            loop.run_until_complete(self._main())
        except BaseException as exc:  # surfaced to start() if it happens before ready
            if not self._started.is_set():
                self._error = exc
                self._started.set()
            else:
                log.exception("scripted model server thread failed")
        finally:
            loop.close()

    async def _main(self) -> None:
        self._stop_event = asyncio.Event()
        await self._server.start()
        self._started.set()
        try:
            await self._stop_event.wait()
        finally:
            await self._server.stop()

    def stop(self, timeout: float = 30.0) -> None:
        """Stop the server and join its thread (idempotent)."""
        thread, self._thread = self._thread, None
        if thread is None:
            return
        loop, event = self._loop, self._stop_event
        if loop is not None and event is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):  # the loop already finished
                loop.call_soon_threadsafe(event.set)
        thread.join(timeout)
        if thread.is_alive():
            raise RuntimeError(f"the scripted model server did not stop within {timeout} s")

    def __enter__(self) -> Self:
        if self._thread is None:  # run_in_thread() hands it out already started
            self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    @property
    def script(self) -> Script:
        return self._server.script

    @script.setter
    def script(self, script: Script) -> None:
        self._server.script = script

    @property
    def port(self) -> int:
        return self._server.port

    @property
    def base_url(self) -> str:
        return self._server.base_url

    @property
    def requests(self) -> list[dict[str, Any]]:
        return self._server.requests

    @property
    def replies(self) -> list[Reply]:
        return self._server.replies

    @property
    def authorizations(self) -> list[str | None]:
        return self._server.authorizations

    @property
    def api_keys(self) -> list[str | None]:
        return self._server.api_keys


def run_in_thread(script: Script, host: str = "127.0.0.1", port: int = 0) -> ThreadedScriptedModel:
    """Start a scripted model server in a background thread; returns it started.

    ``server.port`` is the bound port; call ``server.stop()`` (or use it as a context
    manager) to shut it down.
    """
    server = ThreadedScriptedModel(script, host, port)
    server.start()
    return server
