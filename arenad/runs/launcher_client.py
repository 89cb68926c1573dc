"""The daemon's end of the wrapper launcher (``arenad/runs/launcher.py``).

One warm launcher process per daemon forks every run wrapper (a fork, not an interpreter
start); this client starts it on first use, sends it one request per wrapper over a
``SOCK_SEQPACKET`` socket and routes its replies, and starts a new one if it dies.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import marshal
import os
import signal
import socket
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from arenad.runs import groups
from arenad.runs import wrapper as runwrap

log = logging.getLogger("arenad.runs.launcher_client")
# (pid, start ticks, reaped): the reaped future holds the wrapper's wait status, or None
# when the launcher died before saying (the wrapper was reparented, reaped elsewhere).
_Spawned = tuple[int, int | None, "asyncio.Future[int | None]"]

WRAPPER = Path(runwrap.__file__).resolve()
# The launcher imports the wrapper (and is imported itself, so both have cached bytecode);
# their dir goes last on the path: stdlib names win over arenad's.
_LAUNCHER_BOOT = (
    f"import sys; sys.path.append({str(WRAPPER.parent)!r}); import launcher, wrapper;"
    " sys.exit(launcher.main(wrapper.main))"
)
# Bounds a launcher's exit once told to (it exits at once; a stuck one is killed).
_LAUNCHER_EXIT_S = 5.0
MAX_MESSAGE = 1 << 20


class WrapperLauncher:
    """The daemon's end of ``arenad/launcher.py``: started on first use, asked for each
    wrapper, restarted if it dies. One per daemon; :meth:`close` ends it (running wrappers
    are not its to end: they outlive it, as they outlive the daemon)."""

    def __init__(self) -> None:
        self._sock: socket.socket | None = None
        self._pid: int | None = None
        self._reader: asyncio.Task[None] | None = None
        self._starting = asyncio.Lock()
        # One sender at a time: an event loop keeps one writer callback per descriptor, so
        # concurrent senders waiting for a full socket to drain would wake only the last
        # one registered, and each one's remove_writer would drop the others' (a stall).
        self._sending = asyncio.Lock()
        self._next_id = 0
        # Request id -> the reply: (pid, start ticks, the wrapper's reaped future).
        self._pending: dict[int, asyncio.Future[_Spawned]] = {}
        self._reaped: dict[int, asyncio.Future[int | None]] = {}

    @property
    def pid(self) -> int | None:
        """The running launcher's pid (None before first use, or after it exited)."""
        return self._pid

    async def spawn(
        self,
        log: str,
        args: list[str],
        env: Mapping[str, str],
        release_r: int,
        lifeline_r: int | None = None,
    ) -> tuple[int, int | None, asyncio.Future[int | None]]:
        """A new wrapper (pid, start ticks, and a future set to its wait status once it
        has been reaped) with ``release_r`` as its stdin (and ``lifeline_r`` as its fd 3);
        the caller keeps (and closes) its own copies."""
        sock = await self._running()
        loop = asyncio.get_running_loop()
        self._next_id += 1
        request_id = self._next_id
        reply: asyncio.Future[_Spawned] = loop.create_future()
        self._pending[request_id] = reply
        try:
            message = marshal.dumps(("spawn", request_id, log, args, dict(env)))
            async with self._sending:
                fds = [release_r] if lifeline_r is None else [release_r, lifeline_r]
                await _send_with_fds(loop, sock, message, fds)
            return await reply
        finally:
            self._pending.pop(request_id, None)

    async def close(self) -> None:
        sock, pid, reader = self._sock, self._pid, self._reader
        if sock is None or pid is None or reader is None:
            return
        # End-of-file tells the launcher to exit; its end-of-file back ends the reader,
        # which reaps it.
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_WR)
        try:
            async with asyncio.timeout(_LAUNCHER_EXIT_S):
                await asyncio.shield(reader)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            await reader

    async def _running(self) -> socket.socket:
        async with self._starting:
            if self._sock is None:
                self._start()
            assert self._sock is not None
            return self._sock

    def _start(self) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            argv = [sys.executable, "-I", "-S", "-c", _LAUNCHER_BOOT]
            # Its own session: a terminal's ^C reaches the daemon, not the launcher (it
            # exits when the daemon's end closes).
            self._pid = os.posix_spawn(
                sys.executable,
                argv,
                dict(os.environ),
                file_actions=[
                    (os.POSIX_SPAWN_DUP2, theirs.fileno(), 0),
                    (os.POSIX_SPAWN_OPEN, 1, os.devnull, os.O_WRONLY, 0),
                ],
                setsid=True,
            )
        except OSError as exc:
            ours.close()
            raise groups.SpawnError(
                [sys.executable, "-c", "launcher"], f"{type(exc).__name__}: {exc}"
            ) from exc
        finally:
            theirs.close()
        ours.setblocking(False)
        self._sock = ours
        self._reader = asyncio.get_running_loop().create_task(
            self._read(ours, self._pid), name="wrapper launcher"
        )

    async def _read(self, sock: socket.socket, pid: int) -> None:
        loop = asyncio.get_running_loop()
        try:
            while data := await loop.sock_recv(sock, MAX_MESSAGE):
                self._dispatch(marshal.loads(data), loop)
        except OSError as exc:
            log.warning("wrapper launcher %d: %s", pid, exc)
        finally:
            self._sock = None
            self._pid = None
            self._reader = None
            sock.close()
            gone = groups.SpawnError([sys.executable, "-c", "launcher"], "the launcher exited")
            for reply in self._pending.values():
                if not reply.done():
                    reply.set_exception(gone)
            # Nobody will say when these are reaped now: their waiters fall back to /proc.
            for reaped in self._reaped.values():
                if not reaped.done():
                    reaped.set_result(None)
            self._reaped.clear()
            await asyncio.to_thread(_reap_quietly, pid)

    def _dispatch(self, message: tuple[Any, ...], loop: asyncio.AbstractEventLoop) -> None:
        kind = message[0]
        if kind == "spawned":
            _, request_id, pid, start_ticks = message
            reaped = self._reaped[pid] = loop.create_future()
            reply = self._pending.get(request_id)
            if reply is not None and not reply.done():
                reply.set_result((pid, start_ticks, reaped))
        elif kind == "error":
            _, request_id, text = message
            reply = self._pending.get(request_id)
            if reply is not None and not reply.done():
                reply.set_exception(groups.SpawnError([sys.executable, "-c", "launcher"], text))
        elif kind == "reaped":
            done = self._reaped.pop(message[1], None)
            if done is not None and not done.done():
                done.set_result(message[2] if len(message) > 2 else None)


def _reap_quietly(pid: int) -> None:
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, 0)


async def _send_with_fds(
    loop: asyncio.AbstractEventLoop, sock: socket.socket, message: bytes, fds: list[int]
) -> None:
    while True:
        try:
            socket.send_fds(sock, [message], fds)
            return
        except BlockingIOError:
            writable: asyncio.Future[None] = loop.create_future()
            loop.add_writer(sock, writable.set_result, None)
            try:
                await writable
            finally:
                loop.remove_writer(sock)
