"""Agent runs that outlive the daemon: started through the run wrapper, watched by pid.

:func:`spawn_detached` has the daemon's :class:`WrapperLauncher` fork a run wrapper
(``arenad/runs/wrapper.py``) in a new session (it is the group leader; the agent will be its
child in the same group) with the agent's stdio going to
files in the run dir, not to pipes of the daemon — so nothing ties the agent's life to
the daemon's. The wrapper holds the agent back until :meth:`DetachedRun.release` (called
once ``RunStarted`` is committed) writes into its release pipe or, if the daemon died (the
pipe reads end-of-file), until it has checked the log itself; see ``arenad/runs/wrapper.py``
for that rule.

:meth:`DetachedRun.wait` is the same for a run this daemon started and for one it adopted
after a restart: it watches the wrapper through a pidfd (no polling, and no need to be its
parent), enforces the recorded deadline, turns an abort into TERM/grace/KILL of the whole
group, and reads the wrapper's exit record to say how the agent ended.
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
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import msgspec

from arenad.clock import Clock
from arenad.runs import groups
from arenad.runs import wrapper as runwrap

log = logging.getLogger("arenad.runs.detached")
_Spawned = tuple[int, int | None, "asyncio.Future[None]"]

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
# How long a run's end waits for the launcher to reap its wrapper (it does so at once).
_REAP_WAIT_S = 1.0
EXIT_FILE = "arenad.exit.json"
WRAPPER_LOG = "arenad.wrapper.log"


class RunFiles(msgspec.Struct, frozen=True, kw_only=True):
    """Where one run's wrapper reads and writes (all in the cell's run dir)."""

    run_dir: str
    stdout: str
    stderr: str
    stdin: str | None = None
    # Bytes kept of each of stdout and stderr (None: no cap); the wrapper drops the rest.
    cap_bytes: int | None = None

    @property
    def exit_file(self) -> Path:
        return Path(self.run_dir) / EXIT_FILE


def capped_marker(path: str) -> str:
    """The file the wrapper makes next to an output file once it drops bytes of it."""
    return path + runwrap.CAPPED_SUFFIX


def capped_outputs(paths: Sequence[str]) -> list[tuple[str, str]]:
    """(path, cause) for each of a run's output files the wrapper cut: cause is "cap", or
    the write error that made the rest of the output undeliverable."""
    cut = []
    for path in paths:
        try:
            cause = Path(capped_marker(path)).read_text(errors="replace").strip()
        except OSError:
            continue
        cut.append((path, cause or "cap"))
    return cut


class ExitRecord(msgspec.Struct, frozen=True, kw_only=True):
    """What the wrapper wrote when the agent ended (or could not start)."""

    started: bool
    wrapper_pid: int | None = None
    pid: int | None = None
    exit_status: int | None = None
    term_signal: int | None = None
    ended_at_ms: int | None = None
    error: str | None = None

    @property
    def code(self) -> int | None:
        """The exit code in the coreutils encoding (128 + N for death by signal N)."""
        if self.exit_status is not None:
            return self.exit_status
        if self.term_signal is not None:
            return 128 + self.term_signal
        return None


_exit_decoder = msgspec.json.Decoder(ExitRecord)


def read_exit_record(path: Path, wrapper_pid: int | None = None) -> ExitRecord | None:
    """The exit record of wrapper ``wrapper_pid`` (any wrapper's if None); None when there
    is none, it cannot be read, or another wrapper wrote it (a crashed daemon's leftover in
    a re-materialized run dir)."""
    try:
        record = _exit_decoder.decode(path.read_bytes())
    except (OSError, msgspec.DecodeError):
        return None
    if wrapper_pid is not None and record.wrapper_pid != wrapper_pid:
        return None
    return record


How = Literal["exited", "timed_out", "aborted", "lost", "not_started"]


class RunEnd(msgspec.Struct, frozen=True, kw_only=True):
    """How a detached run ended, as the daemon saw it.

    ``exited``: the agent ended on its own (``code`` from the exit record). ``timed_out`` /
    ``aborted``: the daemon ended the group (code 124 / 130). ``lost``: the wrapper is gone
    without an exit record (killed with the machine, or by hand). ``not_started``: the
    wrapper ran but the agent never did (``reason`` says why).
    """

    how: How
    code: int | None
    ended_at_ms: int
    reason: str | None = None
    signals_sent: list[str] = []
    leftovers_killed: bool = False


class DetachedRun:
    """A wrapper process (and its agent) identified by pid and process start time."""

    def __init__(
        self,
        *,
        pid: int,
        start_ticks: int | None,
        files: RunFiles,
        started_at_ms: int,
        deadline_ms: int,
        kill_grace_s: float,
        reaped: asyncio.Future[None] | None = None,
        gone_timeout_s: float = groups.DEFAULT_GONE_TIMEOUT_S,
        release_fd: int | None = None,
    ) -> None:
        self.pid = pid
        # The wrapper is its session's leader, so its pid is the group id.
        self.pgid = pid
        self.start_ticks = start_ticks
        self.files = files
        self.started_at_ms = started_at_ms
        self.deadline_ms = deadline_ms
        self.kill_grace_s = kill_grace_s
        # Set once the launcher has reaped the wrapper (only for a wrapper started here).
        self._reaped = reaped
        self.gone_timeout_s = gone_timeout_s
        self._abort = asyncio.Event()
        self._abort_reason: str | None = None
        # The write end of the wrapper's release pipe (only for a wrapper started here).
        self._release_fd = release_fd

    @classmethod
    def adopt(
        cls,
        *,
        pid: int,
        start_ticks: int | None,
        files: RunFiles,
        started_at_ms: int,
        deadline_ms: int,
        kill_grace_s: float,
    ) -> DetachedRun:
        """A run an earlier daemon started (it may be gone already; ``wait`` tells)."""
        return cls(
            pid=pid,
            start_ticks=start_ticks,
            files=files,
            started_at_ms=started_at_ms,
            deadline_ms=deadline_ms,
            kill_grace_s=kill_grace_s,
        )

    @property
    def alive(self) -> bool:
        """Whether our wrapper (not a process that recycled its pid) is still running."""
        if self.start_ticks is None or not groups.process_identity_matches(
            self.pid, self.start_ticks
        ):
            return False
        return groups.group_alive(self.pgid)

    def release(self) -> None:
        """Let the agent start (call only once its RunStarted is committed): the wrapper's
        pid, written into its release pipe, which is then closed."""
        fd, self._release_fd = self._release_fd, None
        if fd is None:
            raise RuntimeError(f"wrapper {self.pid} has no release pipe (released already?)")
        try:
            os.write(fd, f"{self.pid}\n".encode())
        except BrokenPipeError:
            pass  # the wrapper is gone; wait() reads its exit record (or finds none)
        finally:
            os.close(fd)

    def abort(self, reason: str) -> None:
        if self._abort_reason is None:
            self._abort_reason = reason
        self._abort.set()

    def kill_now(self) -> None:
        """SIGKILL the whole group at once (a forced stop: no grace is waited out)."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.pgid, signal.SIGKILL)

    async def cancel_unreleased(self) -> None:
        """End a wrapper whose agent was never released (its start was not recorded)."""
        self.kill_now()
        try:
            await self._wait_exit(asyncio.get_running_loop())
            await self._until_reaped()
        finally:
            # Only now: an end-of-file would send a live wrapper to the log.
            if self._release_fd is not None:
                os.close(self._release_fd)
                self._release_fd = None

    async def wait(self, clock: Clock) -> RunEnd:
        """Wait for the run to end: on its own, at the deadline, or on :meth:`abort`."""
        end = await groups.supervise_group(
            self.pgid,
            self._wait_exit(asyncio.get_running_loop()),
            [self._abort],
            timeout_s=max(0.0, (self.deadline_ms - clock()) / 1000),
            kill_grace_s=self.kill_grace_s,
            gone_timeout_s=self.gone_timeout_s,
            settled=self._until_reaped,
        )
        timed_out, aborted, sent = end.timed_out, end.aborted, end.signals_sent
        leftovers = end.leftovers_killed
        now = clock()
        if timed_out:
            return RunEnd(
                how="timed_out", code=groups.TIMEOUT_CODE, ended_at_ms=now, signals_sent=sent
            )
        if aborted:
            return RunEnd(
                how="aborted",
                code=groups.ABORT_CODE,
                ended_at_ms=now,
                reason=self._abort_reason,
                signals_sent=sent,
            )
        record = read_exit_record(self.files.exit_file, self.pid)
        if record is None:
            return RunEnd(
                how="lost",
                code=None,
                ended_at_ms=now,
                reason="the run's wrapper is gone without an exit record",
                signals_sent=sent,
                leftovers_killed=leftovers,
            )
        if not record.started:
            return RunEnd(
                how="not_started",
                code=None,
                ended_at_ms=record.ended_at_ms or now,
                reason=record.error or "the agent was not started",
            )
        return RunEnd(
            how="exited",
            code=record.code,
            ended_at_ms=record.ended_at_ms or now,
            signals_sent=sent,
            leftovers_killed=leftovers,
        )

    async def _wait_exit(self, loop: asyncio.AbstractEventLoop) -> None:
        """Return when the wrapper has exited (a pidfd becomes readable; no polling)."""
        try:
            fd = os.pidfd_open(self.pid)
        except ProcessLookupError:
            return
        try:
            # pidfd_open may have found a newer process that reused the pid.
            if self.start_ticks is None or groups.read_start_ticks(self.pid) != self.start_ticks:
                return
            ready: asyncio.Future[None] = loop.create_future()

            def on_exit() -> None:
                if not ready.done():
                    ready.set_result(None)

            loop.add_reader(fd, on_exit)
            try:
                await ready
            finally:
                loop.remove_reader(fd)
        finally:
            os.close(fd)

    async def _until_reaped(self) -> None:
        # An exited wrapper stays a zombie, and its group alive to killpg, until reaped;
        # the launcher says when it has reaped it. Without that word (an adopted run, or a
        # launcher that died) liveness checks look past zombies in /proc instead.
        if self._reaped is None:
            return
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(_REAP_WAIT_S):
                await asyncio.shield(self._reaped)


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
        self._reaped: dict[int, asyncio.Future[None]] = {}

    @property
    def pid(self) -> int | None:
        """The running launcher's pid (None before first use, or after it exited)."""
        return self._pid

    async def spawn(
        self, log: str, args: list[str], env: Mapping[str, str], release_r: int
    ) -> tuple[int, int | None, asyncio.Future[None]]:
        """A new wrapper (pid, start ticks, and a future set once it has been reaped)
        with ``release_r`` as its stdin; the caller keeps (and closes) its own copy."""
        sock = await self._running()
        loop = asyncio.get_running_loop()
        self._next_id += 1
        request_id = self._next_id
        reply: asyncio.Future[_Spawned] = loop.create_future()
        self._pending[request_id] = reply
        try:
            message = marshal.dumps(("spawn", request_id, log, args, dict(env)))
            async with self._sending:
                await _send_with_fd(loop, sock, message, release_r)
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
                done.set_result(None)


def _reap_quietly(pid: int) -> None:
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, 0)


async def _send_with_fd(
    loop: asyncio.AbstractEventLoop, sock: socket.socket, message: bytes, fd: int
) -> None:
    while True:
        try:
            socket.send_fds(sock, [message], [fd])
            return
        except BlockingIOError:
            writable: asyncio.Future[None] = loop.create_future()
            loop.add_writer(sock, writable.set_result, None)
            try:
                await writable
            finally:
                loop.remove_writer(sock)


async def spawn_detached(
    argv: Sequence[str],
    *,
    cwd: str,
    env: Mapping[str, str],
    files: RunFiles,
    store_path: Path,
    stream: str,
    attempt: int,
    timeout_s: float,
    kill_grace_s: float,
    clock: Clock,
    launcher: WrapperLauncher,
) -> DetachedRun:
    """Start the wrapper (forked by ``launcher``), holding the agent back until
    :meth:`DetachedRun.release`."""
    if not argv:
        raise groups.SpawnError(list(argv), "empty argv")
    # A leftover of an earlier wrapper in this run dir must not speak for this one.
    for stale in (files.exit_file, capped_marker(files.stdout), capped_marker(files.stderr)):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(stale)
    options = [
        "--exit-file",
        str(files.exit_file),
        "--store",
        str(store_path),
        "--stream",
        stream,
        "--attempt",
        str(attempt),
        "--cwd",
        cwd,
        "--stdout",
        files.stdout,
        "--stderr",
        files.stderr,
    ]
    if files.stdin is not None:
        options += ["--stdin", files.stdin]
    if files.cap_bytes is not None:
        options += ["--cap", str(files.cap_bytes)]
    log_path = str(Path(files.run_dir) / WRAPPER_LOG)
    # The release pipe: the wrapper's stdin; the write end stays here (close-on-exec, so no
    # child inherits it) until release() or cancel_unreleased().
    release_r, release_w = os.pipe()
    try:
        pid, start_ticks, reaped = await launcher.spawn(
            log_path, [*options, "--", *argv], env, release_r
        )
    except BaseException:
        os.close(release_w)
        raise
    finally:
        os.close(release_r)
    started_at_ms = clock()
    return DetachedRun(
        pid=pid,
        start_ticks=start_ticks,
        files=files,
        started_at_ms=started_at_ms,
        deadline_ms=started_at_ms + round(timeout_s * 1000),
        kill_grace_s=kill_grace_s,
        reaped=reaped,
        release_fd=release_w,
    )
