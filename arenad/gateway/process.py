"""Start the gateway of a daemon home, or adopt the one already running.

The gateway runs in its own session, so a daemon that exits or is killed leaves it serving (a
call in flight is not cut); the next daemon finds it by its pid file (``<pid> <start ticks>``,
written by the gateway once it listens) and a ``GET /health`` over the unix socket, and adopts
it instead of starting another.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path

import msgspec

from arenad.gateway import paths

READY_S = 30.0
_PACKAGE_ROOT = Path(__file__).resolve().parent.parent.parent


class Endpoint(msgspec.Struct, frozen=True, kw_only=True):
    pid: int
    port: int
    socket: str

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"


def process_ticks(pid: int) -> int | None:
    """The process's start time in clock ticks (tells a reused pid from the original)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            raw = f.read()
        return int(raw[raw.rfind(b")") + 2 :].split()[19])
    except (OSError, ValueError, IndexError):
        return None


def _recorded(home: Path) -> tuple[int, int | None] | None:
    try:
        fields = paths.pid_file(home).read_text().split()
        return int(fields[0]), (int(fields[1]) if fields[1] != "None" else None)
    except (OSError, ValueError, IndexError):
        return None


def healthy(home: Path, timeout_s: float = 5.0) -> int | None:
    """The pid that answers ``GET /health`` on the unix socket, or None."""
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(timeout_s)
            sock.connect(str(paths.model_endpoint(home)))
            sock.sendall(b"GET /health HTTP/1.1\r\nHost: gw\r\nConnection: close\r\n\r\n")
            data = b""
            while chunk := sock.recv(4096):
                data += chunk
    except OSError:
        return None
    head, _, body = data.partition(b"\r\n\r\n")
    if not head.startswith(b"HTTP/1.1 200"):
        return None
    try:
        pid = msgspec.json.decode(body).get("pid")
    except (msgspec.DecodeError, AttributeError):
        return None
    return pid if isinstance(pid, int) else None


def running(home: Path) -> Endpoint | None:
    """The gateway serving ``home`` now (its pid file, its process and its socket agree)."""
    recorded = _recorded(home)
    if recorded is None:
        return None
    pid, ticks = recorded
    if process_ticks(pid) != ticks or healthy(home) != pid:
        return None
    try:
        port = int(paths.port_file(home).read_text().strip())
    except (OSError, ValueError):
        return None
    return Endpoint(pid=pid, port=port, socket=str(paths.model_endpoint(home)))


def ensure(
    home: Path,
    *,
    env: Mapping[str, str] | None = None,
    port: int = 0,
    ready_s: float = READY_S,
    orphan_s: float | None = None,
) -> Endpoint:
    """The running gateway of ``home``, started first if none is (adopted if one is).

    Cells are prepared concurrently (threads of one daemon, or another daemon's): one at a
    time checks and starts, under a flock, so two never start two gateways."""
    found = running(home)
    if found is not None:
        return found
    directory = paths.gateway_dir(home)
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd = os.open(directory / "start.lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        return _start(home, env=env, port=port, ready_s=ready_s, orphan_s=orphan_s)
    finally:
        os.close(fd)


def _start(
    home: Path,
    *,
    env: Mapping[str, str] | None,
    port: int,
    ready_s: float,
    orphan_s: float | None,
) -> Endpoint:
    found = running(home)
    if found is not None:
        return found
    paths.pid_file(home).unlink(missing_ok=True)
    argv = [sys.executable, "-m", "arenad.gateway", "--home", str(home), "--port", str(port)]
    if orphan_s is not None:
        argv += ["--orphan-s", str(orphan_s)]
    with open(paths.log_file(home), "ab") as log:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            cwd=_PACKAGE_ROOT,
            env=dict(os.environ if env is None else env),
            start_new_session=True,
            close_fds=True,
        )
    deadline = time.monotonic() + ready_s
    while time.monotonic() < deadline:
        found = running(home)
        if found is not None and found.pid == proc.pid:
            return found
        if proc.poll() is not None:
            raise RuntimeError(f"the gateway exited with {proc.returncode}; see {log.name}")
        time.sleep(0.02)
    proc.kill()
    raise RuntimeError(f"the gateway did not become ready in {ready_s} s; see {log.name}")


def stop(home: Path, timeout_s: float = 30.0) -> bool:
    """SIGTERM the gateway of ``home`` (it finishes its calls in flight); True if one ran."""
    recorded = _recorded(home)
    if recorded is None or process_ticks(recorded[0]) != recorded[1]:
        return False
    pid = recorded[0]
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)
        if process_ticks(pid) is None:
            return True
        time.sleep(0.02)
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    return True
