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

from arenad.runs import groups, limits
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
# A launcher answers a spawn within milliseconds (a fork and the child's setsid); one that
# has not answered in this long is stuck for good: it is killed (and replaced on next use)
# so that this spawn, and every other waiting on it, fails instead of waiting forever.
REPLY_TIMEOUT_S = 60.0
MAX_MESSAGE = 1 << 20


class WrapperLauncher:
    """The daemon's end of ``arenad/launcher.py``: started on first use, asked for each
    wrapper, restarted if it dies. One per daemon; :meth:`close` ends it (running wrappers
    are not its to end: they outlive it, as they outlive the daemon)."""

    def __init__(self) -> None:
        self._sock: socket.socket | None = None
        self._pid: int | None = None
        self._reader: asyncio.Task[None] | None = None
        # Set when the running launcher's reader has ended (the launcher is gone).
        self._gone: asyncio.Future[None] | None = None
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
        gone = self._gone
        assert gone is not None
        loop = asyncio.get_running_loop()
        self._next_id += 1
        request_id = self._next_id
        reply: asyncio.Future[_Spawned] = loop.create_future()
        self._pending[request_id] = reply
        try:
            message = marshal.dumps(("spawn", request_id, log, args, dict(env)))
            async with self._sending:
                if gone.done():
                    raise _gone_error()
                try:
                    fds = [release_r] if lifeline_r is None else [release_r, lifeline_r]
                    await _send_with_fds(loop, sock, message, fds, gone)
                except OSError as exc:  # the peer is gone (EPIPE, ECONNRESET)
                    raise groups.SpawnError(
                        [sys.executable, "-c", "launcher"], f"sending to the launcher: {exc}"
                    ) from exc
            try:
                async with asyncio.timeout(REPLY_TIMEOUT_S):
                    return await reply
            except TimeoutError:
                self._kill_stuck(sock)
                raise groups.SpawnError(
                    [sys.executable, "-c", "launcher"],
                    f"the launcher did not answer in {REPLY_TIMEOUT_S:.0f} s (killed)",
                ) from None
        finally:
            self._pending.pop(request_id, None)
            # Failed before its reply came (the launcher went away): nobody reads it now.
            if not reply.done():
                reply.cancel()
            elif not reply.cancelled():
                reply.exception()

    def _kill_stuck(self, sock: socket.socket) -> None:
        if self._sock is sock and self._pid is not None:
            log.error("wrapper launcher %d did not answer; killing it", self._pid)
            with contextlib.suppress(ProcessLookupError):
                os.kill(self._pid, signal.SIGKILL)

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
            argv = [sys.executable, "-I", "-S", "-c", _boot()]
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
        self._gone = asyncio.get_running_loop().create_future()
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
            # A sender waiting for the socket to drain would wait forever: wake it first.
            if self._gone is not None and not self._gone.done():
                self._gone.set_result(None)
            self._sock = None
            self._pid = None
            self._reader = None
            self._gone = None
            sock.close()
            for reply in self._pending.values():
                if not reply.done():
                    reply.set_exception(_gone_error())
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


def _boot() -> str:
    # The daemon raised its own open-file limit (arenad.runs.limits); the agents keep
    # the one it was given: the launcher puts it back before it forks any wrapper.
    nofile = limits.children_nofile()
    if nofile is None:
        return _LAUNCHER_BOOT
    return (
        "import resource; resource.setrlimit(resource.RLIMIT_NOFILE,"
        f" ({nofile}, resource.getrlimit(resource.RLIMIT_NOFILE)[1])); {_LAUNCHER_BOOT}"
    )


def _reap_quietly(pid: int) -> None:
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, 0)


def _gone_error() -> groups.SpawnError:
    return groups.SpawnError([sys.executable, "-c", "launcher"], "the launcher exited")


async def _send_with_fds(
    loop: asyncio.AbstractEventLoop,
    sock: socket.socket,
    message: bytes,
    fds: list[int],
    gone: asyncio.Future[None],
) -> None:
    """Send, waiting for room while the socket is full, unless the launcher goes away
    meanwhile (its reader then closes the socket: the wait would never end)."""
    sock_fd = sock.fileno()
    while True:
        try:
            socket.send_fds(sock, [message], fds)
            return
        except BlockingIOError:
            writable: asyncio.Future[None] = loop.create_future()
            # By number: the reader may close the socket object while this waits.
            loop.add_writer(sock_fd, _set_once, writable)
            try:
                await asyncio.wait({writable, gone}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                loop.remove_writer(sock_fd)
                writable.cancel()
            if gone.done():
                raise _gone_error() from None


def _set_once(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)
