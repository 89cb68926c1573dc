"""Helpers for the daemon tests: campaigns on disk, the CLI as a subprocess, polling."""

from __future__ import annotations

import asyncio
import json
import os
import socketserver
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from arenad import app
from arenad.home import Home, open_store
from events.base import Recorded

CLI = [str(Path(sys.executable).parent / "arenad")]
REPO_ROOT = Path(__file__).resolve().parents[2]


def cli(
    home: Path, *args: str, env: Mapping[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CLI, "--home", str(home), *args],
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        cwd=REPO_ROOT,
        env=dict(env) if env is not None else None,
        timeout=120,
        check=False,
    )


def start_daemon(
    home: Path, *args: str, env: Mapping[str, str] | None = None, stderr: Path
) -> subprocess.Popen[bytes]:
    with stderr.open("wb") as err:
        return subprocess.Popen(
            [*CLI, "--home", str(home), "daemon", *args],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=err,
            cwd=REPO_ROOT,
            env=dict(env) if env is not None else None,
        )


def submitted(home: Path, *campaigns: Path) -> Path:
    """A test's set-up: ``home`` initialized and ``campaigns`` submitted, in this process
    (what ``arenad init`` and ``arenad submit`` call; their CLI is tested in tests/test_cli.py,
    tests/campaign and tests/app), saving two interpreters per test."""

    async def go() -> None:
        await app.init_home(Home(home))
        for campaign in campaigns:
            await app.submit_campaign(Home(home), campaign)

    asyncio.run(go())
    return home


def status_json(home: Path) -> dict[str, Any]:
    out = cli(home, "status", "--json")
    assert out.returncode == 0, out.stderr
    result: dict[str, Any] = json.loads(out.stdout)
    return result


def wait_for(cond: Callable[[], Any], what: str, timeout_s: float = 60.0) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = cond()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")


def cell_row(home: Path, cell_id: str) -> dict[str, Any] | None:
    for row in status_json(home)["cells"]:
        if row.get("cell_id") == cell_id or row.get("cell") == cell_id or row.get("id") == cell_id:
            return dict(row)
    return None


def read_all(home: Path) -> list[Recorded]:
    async def go() -> list[Recorded]:
        async with open_store(Home(home)) as store:
            out: list[Recorded] = []
            async for r in store.read_all(0):
                out.append(r)
            return out

    return asyncio.run(go())


def command_campaign(
    path: Path,
    *,
    name: str,
    repo: Path,
    base: str,
    argv: list[str],
    verify_cmd: str = "true",
    instances: tuple[str, ...] = ("i1",),
    timeout_s: float = 60,
    extra: str = "",
    uses_model: bool = False,
    arm_extra: str = "",
) -> Path:
    lines = [
        f'name = "{name}"',
        'split = "dev"',
        "max_parallel = 16",
        extra,
        "[materializer]",
        'kind = "git"',
        f"source = {json.dumps(str(repo))}",
    ]
    for iid in instances:
        lines += [
            "[[instances]]",
            f'instance_id = "{iid}"',
            f'base_commit = "{base}"',
            'problem_statement = "do nothing"',
            f"verify_cmd = {json.dumps(verify_cmd)}",
        ]
    lines += [
        "[[arms]]",
        'name = "CMD"',
        'kind = "command"',
        f"argv = {json.dumps(argv)}",
        f"uses_model = {'true' if uses_model else 'false'}",
        f"timeout_s = {timeout_s}",
        arm_extra,
    ]
    path.write_text("\n".join(lines) + "\n")
    return path


def env_with(**extra: str) -> dict[str, str]:
    return {**os.environ, **extra}


class Beacon:
    """A TCP listener on localhost that appends every line it receives to ``path``: how a
    sandboxed agent reports to a test. The sandbox hides the test's files from the agent;
    a campaign on ``[sandbox] network = "host"`` keeps the host's loopback, so a fact the
    test must see even if the agent's cell is wiped (re-materialized) travels this way;
    ``shell`` is the agent's side."""

    def __init__(self, path: Path) -> None:
        self.path = path
        lock = threading.Lock()

        class Handler(socketserver.StreamRequestHandler):
            def handle(self) -> None:
                data = self.rfile.read()
                with lock, path.open("ab") as f:
                    f.write(data)

        self._server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def shell(self, text: str = "$$") -> str:
        """A bash command that sends one line (``text``, expanded by the agent's shell)."""
        return f'echo "{text}" > /dev/tcp/127.0.0.1/{self.port}'

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
