"""Short commands (git, verify, the judge, docker): children attached to the daemon.

A child starts in its own session (see :mod:`arenad.runs.groups`). Its stdin is never left
open: it is ``/dev/null``, given bytes, or a given file (opencode reads stdin when it is not
a TTY). Stdout and stderr are read as they arrive, appended to files when asked, and also
captured in memory up to a cap. Timeout and abort end the whole group
(:func:`~arenad.runs.groups.supervise_group`); the result code is 124 on timeout, 130 on
abort, 128+N if the leader died of signal N on its own, else its exit status.

Agent runs are not started here: they must outlive the daemon (:mod:`arenad.runs.detached`).

Errors::

    ProcError (ArenadError)                 arenad.runs.groups
    ├── SpawnError            the child could not be started (missing binary or cwd, ...)
    ├── GroupSurvivedError    a process group still has live members after SIGKILL
    └── CommandError          run_ok: non-zero exit, timeout, or spawn failure (.stage, .argv,
                              .rc, .stderr_tail, .timed_out)
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import os
import signal
import subprocess
from collections.abc import Mapping, Sequence
from typing import IO, Any

import msgspec

from arenad.clock import Clock, system_clock
from arenad.runs.groups import (
    ABORT_CODE,
    DEFAULT_GONE_TIMEOUT_S,
    DEFAULT_KILL_GRACE_S,
    TIMEOUT_CODE,
    ProcError,
    SpawnError,
    display_argv,
    group_alive,
    read_start_ticks,
    signal_group,
    supervise_group,
)

DEFAULT_CAPTURE_LIMIT = 64 * 1024 * 1024
DEFAULT_RUN_OK_TIMEOUT_S = 120.0
# After the group is gone, how long stdout/stderr may go without progress before we stop
# reading (a process that left the group with setsid may still hold the pipe open).
DEFAULT_DRAIN_TIMEOUT_S = 5.0
_CHUNK = 64 * 1024
_TAIL_CHARS = 2000


class CommandError(ProcError):
    def __init__(
        self,
        stage: str,
        argv: Sequence[str],
        rc: int | None,
        stderr_tail: str,
        *,
        timed_out: bool = False,
    ) -> None:
        if timed_out:
            what = "timed out"
        elif rc is None:
            what = "could not start"
        else:
            what = f"exited {rc}"
        tail = f": {stderr_tail.strip()}" if stderr_tail.strip() else ""
        super().__init__(f"{stage}: {display_argv(argv)} {what}{tail}")
        self.stage = stage
        self.argv = list(argv)
        self.rc = rc
        self.stderr_tail = stderr_tail
        self.timed_out = timed_out


class RunResult(msgspec.Struct, frozen=True, kw_only=True):
    """How a run ended. ``code`` is 124 on timeout, 130 on abort, 128+N if the leader died of
    signal N on its own, else its exit status."""

    argv: list[str]
    pid: int
    pgid: int
    code: int
    timed_out: bool
    aborted: bool
    abort_reason: str | None
    wall_s: float
    # The leader's own exit: its status, or the signal that ended it (None if it exited).
    exit_status: int | None
    term_signal: int | None
    # What we sent to the group, in order ("SIGTERM", "SIGKILL").
    signals_sent: list[str]
    # Members the leader left behind in its group were killed after it exited.
    leftovers_killed: bool
    # stdout/stderr made no progress for the drain timeout after the group was gone and were
    # abandoned (a pipe held open outside the group); the files hold what arrived.
    drain_incomplete: bool
    stdout: bytes
    stderr: bytes
    stdout_bytes: int
    stderr_bytes: int
    stdout_truncated: bool
    stderr_truncated: bool

    @property
    def ok(self) -> bool:
        return self.code == 0 and not self.timed_out and not self.aborted

    @property
    def stdout_text(self) -> str:
        return self.stdout.decode("utf-8", errors="replace")

    @property
    def stderr_text(self) -> str:
        return self.stderr.decode("utf-8", errors="replace")


class _Capture:
    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.buf = bytearray()
        self.total = 0

    def add(self, chunk: bytes) -> None:
        self.total += len(chunk)
        room = self.limit - len(self.buf)
        if room > 0:
            self.buf += chunk[:room]

    @property
    def truncated(self) -> bool:
        return self.total > len(self.buf)


# Children are forked off the event loop's thread: a fork (vfork) keeps its caller until
# the child has exec'd, which on a loaded machine is a wait for the scheduler. 300 git and
# verify commands started together from the loop held it ~0.4 s (every cell's ingestion
# waited); from these threads, ~0.1 s.
_SPAWNER = concurrent.futures.ThreadPoolExecutor(max_workers=2, thread_name_prefix="arenad-spawn")


class _Child:
    """A child started by ``subprocess.Popen`` on a spawner thread, followed on the loop:
    its stdout and stderr as stream readers, its exit through a pidfd (so a grandchild
    that keeps the pipes open cannot hold the exit back), its stdin fed by a thread."""

    def __init__(self, popen: subprocess.Popen[bytes], loop: asyncio.AbstractEventLoop) -> None:
        self.popen = popen
        self.pid = popen.pid
        self.exited: asyncio.Future[None] = loop.create_future()
        self.stdout = asyncio.StreamReader(limit=_CHUNK * 4, loop=loop)
        self.stderr = asyncio.StreamReader(limit=_CHUNK * 4, loop=loop)
        self._loop = loop
        self._pipes: list[asyncio.BaseTransport] = []
        self._pidfd: int | None = None

    async def connect(self) -> None:
        loop, popen = self._loop, self.popen
        assert popen.stdout is not None and popen.stderr is not None
        for reader, pipe in ((self.stdout, popen.stdout), (self.stderr, popen.stderr)):
            transport, _ = await loop.connect_read_pipe(
                lambda r=reader: asyncio.StreamReaderProtocol(r, loop=loop),  # type: ignore[misc]
                pipe,
            )
            self._pipes.append(transport)
        try:
            self._pidfd = os.pidfd_open(self.pid)
        except ProcessLookupError:  # already reaped by someone: nothing to wait for
            self._reap()
            return
        loop.add_reader(self._pidfd, self._reap)
        self._reap()  # it may have exited before the reader was added

    def _reap(self) -> None:
        if self.popen.poll() is None and self._pidfd is not None:
            return
        if self._pidfd is not None:
            self._loop.remove_reader(self._pidfd)
            os.close(self._pidfd)
            self._pidfd = None
        if not self.exited.done():
            self.exited.set_result(None)

    def get_returncode(self) -> int | None:
        return self.popen.returncode

    def close(self) -> None:
        """Close the pipes; a child still running is killed (reaped when it exits)."""
        for transport in self._pipes:
            transport.close()
        if self.popen.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)


async def _spawn(
    argv: list[str],
    *,
    stdin: int | IO[bytes],
    cwd: str | None,
    env: dict[str, str] | None,
) -> _Child:
    loop = asyncio.get_running_loop()
    started = loop.run_in_executor(_SPAWNER, _popen, argv, stdin, cwd, env)
    try:
        popen = await asyncio.shield(started)
    except asyncio.CancelledError:
        # The child may be forked all the same: it must not outlive the cancelled start.
        started.add_done_callback(_kill_started)
        raise
    child = _Child(popen, loop)
    try:
        await child.connect()
    except BaseException:
        child.close()
        raise
    return child


def _popen(
    argv: list[str], stdin: int | IO[bytes], cwd: str | None, env: dict[str, str] | None
) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        argv,
        stdin=stdin,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=cwd,
        env=env,
        start_new_session=True,
    )


def _kill_started(started: asyncio.Future[subprocess.Popen[bytes]]) -> None:
    if started.cancelled() or started.exception() is not None:
        return
    popen = started.result()
    signal_group(popen.pid, signal.SIGKILL)
    for pipe in (popen.stdin, popen.stdout, popen.stderr):
        if pipe is not None:
            pipe.close()
    # Reaped off the loop: it is gone at once after SIGKILL.
    _SPAWNER.submit(popen.wait)


class RunHandle:
    """A started child. Streaming begins at once; ``wait()`` returns the RunResult.

    ``started_at_ms`` and ``deadline_ms`` come from the injected clock (epoch ms);
    the timer itself runs on the event loop's monotonic clock.
    """

    def __init__(
        self,
        *,
        child: _Child,
        argv: list[str],
        cwd: str | None,
        started_at_ms: int,
        timeout_s: float | None,
        kill_grace_s: float,
        stdout_file: IO[bytes] | None,
        stderr_file: IO[bytes] | None,
        capture_limit: int,
        stdin_data: bytes | None,
        gone_timeout_s: float,
        drain_timeout_s: float,
    ) -> None:
        loop = asyncio.get_running_loop()
        self._child = child
        self.argv = argv
        self.cwd = cwd
        self.pid: int = child.pid
        # start_new_session: the child is its own session and group leader.
        self.pgid: int = child.pid
        self._start_ticks: int | None = None
        self.started_at_ms = started_at_ms
        self.timeout_s = timeout_s
        self.kill_grace_s = kill_grace_s
        self.deadline_ms: int | None = (
            None if timeout_s is None else started_at_ms + round(timeout_s * 1000)
        )
        self._t0 = loop.time()
        self._deadline_mono = None if timeout_s is None else self._t0 + timeout_s
        self._stdout_file = stdout_file
        self._stderr_file = stderr_file
        self._out = _Capture(capture_limit)
        self._err = _Capture(capture_limit)
        self._abort = asyncio.Event()
        self._abort_reason: str | None = None
        self._stdin_data = stdin_data
        self._gone_timeout_s = gone_timeout_s
        self._drain_timeout_s = drain_timeout_s
        # Bumped on every chunk read: the drain waits while it moves.
        self._progress = 0
        self._task = asyncio.ensure_future(self._supervise())

    @property
    def start_ticks(self) -> int | None:
        """The child's start time (/proc), read on first use: most runs (git, verify)
        never need it, and reading /proc costs more than the rest of a short run."""
        if self._start_ticks is None:
            self._start_ticks = read_start_ticks(self.pid)
        return self._start_ticks

    @property
    def done(self) -> bool:
        return self._task.done()

    def abort(self, reason: str = "aborted") -> None:
        """Ask for the group to be terminated (SIGTERM, then SIGKILL); the code will be 130."""
        if self._abort_reason is None:
            self._abort_reason = reason
        self._abort.set()

    async def wait(self) -> RunResult:
        """The run's result. Cancelling the waiter SIGKILLs the group."""
        return await self._task

    # -- internals --------------------------------------------------------------------------

    async def _feed_stdin(self) -> None:
        stdin = self._child.popen.stdin
        if stdin is None:
            return
        # A blocking write, on a thread: the child may read it slowly (or never).
        await asyncio.to_thread(_write_and_close, stdin, self._stdin_data or b"")

    async def _read_stdout(self) -> None:
        await self._copy(self._child.stdout, self._stdout_file, self._out)

    async def _read_stderr(self) -> None:
        await self._copy(self._child.stderr, self._stderr_file, self._err)

    async def _copy(
        self, stream: asyncio.StreamReader | None, file: IO[bytes] | None, capture: _Capture
    ) -> None:
        assert stream is not None
        while chunk := await stream.read(_CHUNK):
            if file is not None:
                file.write(chunk)
                file.flush()
            capture.add(chunk)
            self._progress += 1

    async def _drain(self, readers: Sequence[asyncio.Task[None]]) -> set[asyncio.Task[None]]:
        """Wait for the readers while they make progress; return those that stalled."""
        while True:
            seen = self._progress
            _, still = await asyncio.wait(readers, timeout=self._drain_timeout_s)
            if not still or self._progress == seen:
                return still

    async def _supervise(self) -> RunResult:
        loop = asyncio.get_running_loop()
        readers = [
            asyncio.ensure_future(self._read_stdout()),
            asyncio.ensure_future(self._read_stderr()),
            asyncio.ensure_future(self._feed_stdin()),
        ]
        exit_future = self._child.exited
        drain_incomplete = False
        try:
            timeout = (
                None if self._deadline_mono is None else max(0.0, self._deadline_mono - loop.time())
            )
            end = await supervise_group(
                self.pgid,
                asyncio.shield(exit_future),
                [self._abort],
                timeout_s=timeout,
                kill_grace_s=self.kill_grace_s,
                gone_timeout_s=self._gone_timeout_s,
            )
            if end.aborted and self._abort_reason is None:
                self._abort_reason = "aborted"
            stream_readers = readers[:2]
            still = await self._drain(stream_readers)
            if still:
                drain_incomplete = True
                for pending_reader in still:
                    pending_reader.cancel()
                await asyncio.gather(*still, return_exceptions=True)
            for reader in stream_readers:
                exc = None if reader.cancelled() else reader.exception()
                if exc is not None:
                    raise exc
        except BaseException:
            # Cancelled (or failed) while the group may live: it must not outlive us.
            if self._child.get_returncode() is None or group_alive(self.pgid):
                signal_group(self.pgid, signal.SIGKILL)
                # Reap the leader before going (bounded): no zombie or unwaited child is left.
                with contextlib.suppress(asyncio.TimeoutError, asyncio.CancelledError):
                    await asyncio.wait_for(asyncio.shield(exit_future), self._gone_timeout_s)
            raise
        finally:
            for fut in [*readers, exit_future]:
                if not fut.done():
                    fut.cancel()
            for f in (self._stdout_file, self._stderr_file):
                if f is not None:
                    f.close()
            self._child.close()
        wall_s = loop.time() - self._t0
        rc = self._child.get_returncode()
        assert rc is not None
        exit_status = rc if rc >= 0 else None
        term_signal = -rc if rc < 0 else None
        if end.timed_out:
            code = TIMEOUT_CODE
        elif end.aborted:
            code = ABORT_CODE
        elif term_signal is not None:
            code = 128 + term_signal
        else:
            code = rc
        return RunResult(
            argv=self.argv,
            pid=self.pid,
            pgid=self.pgid,
            code=code,
            timed_out=end.timed_out,
            aborted=end.aborted,
            abort_reason=self._abort_reason if end.aborted else None,
            wall_s=wall_s,
            exit_status=exit_status,
            term_signal=term_signal,
            signals_sent=end.signals_sent,
            leftovers_killed=end.leftovers_killed,
            drain_incomplete=drain_incomplete,
            stdout=bytes(self._out.buf),
            stderr=bytes(self._err.buf),
            stdout_bytes=self._out.total,
            stderr_bytes=self._err.total,
            stdout_truncated=self._out.truncated,
            stderr_truncated=self._err.truncated,
        )


StdinSpec = bytes | os.PathLike[str] | None


def child_env(env: Mapping[str, str] | None, cwd: str | os.PathLike[str] | None) -> dict[str, str]:
    """The child's environment with PWD naming its real working directory: an inherited
    PWD names the daemon's, and programs that trust PWD (opencode) would work there."""
    out = {k: v for k, v in (os.environ if env is None else env).items() if k != "OLDPWD"}
    out["PWD"] = os.path.abspath(os.fspath(cwd)) if cwd is not None else os.getcwd()
    return out


async def start(
    argv: Sequence[str],
    *,
    cwd: str | os.PathLike[str] | None = None,
    env: Mapping[str, str] | None = None,
    stdin: StdinSpec = None,
    timeout_s: float | None = None,
    kill_grace_s: float = DEFAULT_KILL_GRACE_S,
    stdout_path: str | os.PathLike[str] | None = None,
    stderr_path: str | os.PathLike[str] | None = None,
    capture_limit: int = DEFAULT_CAPTURE_LIMIT,
    clock: Clock = system_clock,
    gone_timeout_s: float = DEFAULT_GONE_TIMEOUT_S,
    drain_timeout_s: float = DEFAULT_DRAIN_TIMEOUT_S,
) -> RunHandle:
    """Start ``argv`` in its own session and return its handle at once.

    ``stdin``: None → /dev/null; bytes → written then closed; a path → that file.
    ``env``: the child's whole environment (None inherits ours). ``stdout_path`` /
    ``stderr_path`` are truncated and receive every byte (the in-memory capture is capped at
    ``capture_limit`` bytes each, keeping the head). ``timeout_s`` None means no timeout.
    """
    argv = [os.fspath(a) for a in argv]
    if not argv:
        raise SpawnError(argv, "empty argv")
    files: list[IO[bytes]] = []
    stdin_file: IO[bytes] | None = None
    stdin_data: bytes | None = None
    try:
        if isinstance(stdin, bytes):
            stdin_arg: int | IO[bytes] = asyncio.subprocess.PIPE
            stdin_data = stdin
        elif stdin is None:
            stdin_arg = asyncio.subprocess.DEVNULL
        else:
            stdin_file = open(stdin, "rb")  # noqa: SIM115 - closed below, after spawn
            stdin_arg = stdin_file
        stdout_file = open(stdout_path, "wb") if stdout_path is not None else None  # noqa: SIM115
        if stdout_file is not None:
            files.append(stdout_file)
        stderr_file = open(stderr_path, "wb") if stderr_path is not None else None  # noqa: SIM115
        if stderr_file is not None:
            files.append(stderr_file)
    except OSError as exc:
        for f in files:
            f.close()
        if stdin_file is not None:
            stdin_file.close()
        raise SpawnError(argv, f"{type(exc).__name__}: {exc}") from exc
    try:
        child = await _spawn(
            argv,
            stdin=stdin_arg,
            cwd=None if cwd is None else os.fspath(cwd),
            env=child_env(env, cwd),
        )
    except OSError as exc:
        for f in files:
            f.close()
        raise SpawnError(argv, f"{type(exc).__name__}: {exc.strerror or exc}") from exc
    finally:
        if stdin_file is not None:
            stdin_file.close()
    return RunHandle(
        child=child,
        argv=argv,
        cwd=None if cwd is None else os.fspath(cwd),
        started_at_ms=clock(),
        timeout_s=timeout_s,
        kill_grace_s=kill_grace_s,
        stdout_file=stdout_file,
        stderr_file=stderr_file,
        capture_limit=capture_limit,
        stdin_data=stdin_data,
        gone_timeout_s=gone_timeout_s,
        drain_timeout_s=drain_timeout_s,
    )


async def run(argv: Sequence[str], **kwargs: Any) -> RunResult:
    """``start(argv, **kwargs)`` then ``wait()``."""
    handle = await start(argv, **kwargs)
    return await handle.wait()


def _write_and_close(stdin: IO[bytes], data: bytes) -> None:
    try:
        if data:
            stdin.write(data)
    except (BrokenPipeError, ConnectionResetError):
        pass
    finally:
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            stdin.close()


def _tail(data: bytes, chars: int = _TAIL_CHARS) -> str:
    text = data.decode("utf-8", errors="replace")
    return text[-chars:]


async def run_ok(
    argv: Sequence[str],
    timeout_s: float = DEFAULT_RUN_OK_TIMEOUT_S,
    *,
    cwd: str | os.PathLike[str] | None = None,
    env: Mapping[str, str] | None = None,
    stage: str | None = None,
    stdin: StdinSpec = None,
    stdout_path: str | os.PathLike[str] | None = None,
    kill_grace_s: float = DEFAULT_KILL_GRACE_S,
) -> RunResult:
    """Run a short command (git, docker); raise CommandError unless it exits 0 in time.

    ``stage`` labels the error (default: the command's name).
    """
    argv = [os.fspath(a) for a in argv]
    label = stage or (os.path.basename(argv[0]) if argv else "run")
    try:
        result = await run(
            argv,
            cwd=cwd,
            env=env,
            stdin=stdin,
            timeout_s=timeout_s,
            kill_grace_s=kill_grace_s,
            stdout_path=stdout_path,
        )
    except SpawnError as exc:
        raise CommandError(label, argv, None, exc.reason) from exc
    if result.timed_out or result.code != 0:
        raise CommandError(
            label, argv, result.code, _tail(result.stderr), timed_out=result.timed_out
        )
    return result
