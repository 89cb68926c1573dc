"""One real store, written by the real opencode CLI against an inline SSE mock.

The mock is a throwaway OpenAI-compatible ``/v1/chat/completions`` stream (not
``arenad scripted-model``): step 1 reasons, talks and calls ``read``; step 2 calls
``task`` (a subagent session, answered by the mock's child branch); step 3 stops.
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
from collections.abc import Iterator
from dataclasses import replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import msgspec
import pytest

from arenad.js import js_stringify_bytes
from arenad.recovery.opencode_spend import USAGE_COLUMNS, session_spend, sup_spend, tree_spend
from arenad.recovery.opencode_store import capture_session_tree, capture_sessions_by_directory
from arenad.recovery.opencode_transcript import capture_chat_messages, opencode_session_info
from tests.recovery.opencode_fixture import file_state

pytestmark = pytest.mark.slow

USAGE = {
    "prompt_tokens": 1000,
    "completion_tokens": 50,
    "total_tokens": 1050,
    "prompt_tokens_details": {"cached_tokens": 200},
    "completion_tokens_details": {"reasoning_tokens": 7},
}


class _Mock(BaseHTTPRequestHandler):
    workspace = ""

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _chunk(self, delta: dict[str, Any], finish: str | None = None, usage: Any = None) -> None:
        body: dict[str, Any] = {
            "id": "c",
            "object": "chat.completion.chunk",
            "created": 1,
            "model": "mock",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        }
        if usage is not None:
            body["usage"] = usage
        self.wfile.write(b"data: " + json.dumps(body).encode() + b"\n\n")

    def _call(self, call_id: str, name: str, args: dict[str, Any]) -> None:
        fn = {"name": name, "arguments": json.dumps(args)}
        self._chunk(
            {"role": "assistant", "tool_calls": [{"index": 0, "id": call_id, "function": fn}]}
        )

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers.get("content-length", "0"))))
        messages = body.get("messages", [])
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.end_headers()
        tool_results = sum(1 for m in messages if m.get("role") == "tool")
        users = [m for m in messages if m.get("role") == "user"]
        if "SUBTASK-PROMPT" in json.dumps(users):
            self._chunk({"role": "assistant", "content": "child done"})
            self._chunk({}, "stop", USAGE)
        elif tool_results == 0:
            self._chunk({"role": "assistant", "reasoning_content": "I should read it."})
            self._chunk({"content": "Let me read it."})
            self._call("call_read_1", "read", {"filePath": f"{self.workspace}/hello.txt"})
            self._chunk({}, "tool-calls", USAGE)
        elif tool_results == 1:
            task = {"description": "sub", "prompt": "SUBTASK-PROMPT hi", "subagent_type": "general"}
            self._call("call_task_1", "task", task)
            self._chunk({}, "tool-calls", USAGE)
        else:
            self._chunk({"role": "assistant", "content": "All done."})
            self._chunk({}, "stop", USAGE)
        self.wfile.write(b"data: [DONE]\n\n")


@pytest.fixture
def mock_url(tmp_path: Path) -> Iterator[str]:
    handler = type("Handler", (_Mock,), {"workspace": str(tmp_path / "ws")})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def test_capture_and_project_a_store_the_real_cli_wrote(
    tmp_path: Path, mock_url: str, opencode_bin: Path
) -> None:
    binary = str(opencode_bin)
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "hello.txt").write_text("hello world\n")
    home = tmp_path / "home"
    db = home / "store" / "opencode.db"
    db.parent.mkdir(parents=True)
    config = {
        "model": "local/mock",
        "provider": {
            "local": {
                "npm": "@ai-sdk/openai-compatible",
                "name": "local",
                "options": {"baseURL": mock_url, "apiKey": "unused"},
                "models": {
                    "mock": {
                        "name": "mock",
                        "limit": {"context": 100000, "output": 4000},
                        "cost": {"input": 3, "output": 15, "cache_read": 0.3},
                    }
                },
            }
        },
    }
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(home),
        "XDG_DATA_HOME": str(home / "data"),
        "XDG_CONFIG_HOME": str(home / "config"),
        "XDG_CACHE_HOME": str(home / "cache"),
        "XDG_STATE_HOME": str(home / "state"),
        "OPENCODE_DB": str(db),
        "OPENCODE_CONFIG_CONTENT": json.dumps(config),
        "OPENCODE_DISABLE_MODELS_FETCH": "1",
        "OPENCODE_DISABLE_AUTOUPDATE": "1",
    }
    run = subprocess.run(
        [binary, "run", "--format", "json", "--title", "cell-1"],
        input="Read hello.txt\n",
        cwd=ws,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    wal = db.with_name("opencode.db-wal")
    assert wal.stat().st_size > 0  # opencode leaves its WAL un-checkpointed
    before = file_state(db)

    caps = capture_session_tree(db, None, attempt=1)

    assert isinstance(caps, list)
    after = file_state(db)
    assert after[db.name] == before[db.name] and after[wal.name] == before[wal.name]
    assert set(after) == set(before)

    root, child = caps
    assert root.parent_id is None and child.parent_id == root.session_id
    assert root.directory == child.directory == str(ws)
    assert root.row["title"] == "cell-1" and all(c in root.row for c in USAGE_COLUMNS)
    info = opencode_session_info(root.row)
    assert (info.model_id, info.provider_id, info.agent) == ("mock", "local", "build")

    messages = capture_chat_messages(root)
    assert [m["role"] for m in messages] == [
        "user",
        "assistant",
        "tool",
        "assistant",
        "tool",
        "assistant",
    ]
    assert messages[0] == {"role": "user", "content": "Read hello.txt\n"}
    read_args = json.dumps({"filePath": f"{ws}/hello.txt"}, separators=(",", ":"))
    assert messages[1] == {
        "role": "assistant",
        "content": "Let me read it.",
        "reasoning_content": "I should read it.",
        "tool_calls": [
            {
                "id": "call_read_1",
                "type": "function",
                "function": {"name": "read", "arguments": read_args},
            }
        ],
    }
    assert list(messages[2]) == ["role", "tool_call_id", "name", "content"]
    assert messages[2]["tool_call_id"] == "call_read_1" and "hello world" in messages[2]["content"]
    assert messages[3]["tool_calls"][0]["function"]["name"] == "task"
    assert f'<task id="{child.session_id}"' in messages[4]["content"]
    assert "child done" in messages[4]["content"]
    assert messages[5] == {"role": "assistant", "content": "All done."}
    assert capture_chat_messages(child) == [
        {"role": "user", "content": "SUBTASK-PROMPT hi"},
        {"role": "assistant", "content": "child done"},
    ]
    # Each capture keeps its fold: the same messages, as the bytes a ledger line holds.
    for capture in (root, child):
        assert capture.transcript is not None and capture.transcript.gap is None
        kept = bytes(capture.transcript.messages)
        assert kept == js_stringify_bytes(capture_chat_messages(capture))

    # Per step: input 1000-200 = 800, cache read 200, output 50-7 = 43, reasoning 7.
    spend = session_spend(root)
    assert (spend.tokens_input, spend.tokens_output, spend.tokens_reasoning) == (2400, 129, 21)
    assert spend.tokens_cache_read == 600 and spend.source == "columns"
    # An old store's fallback (the step-finish parts) gives the same figures.
    stripped = {k: v for k, v in root.row.items() if k not in USAGE_COLUMNS}
    fallback = session_spend(msgspec.structs.replace(root, row=stripped))
    assert fallback.source == "step-finish"
    assert replace(fallback, source="columns") == replace(spend, usd=fallback.usd)
    assert fallback.usd == pytest.approx(spend.usd)
    # The child's spend is not rolled into the parent's row; the tree adds it.
    assert tree_spend(caps, root.session_id).tokens_input == 3200

    workers = capture_sessions_by_directory(db, [str(ws), str(tmp_path / "none")], attempt=1)
    assert isinstance(workers, tuple)
    assert [c.session_id for c in workers[0]] == [root.session_id, child.session_id]
    assert workers[1] == [str(tmp_path / "none")]
    figures = sup_spend(workers[0], [str(ws)])
    assert (figures.worker_sessions, figures.worker_tok_in) == (2, 3200)
    assert figures.worker_tok_out == 4 * (43 + 7)
