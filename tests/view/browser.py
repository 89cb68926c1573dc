"""A real `arenad view` (the CLI, in a subprocess) and a real browser (Playwright driving
Debian's chromium) for the view's tests.

Playwright's own browser download cannot work here (no internet beyond the package
registries), so the system chromium is driven instead: ``scripts/setup`` installs it
with apt when it runs as root. Where it is missing, or the playwright package is, the
browser tests skip and say which and why; CI has both.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import os
import re
import signal
import subprocess
from collections.abc import Coroutine, Iterator
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import parse_qs, urlencode, urlsplit

import msgspec

from tests.daemon.support import CLI, REPO_ROOT, wait_for

CHROMIUM = Path(os.environ.get("ARENAD_TEST_CHROMIUM", "/usr/bin/chromium"))
# --no-sandbox: chromium's own sandbox cannot start as root (CI and this machine run as
# root); the pages are the view's own, served from this process's child.
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"]
T = TypeVar("T")
_SERVING = re.compile(r"arenad view: serving (http://\S+) ")


def browser_skip_reason() -> str | None:
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "the Python package playwright is not installed (scripts/setup installs it)"
    if not CHROMIUM.exists():
        return (
            f"no chromium at {CHROMIUM}: the view's browser tests drive Debian's chromium"
            " (scripts/setup installs it with apt when run as root; Playwright's own"
            " browser download needs the internet)"
        )
    return None


def run_async(coro: Coroutine[Any, Any, T]) -> T:
    """Run ``coro`` to its end on a thread of its own: Playwright's sync API keeps an event
    loop running on this one, so asyncio.run cannot run here while a browser is open."""
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coro).result()


class ViewServer(msgspec.Struct):
    # As the CLI printed it: with ``?token=`` (the home's token), which a browser brings
    # once (a redirect to the clean URL then, and a cookie).
    url: str
    process: subprocess.Popen[bytes]
    stderr: Path

    @property
    def token(self) -> str | None:
        given = parse_qs(urlsplit(self.url).query).get("token")
        return given[0] if given else None

    def at(self, path: str) -> str:
        """The clean URL of ``path`` (what a page shows once the cookie is set)."""
        return self.url.partition("?")[0].rstrip("/") + path

    def signed(self, path: str) -> str:
        """``path`` with the token in the query: a first visit that logs in."""
        return self.at(path) + ("&" if "?" in path else "?") + urlencode({"token": self.token})

    @property
    def headers(self) -> dict[str, str]:
        """For a client that is not a browser."""
        return {"Authorization": f"Bearer {self.token}"}


@contextlib.contextmanager
def view_server(
    home: Path, *args: str, env: dict[str, str] | None = None, log: Path
) -> Iterator[ViewServer]:
    """`arenad --home HOME view --port 0 ARGS` until the block ends (then SIGTERM)."""
    with log.open("wb") as err:
        process = subprocess.Popen(
            [*CLI, "--home", str(home), "view", "--port", "0", *args],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=err,
            cwd=REPO_ROOT,
            env=env,
        )
    try:

        def serving() -> str | None:
            if process.poll() is not None:
                raise AssertionError(f"arenad view exited {process.returncode}: {log.read_text()}")
            found = _SERVING.search(log.read_text())
            return found.group(1) if found else None

        url = wait_for(serving, "arenad view to listen", timeout_s=60)
        yield ViewServer(url=url, process=process, stderr=log)
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
