"""Helpers for gateway tests: a started gateway process, grants, and plain HTTP calls."""

from __future__ import annotations

import http.client
import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from arenad.gateway import grants, paths, process

UPSTREAM_KEY = "sk-upstream-secret-do-not-leak-7f3a"
KEY_ENV = "ARENAD_TEST_UPSTREAM_KEY"

SCRIPT = """
final_text = "Done."
[usage]
prompt_tokens = 1000
completion_tokens = 50
cached_tokens = 200
reasoning_tokens = 7
[[models]]
id = "m"
cost = { input = 3.0, output = 15.0, cache_read = 0.3 }
[[conversations]]
match = "hello"
[[conversations.steps]]
text = "Hi there, this is a longer streamed answer."
[[conversations.steps]]
text = "Second answer."
"""


def start_gateway(home: Path) -> process.Endpoint:
    env = dict(os.environ)
    env[KEY_ENV] = UPSTREAM_KEY
    return process.ensure(home, env=env)


def grant_for(
    home: Path,
    model_base_url: str,
    *,
    cell: str = "c1",
    attempt: int = 1,
    prices: dict[str, grants.Price] | None = None,
    **caps: Any,
) -> str:
    return grants.issue(
        home,
        grants.Grant(
            campaign_id="camp",
            cell_id=cell,
            attempt=attempt,
            upstreams={"default": grants.Upstream(base_url=model_base_url, key_env=KEY_ENV)},
            prices=prices or {"m": grants.Price(input=3.0, output=15.0, cache_read=0.3)},
            **caps,
        ),
    )


def chat(
    port: int, token: str, messages: list[dict[str, Any]], *, stream: bool = False, **extra: Any
) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    body: dict[str, Any] = {"model": "m", "messages": messages, "stream": stream, **extra}
    if stream:
        body["stream_options"] = {"include_usage": True}
    conn.request(
        "POST",
        "/v1/chat/completions",
        body=json.dumps(body),
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
    )
    response = conn.getresponse()
    data = response.read()
    conn.close()
    return response.status, data


def post(
    port: int, path: str, body: dict[str, Any], headers: dict[str, str]
) -> tuple[int, str, bytes]:
    """(status, the response's head as text, body) of one POST to the gateway."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    conn.request("POST", path, body=json.dumps(body), headers=headers)
    response = conn.getresponse()
    data = response.read()
    head = "\n".join(f"{k}: {v}" for k, v in response.getheaders())
    conn.close()
    return response.status, head, data


def sse_data(body: bytes) -> list[dict[str, Any]]:
    """The JSON objects of a stream's ``data:`` lines (``[DONE]`` left out)."""
    return [
        json.loads(line[5:])
        for line in body.decode().splitlines()
        if line.startswith("data:") and line[5:].strip() not in ("", "[DONE]")
    ]


def journal(home: Path, cell: str = "c1", attempt: int = 1) -> list[dict[str, Any]]:
    path = paths.attempt_journal(home, "camp", cell, attempt)
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_bytes().splitlines()]


def stopped(home: Path) -> Iterator[None]:
    try:
        yield
    finally:
        process.stop(home)


def journal_of(home: Path, count: int, timeout_s: float = 60.0) -> list[dict[str, Any]]:
    """The journal once it holds ``count`` lines (a line is written after the agent's answer)."""
    deadline = time.monotonic() + timeout_s
    while True:
        lines = journal(home)
        if len(lines) >= count or time.monotonic() > deadline:
            return lines
        time.sleep(0.01)
