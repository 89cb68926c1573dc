"""A run's own network namespace and its forwarder (``arenad/runs/netns.py``), for real: the
launcher forks the wrapper, which makes the namespace and forwards; the agents are real
processes probing what they can reach. The forwarder is bounded (a connection cap) and
forwards to a unix socket as well (a model gateway's)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from arenad.runs import netns
from arenad.runs.detached import spawn_detached
from arenad.runs.files import RunFiles
from arenad.runs.launcher_client import WrapperLauncher

pytestmark = pytest.mark.skipif(netns.problem() is not None, reason="no network namespaces")

RUNS_DIR = Path(netns.__file__).parent
# Connects to each argv port on 127.0.0.1 (an HTTP-free echo check) and prints what it got.
PROBE = """
import errno, json, socket, sys
out = {}
for port in sys.argv[1:]:
    try:
        with socket.create_connection(("127.0.0.1", int(port)), timeout=30) as s:
            s.sendall(b"ping")
            out[port] = s.recv(16).decode()
    except OSError as e:
        out[port] = errno.errorcode.get(e.errno, repr(e))
try:
    socket.create_connection(("1.1.1.1", 80), timeout=30).close()
    out["outside"] = "connected"
except OSError as e:
    out["outside"] = errno.errorcode.get(e.errno, repr(e))
print(json.dumps(out))
"""


class Echo:
    """A host listener that answers each connection with ``reply`` + what it read, closes
    it, and counts the connections it accepted."""

    def __init__(self, reply: bytes, family: int = socket.AF_INET, path: str = "") -> None:
        self.sock = socket.socket(family, socket.SOCK_STREAM)
        self.sock.bind(path or ("127.0.0.1", 0))
        self.sock.listen(128)
        self.reply = reply
        self.accepted = 0
        threading.Thread(target=self._serve, daemon=True).start()

    @property
    def port(self) -> int:
        return int(self.sock.getsockname()[1])

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.accepted += 1
            # Answered, then closed by the server (as an HTTP server without keep-alive).
            with conn, contextlib.suppress(OSError):
                conn.sendall(self.reply + conn.recv(16))

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def echoes() -> Iterator[list[Echo]]:
    made: list[Echo] = []
    yield made
    for echo in made:
        echo.close()


@pytest.fixture
async def launcher() -> AsyncIterator[WrapperLauncher]:
    launcher = WrapperLauncher()
    try:
        yield launcher
    finally:
        await launcher.close()


async def _wrapped(
    tmp_path: Path, launcher: WrapperLauncher, argv: list[str], network: str, forwards: list[str]
) -> tuple[str, str, str | None]:
    """Run ``argv`` through the launcher's wrapper; its stdout, stderr and start error."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    run = await spawn_detached(
        argv,
        cwd=str(tmp_path),
        env=dict(os.environ),
        files=RunFiles(
            run_dir=str(tmp_path), stdout=str(tmp_path / "out"), stderr=str(tmp_path / "err")
        ),
        store_path=None,
        stream="cell/c:i:A:0",
        attempt=1,
        timeout_s=60,
        kill_grace_s=0.5,
        clock=lambda: time.time_ns() // 1_000_000,
        launcher=launcher,
        network=network,
        forwards=forwards,
    )
    run.release()
    end = await run.wait(lambda: time.time_ns() // 1_000_000)
    out, err = (tmp_path / "out", tmp_path / "err")
    return (
        out.read_text() if out.exists() else "",
        err.read_text() if err.exists() else "",
        end.reason if end.how != "exited" else None,
    )


async def test_the_wrapper_lets_in_the_model_and_nothing_else(
    tmp_path: Path, launcher: WrapperLauncher, echoes: list[Echo]
) -> None:
    model, neighbour = Echo(b"model:"), Echo(b"neighbour:")
    echoes += [model, neighbour]
    argv = [sys.executable, "-c", PROBE, str(model.port), str(neighbour.port)]
    out, err, _ = await _wrapped(
        tmp_path, launcher, argv, "model", [f"{model.port}=127.0.0.1:{model.port}"]
    )
    got = json.loads(out)
    assert got == {
        str(model.port): "model:ping",
        str(neighbour.port): "ECONNREFUSED",
        "outside": "ENETUNREACH",
    }, err
    # With "none" nothing is let in; on the host, both answer.
    out, _, _ = await _wrapped(tmp_path / "none", launcher, argv, "none", [])
    assert json.loads(out)[str(model.port)] == "ECONNREFUSED"
    out, _, _ = await _wrapped(tmp_path / "host", launcher, argv, "host", [])
    assert json.loads(out)[str(neighbour.port)] == "neighbour:ping"


async def test_a_network_that_cannot_be_made_never_starts_the_agent(
    tmp_path: Path, launcher: WrapperLauncher
) -> None:
    marker = tmp_path / "ran"
    argv = ["touch", str(marker)]
    _, _, why = await _wrapped(tmp_path, launcher, argv, "model", ["0=nowhere"])
    assert why is not None and "could not make the run's network (model)" in why
    assert "bad forward '0=nowhere'" in why
    assert not marker.exists()


def _in_namespace(code: str) -> subprocess.CompletedProcess[str]:
    """``code`` in a fresh interpreter that has ``netns`` importable, as the wrapper has."""
    return subprocess.run(
        [
            sys.executable,
            "-I",
            "-S",
            "-c",
            f"import sys; sys.path.append({str(RUNS_DIR)!r})\n{code}",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_a_unix_socket_target(tmp_path: Path, echoes: list[Echo]) -> None:
    """A model gateway listens on a unix socket: the agent still dials 127.0.0.1:PORT."""
    gateway = Echo(b"gateway:", socket.AF_UNIX, str(tmp_path / "gw.sock"))
    echoes.append(gateway)
    code = f"""
import netns, socket
netns.enter(netns.parse_forwards("8765={tmp_path / "gw.sock"}")).serve()
with socket.create_connection(("127.0.0.1", 8765), timeout=30) as s:
    s.sendall(b"ping")
    print(s.recv(16).decode())
"""
    done = _in_namespace(code)
    assert done.stdout.strip() == "gateway:ping", done.stderr


def test_connections_beyond_the_cap_wait_unaccepted(tmp_path: Path, echoes: list[Echo]) -> None:
    """At most MAX_CONNECTIONS at once; the next is accepted once one closes."""
    upstream = Echo(b"up:")
    echoes.append(upstream)
    code = f"""
import netns, socket, time
netns.MAX_CONNECTIONS = 2
netns.enter(netns.parse_forwards("{upstream.port}=127.0.0.1:{upstream.port}")).serve()
conns = [socket.create_connection(("127.0.0.1", {upstream.port}), timeout=30) for _ in range(3)]
for c in conns[:2]:
    c.sendall(b"x")
    print(c.recv(16).decode(), flush=True)
conns[2].sendall(b"y")
conns[2].settimeout(0.5)
try:
    conns[2].recv(16)
    print("third answered while two were open", flush=True)
except TimeoutError:
    print("third waits", flush=True)
conns[0].close()
conns[2].settimeout(30)
print(conns[2].recv(16).decode(), flush=True)
"""
    done = _in_namespace(code)
    assert done.stdout.split() == ["up:x", "up:x", "third", "waits", "up:y"], done.stderr
    assert upstream.accepted == 3


def test_bad_forwards_are_refused() -> None:
    assert netns.parse_forwards("80=127.0.0.1:80,9=/gw.sock") == [
        (80, "127.0.0.1:80"),
        (9, "/gw.sock"),
    ]
    for bad in ("80", "x=127.0.0.1:80", "0=a:1", "70000=a:1", "80="):
        with pytest.raises(ValueError, match="bad forward"):
            netns.parse_forwards(bad)


def test_the_probe_leaves_the_callers_namespace_alone() -> None:
    before = os.readlink("/proc/thread-self/ns/net")
    assert netns.probe() is None
    assert os.readlink("/proc/thread-self/ns/net") == before
    asyncio.run(asyncio.sleep(0))


def test_a_machine_that_refuses_namespaces_is_named_in_one_line(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Not root: submit and launch say so and how to opt out (never a silent fallback)."""
    monkeypatch.setattr(netns, "probe", lambda: "unshare: Operation not permitted")
    monkeypatch.setattr(netns, "_problem", [])
    problem = netns.problem()
    assert problem == (
        "[sandbox] network needs a network namespace per run, which this machine refuses"
        ' (unshare: Operation not permitted; arenad must run as root); set network = "host"'
        " to opt out"
    )
