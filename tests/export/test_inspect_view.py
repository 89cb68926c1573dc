"""The Inspect export read by the tool its users open it with: `inspect view` (the real
server from the pinned inspect_ai, in a subprocess) in a real browser (Playwright driving
Debian's chromium, as the view's own tests do)."""

from __future__ import annotations

import json
import re
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.daemon.support import wait_for
from tests.export.support import export_ok

pytestmark = pytest.mark.slow  # the demo's real opencode runs

INSPECT = str(Path(sys.executable).parent / "inspect")
_RUNNING = re.compile(r"Running on (http://\S+)")


def _free_port() -> int:
    # `inspect view` does not report a port it chose itself, so one is picked here; the
    # window between closing this socket and the server binding it is short and local.
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def inspect_view(mixed_home: Path, tmp_path: Path) -> Iterator[str]:
    """`inspect view start` over the mixed home's Inspect export; yields its URL."""
    manifest = json.loads(export_ok(mixed_home, "inspect", tmp_path / "out"))
    assert len(manifest["files"]) == 3
    log = tmp_path / "inspect-view.log"
    with log.open("wb") as err:
        process = subprocess.Popen(
            [
                *(INSPECT, "view", "start", "--recursive", "--host", "127.0.0.1"),
                *("--port", str(_free_port()), "--log-dir", str(tmp_path / "out" / "logs")),
            ],
            stdin=subprocess.DEVNULL,
            stdout=err,
            stderr=subprocess.STDOUT,
            cwd=tmp_path,
        )
    try:

        def running() -> str | None:
            if process.poll() is not None:
                raise AssertionError(f"inspect view exited {process.returncode}: {log.read_text()}")
            found = _RUNNING.search(log.read_text())
            return found.group(1) if found else None

        yield wait_for(running, "inspect view to listen", timeout_s=120)
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def test_inspect_view_lists_every_task_and_shows_a_samples_transcript(
    browser: Any, inspect_view: str
) -> None:
    page = browser.new_page(viewport={"width": 1280, "height": 800})
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    try:
        page.goto(inspect_view)
        for task in ("demo-1/SOLO", "mixed/CMD", "mixed/SUP"):  # one log per campaign × arm
            page.get_by_text(task, exact=True).first.wait_for(timeout=60_000)
        page.get_by_text("demo-1/SOLO", exact=True).first.click()
        page.get_by_text("mul-bug").first.wait_for(timeout=60_000)  # cells are samples
        page.get_by_text("mul-bug").first.click()
        # The sample's messages are the real opencode transcript: the task, the agent's
        # tool call, its closing words.
        page.get_by_text("gives wrong answers").first.wait_for(timeout=60_000)
        page.get_by_text("Fixed mul.py").first.wait_for(timeout=60_000)
        assert "/samples/sample/mul-bug/" in page.url
        assert errors == []
    finally:
        page.close()
