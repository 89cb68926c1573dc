"""The view's edge: the bind and the token rule, checked before anything listens."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from arenad.errors import UserError
from arenad.home import Home
from arenad.view.service import bind, home_token, is_loopback, serve_view
from tests.view.view_log import build_view_log


def test_what_counts_as_loopback() -> None:
    assert is_loopback("127.0.0.1") and is_loopback("localhost") and is_loopback("127.8.9.1")
    assert not is_loopback("0.0.0.0") and not is_loopback("::")


@pytest.fixture
def home(tmp_path: Path) -> Home:
    asyncio.run(build_view_log(tmp_path / "home"))
    return Home(tmp_path / "home")


def test_a_non_loopback_host_needs_a_token(home: Home) -> None:
    with pytest.raises(UserError, match=r"--host 0\.0\.0\.0 is not a loopback address"):
        asyncio.run(serve_view(home, "0.0.0.0", 0))
    with pytest.raises(UserError, match="an empty token protects nothing"):
        asyncio.run(serve_view(home, "127.0.0.1", 0, token=" "))
    with pytest.raises(UserError, match="cannot resolve"):
        asyncio.run(serve_view(home, "no-such-host.invalid", 0, token="t"))


def test_a_home_without_a_store_is_refused_before_binding(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="no arenad store"):
        asyncio.run(serve_view(Home(tmp_path / "nothing"), "127.0.0.1", 0))


def test_a_port_in_use_is_a_user_error() -> None:
    taken = bind("127.0.0.1", 0)
    try:
        port = taken.getsockname()[1]
        with pytest.raises(UserError, match=f"cannot listen on 127.0.0.1:{port}"):
            bind("127.0.0.1", port)
    finally:
        taken.close()


def test_the_home_token_is_made_once_private_and_kept(home: Home) -> None:
    token = home_token(home)
    path = home.root / "view.token"
    assert len(token) >= 40 and path.stat().st_mode & 0o777 == 0o600
    assert home_token(home) == token  # the CLI's next start serves the same token
    path.chmod(0o644)
    with pytest.raises(UserError, match=r"view\.token: readable by others \(mode 644\)"):
        home_token(home)
    path.chmod(0o600)
    path.write_text("")
    with pytest.raises(UserError, match=r"view\.token is empty"):
        home_token(home)


def test_the_cli_prints_the_url_with_the_homes_token(home: Home) -> None:
    """Only the home's token is printed (a given one never is), in the URL to open."""
    cli = [str(Path(sys.executable).parent / "arenad"), "--home", str(home.root), "view"]
    process = subprocess.Popen(
        [*cli, "--port", "0"], stdin=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )
    try:
        assert process.stderr is not None
        line = process.stderr.readline()
        # Ctrl-C once it serves (the URL is printed as the server starts): what is tested
        # is the stop of a running view, not of one half started.
        url = line.split("serving ", 1)[1].split(" ", 1)[0]
        deadline = time.monotonic() + 60
        while True:
            try:
                urllib.request.urlopen(url, timeout=5).close()
                break
            except urllib.error.HTTPError:
                break  # it answers (the token's redirect sets a cookie urllib drops)
            except OSError:
                assert time.monotonic() < deadline, line
                time.sleep(0.05)
    finally:
        process.send_signal(signal.SIGINT)
        process.wait(timeout=30)
    assert f"/?token={home_token(home)} " in line, line
