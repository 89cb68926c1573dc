"""The HTTP server: endpoints, SSE framing, keep-alive, delays, errors, threads, serve()."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import msgspec
import pytest

from arenad.scripted_model import Script, ScriptedModelServer, parse_script, run_in_thread
from arenad.scripted_model.script import ScriptError
from arenad.scripted_model.server import serve

REPO = Path(__file__).resolve().parents[2]

SCRIPT = """
chunk_chars = 4
[usage]
prompt_tokens = 1000
completion_tokens = 50
cached_tokens = 200
reasoning_tokens = 7

[[models]]
id = "m1"
[[models]]
id = "m2"

[[conversations]]
match = "write"
[[conversations.steps]]
text = "Writing it."
[[conversations.steps.tool_calls]]
name = "write"
arguments = { filePath = "a.txt", content = "hello\\n" }
[[conversations.steps]]
text = "Done writing."
delay_s = 1.5
chunk_delay_s = 0.5

[[conversations]]
match = "slow"
[[conversations.steps]]
text = "finally"
delay_s = 3600

[[conversations]]
match = "broken"
[[conversations.steps]]
error = { status = 503, message = "overloaded" }

[[conversations]]
match = "mid-answer"
[[conversations.steps]]
error = { status = 529, message = "Overloaded", in_stream = true }
"""


class Response(msgspec.Struct):
    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)

    def sse(self) -> list[str]:
        assert self.body.endswith(b"\n\n")
        events = self.body[:-2].split(b"\n\n")
        assert all(e.startswith(b"data: ") for e in events), events
        return [e[len(b"data: ") :].decode() for e in events]


def request_bytes(method: str, path: str, body: Any = None, close: bool = True) -> bytes:
    data = b"" if body is None else json.dumps(body).encode()
    head = f"{method} {path} HTTP/1.1\r\nHost: x\r\nContent-Length: {len(data)}\r\n"
    if close:
        head += "Connection: close\r\n"
    return head.encode() + b"\r\n" + data


async def read_response(reader: asyncio.StreamReader) -> Response:
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    status = int(lines[0].split()[1])
    headers = {}
    for line in lines[1:]:
        if line:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
    if "content-length" in headers:
        body = await reader.readexactly(int(headers["content-length"]))
    else:
        body = await reader.read()  # delimited by the close
    return Response(status, headers, body)


async def call(port: int, method: str, path: str, body: Any = None) -> Response:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(request_bytes(method, path, body))
        await writer.drain()
        return await read_response(reader)
    finally:
        writer.close()


def chat(*messages: tuple[str, Any], model: str = "m1", stream: bool = True) -> dict[str, Any]:
    out: dict[str, Any] = {
        "model": model,
        "stream": stream,
        "messages": [{"role": r, "content": c} for r, c in messages],
    }
    if stream:
        out["stream_options"] = {"include_usage": True}
    return out


async def eventually(condition: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met before the deadline")
        await asyncio.sleep(0.01)


@pytest.fixture
def script() -> Script:
    return parse_script(SCRIPT, "server-test.toml")


@pytest.fixture
async def server(script: Script) -> AsyncIterator[ScriptedModelServer]:
    async with ScriptedModelServer(script, clock=lambda: 1700000000.0) as srv:
        yield srv


async def test_models_list(server: ScriptedModelServer) -> None:
    resp = await call(server.port, "GET", "/v1/models")
    assert resp.status == 200
    assert resp.headers["content-type"] == "application/json"
    data = resp.json()
    assert data["object"] == "list"
    assert [m["id"] for m in data["data"]] == ["m1", "m2"]
    assert all(m["object"] == "model" for m in data["data"])
    one = await call(server.port, "GET", "/v1/models/m2")
    assert one.status == 200 and one.json()["id"] == "m2"
    missing = await call(server.port, "GET", "/v1/models/nope")
    assert missing.status == 404 and missing.json()["error"]["code"] == "model_not_found"


async def test_unknown_path_is_a_404_json_error(server: ScriptedModelServer) -> None:
    resp = await call(server.port, "GET", "/v2/whatever?x=1")
    assert resp.status == 404
    assert resp.json()["error"]["code"] == "not_found"
    assert "/v2/whatever" in resp.json()["error"]["message"]
    wrong = await call(server.port, "GET", "/v1/chat/completions")
    assert wrong.status == 405 and "error" in wrong.json()


async def test_streamed_tool_call_then_text(server: ScriptedModelServer) -> None:
    first = chat(("system", "sys"), ("user", "please write a file"))
    resp = await call(server.port, "POST", "/v1/chat/completions", first)
    assert resp.status == 200
    assert resp.headers["content-type"].startswith("text/event-stream")
    events = resp.sse()
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    assert {c["object"] for c in chunks} == {"chat.completion.chunk"}
    assert len({c["id"] for c in chunks}) == 1
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant"}
    text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks if c["choices"])
    assert text == "Writing it."
    calls = [
        d for c in chunks if c["choices"] for d in c["choices"][0]["delta"].get("tool_calls", [])
    ]
    assert calls[0]["id"] == "call_1_1" and calls[0]["function"]["name"] == "write"
    args = "".join(d["function"]["arguments"] for d in calls)
    assert json.loads(args) == {"filePath": "a.txt", "content": "hello\n"}
    assert chunks[-2]["choices"][0]["finish_reason"] == "tool_calls"
    # The final chunk carries the usage (opencode sends stream_options.include_usage).
    assert chunks[-1]["choices"] == []
    assert chunks[-1]["usage"] == {
        "prompt_tokens": 1000,
        "completion_tokens": 50,
        "total_tokens": 1050,
        "prompt_tokens_details": {"cached_tokens": 200},
        "completion_tokens_details": {"reasoning_tokens": 7},
    }
    assert server.requests == [first]
    assert [(r.kind, r.step) for r in server.replies] == [("step", 0)]


async def test_non_stream_completion_and_keep_alive(server: ScriptedModelServer) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    try:
        history = [("user", "write it"), ("assistant", "Writing it."), ("tool", "ok")]
        writer.write(request_bytes("GET", "/v1/models", close=False))
        writer.write(
            request_bytes("POST", "/v1/chat/completions", chat(*history[:1], stream=False), False)
        )
        writer.write(
            request_bytes("POST", "/v1/chat/completions", chat(*history, stream=False), True)
        )
        await writer.drain()
        models = await read_response(reader)
        first = await read_response(reader)
        second = await read_response(reader)
        assert await reader.read() == b""  # closed after the `Connection: close` one
    finally:
        writer.close()
    assert models.status == 200 and models.headers["connection"] == "keep-alive"
    message = first.json()["choices"][0]["message"]
    assert first.json()["object"] == "chat.completion"
    assert first.json()["created"] == 1700000000
    assert message["content"] == "Writing it."
    assert message["tool_calls"][0]["function"]["name"] == "write"
    assert first.json()["choices"][0]["finish_reason"] == "tool_calls"
    assert second.json()["choices"][0]["message"] == {
        "role": "assistant",
        "content": "Done writing.",
    }
    assert second.json()["choices"][0]["finish_reason"] == "stop"
    assert second.json()["usage"]["total_tokens"] == 1050


async def test_bad_bodies_and_unknown_models(server: ScriptedModelServer) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    writer.write(b"POST /v1/chat/completions HTTP/1.1\r\nContent-Length: 3\r\n\r\n{x}")
    await writer.drain()
    bad = await read_response(reader)
    writer.close()
    assert bad.status == 400 and "not JSON" in bad.json()["error"]["message"]
    unknown = await call(
        server.port, "POST", "/v1/chat/completions", chat(("user", "x"), model="zz")
    )
    assert unknown.status == 404
    assert unknown.json()["error"]["code"] == "model_not_found"
    assert "m1, m2" in unknown.json()["error"]["message"]


async def test_chunked_request_body(server: ScriptedModelServer) -> None:
    data = json.dumps(chat(("user", "hi"), stream=False)).encode()
    half = len(data) // 2
    raw = (
        b"POST /v1/chat/completions HTTP/1.1\r\nTransfer-Encoding: chunked\r\n"
        b"Connection: close\r\n\r\n"
        + f"{half:x}\r\n".encode()
        + data[:half]
        + b"\r\n"
        + f"{len(data) - half:x}\r\n".encode()
        + data[half:]
        + b"\r\n0\r\n\r\n"
    )
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    writer.write(raw)
    await writer.drain()
    resp = await read_response(reader)
    writer.close()
    assert resp.status == 200
    assert resp.json()["choices"][0]["message"]["content"] == "Done."  # nothing matched


async def test_scripted_error_step(server: ScriptedModelServer) -> None:
    resp = await call(server.port, "POST", "/v1/chat/completions", chat(("user", "broken")))
    assert resp.status == 503
    assert resp.json()["error"]["message"] == "overloaded"


@pytest.mark.parametrize(
    ("path", "body", "first", "error"),
    [
        (
            "/v1/chat/completions",
            chat(("user", "mid-answer")),
            b'data: {"id":"chatcmpl-scripted-1"',
            {"error": {"message": "Overloaded", "type": "server_error"}},
        ),
        (
            "/v1/responses",
            {"model": "m1", "stream": True, "input": "mid-answer"},
            b"event: response.created\n",
            {"type": "error", "message": "Overloaded", "code": "scripted_error"},
        ),
        (
            "/v1/messages",
            {
                "model": "m1",
                "stream": True,
                "max_tokens": 9,
                "messages": [chat(("user", "mid-answer"))["messages"][0]],
            },
            b"event: message_start\n",
            {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}},
        ),
    ],
)
async def test_an_in_stream_error_is_a_200_stream_that_fails_without_its_end(
    server: ScriptedModelServer, path: str, body: dict[str, Any], first: bytes, error: Any
) -> None:
    resp = await call(server.port, "POST", path, body)
    assert resp.status == 200
    assert resp.body.startswith(first)
    events = resp.body[:-2].split(b"\n\n")
    assert len(events) == 2  # the stream's first event, then the error: no end, no [DONE]
    data = json.loads(events[1].split(b"data: ", 1)[1])
    data.pop("sequence_number", None)
    for key, value in error.items():
        if isinstance(value, dict):
            assert {k: data[key][k] for k in value} == value
        else:
            assert data[key] == value
    # Without streaming it is the HTTP error, as before.
    whole = await call(server.port, "POST", path, {**body, "stream": False})
    assert whole.status == 529


async def test_delays_are_taken_from_the_step(script: Script) -> None:
    slept: list[float] = []

    async def fake_sleep(seconds: float) -> None:
        slept.append(seconds)

    async with ScriptedModelServer(script, sleep=fake_sleep) as srv:
        history = (("user", "write"), ("assistant", "Writing it."), ("tool", "ok"))
        resp = await call(srv.port, "POST", "/v1/chat/completions", chat(*history))
    n_events = len(resp.sse()) - 1  # without [DONE]
    assert slept == [1.5] + [0.5] * (n_events - 1)


async def test_a_long_delay_holds_the_request_until_stopped(script: Script) -> None:
    srv = ScriptedModelServer(script)
    port = await srv.start()
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(request_bytes("POST", "/v1/chat/completions", chat(("user", "slow please"))))
    await writer.drain()
    # The request is recorded before the delay, so a test can wait for it to be held.
    await eventually(lambda: len(srv.requests) == 1)
    assert srv.replies[0].delay_s == 3600
    pending = asyncio.ensure_future(reader.read())
    done, _ = await asyncio.wait({pending}, timeout=0.2)
    assert not done  # nothing answered yet
    await asyncio.wait_for(srv.stop(), timeout=10)  # stop() drops held connections
    assert await asyncio.wait_for(pending, timeout=10) == b""  # closed without an answer
    writer.close()


def test_run_in_thread_for_sync_callers(script: Script) -> None:
    srv = run_in_thread(script)
    try:
        with urllib.request.urlopen(f"{srv.base_url}/models", timeout=10) as resp:
            assert [m["id"] for m in json.load(resp)["data"]] == ["m1", "m2"]
        req = urllib.request.Request(
            f"{srv.base_url}/chat/completions",
            data=json.dumps(chat(("user", "hello"), stream=False)).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(req, timeout=10) as resp:
            assert json.load(resp)["choices"][0]["message"]["content"] == "Done."
        # The script can be swapped between requests.
        srv.script = parse_script(
            '[[models]]\nid = "m1"\n[[conversations]]\n[[conversations.steps]]\ntext = "v2"\n'
        )
        with urllib.request.urlopen(req, timeout=10) as resp:
            assert json.load(resp)["choices"][0]["message"]["content"] == "v2"
        with pytest.raises(urllib.error.HTTPError) as info:
            urllib.request.urlopen(f"{srv.base_url}/nothing", timeout=10)
        assert info.value.code == 404
        assert len(srv.requests) == 2
    finally:
        srv.stop()
    srv.stop()  # idempotent


def test_run_in_thread_reports_a_bind_failure(script: Script) -> None:
    with run_in_thread(script) as first, pytest.raises(OSError):
        run_in_thread(script, port=first.port)


def test_serve_blocks_until_sigterm(tmp_path: Path) -> None:
    path = tmp_path / "s.toml"
    path.write_text(SCRIPT)
    code = (
        "import sys\nfrom pathlib import Path\n"
        "from arenad.scripted_model.server import serve\n"
        "serve(Path(sys.argv[1]), '127.0.0.1', 0, ready=lambda p: print(p, flush=True))\n"
        "print('stopped', flush=True)\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", code, str(path)],
        cwd=REPO,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    try:
        assert proc.stdout is not None
        port = int(proc.stdout.readline())
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=10) as resp:
            assert resp.status == 200
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
        assert proc.stdout.read().strip() == "stopped"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_serve_rejects_an_invalid_script(tmp_path: Path) -> None:
    path = tmp_path / "bad.toml"
    path.write_text('[[models]]\nid = "m"\nwhat = 1\n')
    with pytest.raises(ScriptError, match=r"bad\.toml: .*unknown field `what`"):
        serve(path, "127.0.0.1", 0)
