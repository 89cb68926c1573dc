"""The process runner: children in their own process group, streamed, bounded, killable.

A child starts in a new session (so its pid is its process-group id and every process it
spawns stays in that group unless it calls ``setsid`` itself). Its stdin is never left open:
it is ``/dev/null``, given bytes, or a given file (opencode reads stdin when it is not a TTY).
Stdout is read in chunks as it arrives, appended to a file and handed line by line, with the
line's byte offset in the stream, to an async callback; stderr goes to a file. Both are also
captured in memory up to a cap.

On timeout or abort the whole group gets SIGTERM, then SIGKILL after the kill grace; the result
code is 124 (timeout) or 130 (abort), the coreutils ``timeout`` encoding. After SIGKILL the
group must be gone within a short bounded poll, else :class:`GroupSurvivedError`. When the
leader exits on its own, members it left behind in the group are killed the same way (they
would otherwise hold the stdout pipe open and outlive the run).

"Gone" ignores zombies: on this kind of machine PID 1 reaps orphans late, and a group whose
members are all zombies still answers ``killpg(pgid, 0)``. Liveness is therefore
``killpg(pgid, 0)`` succeeding *and* some ``/proc/<pid>/stat`` in that group not being in state
Z or X.

Errors::

    ProcError (ArenadError)
    ├── SpawnError            the child could not be started (missing binary or cwd, ...)
    ├── GroupSurvivedError    a process group still has live members after SIGKILL
    ├── StdoutCallbackError   on_stdout_line raised; the run was aborted (.result, __cause__)
    └── CommandError          run_ok: non-zero exit, timeout, or spawn failure (.stage, .argv,
                              .rc, .stderr_tail, .timed_out)
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import IO, Any

import msgspec

from arenad.clock import Clock, system_clock
from arenad.errors import ArenadError

TIMEOUT_CODE = 124
ABORT_CODE = 130
DEFAULT_CAPTURE_LIMIT = 64 * 1024 * 1024
DEFAULT_KILL_GRACE_S = 1.0
DEFAULT_RUN_OK_TIMEOUT_S = 120.0
# After SIGKILL the kernel tears a group down in milliseconds; this bounds the poll.
DEFAULT_GONE_TIMEOUT_S = 5.0
# After the group is gone, how long stdout/stderr may go without progress before we stop
# reading (a process that left the group with setsid may still hold the pipe open).
DEFAULT_DRAIN_TIMEOUT_S = 5.0
_POLL_S = 0.02
_CHUNK = 64 * 1024
_TAIL_CHARS = 2000

LineCallback = Callable[[bytes, int], Awaitable[None]]


class ProcError(ArenadError):
    pass


class SpawnError(ProcError):
    def __init__(self, argv: Sequence[str], reason: str) -> None:
        super().__init__(f"could not start {display_argv(argv)}: {reason}")
        self.argv = list(argv)
        self.reason = reason


class GroupSurvivedError(ProcError):
    def __init__(self, pgid: int, members: Sequence[tuple[int, str]]) -> None:
        shown = ", ".join(f"{pid}({state})" for pid, state in members) or "unknown members"
        super().__init__(f"process group {pgid} survived SIGKILL: {shown}")
        self.pgid = pgid
        self.members = list(members)


class StdoutCallbackError(ProcError):
    def __init__(self, result: RunResult) -> None:
        super().__init__(f"on_stdout_line raised; the run was aborted (pid {result.pid})")
        self.result = result


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


# ---------------------------------------------------------------------------------------------
# /proc helpers and group liveness.
# ---------------------------------------------------------------------------------------------


def _stat_fields(pid: int) -> list[str] | None:
    """Fields 3.. of /proc/<pid>/stat (after the parenthesised comm), or None if unreadable."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return None
    close = raw.rfind(b")")
    if close < 0:
        return None
    return raw[close + 2 :].decode("ascii", errors="replace").split()


def read_start_ticks(pid: int) -> int | None:
    """Field 22 of /proc/<pid>/stat: start time in clock ticks since boot (None if gone)."""
    fields = _stat_fields(pid)
    if fields is None or len(fields) < 20:
        return None
    try:
        return int(fields[19])
    except ValueError:
        return None


def process_identity_matches(pid: int, start_ticks: int) -> bool:
    """True when ``pid`` is running and is the same process that had ``start_ticks``."""
    return read_start_ticks(pid) == start_ticks


def group_members(pgid: int) -> list[tuple[int, str]]:
    """(pid, state) of every process whose process group is ``pgid`` (zombies included)."""
    members: list[tuple[int, str]] = []
    try:
        entries = os.listdir("/proc")
    except OSError:
        return members
    for name in entries:
        if not name.isdigit():
            continue
        fields = _stat_fields(int(name))
        # fields[0] = state (field 3), fields[2] = pgrp (field 5)
        if fields is None or len(fields) < 3:
            continue
        if fields[2] == str(pgid):
            members.append((int(name), fields[0]))
    return members


def group_alive(pgid: int) -> bool:
    """Whether any non-zombie process is still in process group ``pgid``."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        # It exists but is not ours; report it alive (we cannot signal it anyway).
        return True
    return any(state not in ("Z", "X", "x") for _, state in group_members(pgid))


async def wait_group_gone(
    pgid: int, timeout_s: float = DEFAULT_GONE_TIMEOUT_S, *, poll_s: float = _POLL_S
) -> None:
    """Poll until group ``pgid`` has no live member; raise GroupSurvivedError at the deadline."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while group_alive(pgid):
        if loop.time() >= deadline:
            live = [(p, s) for p, s in group_members(pgid) if s not in ("Z", "X", "x")]
            raise GroupSurvivedError(pgid, live)
        await asyncio.sleep(poll_s)


def _signal_group(pgid: int, sig: int) -> bool:
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        return False
    return True


async def _poll_gone(pgid: int, timeout_s: float) -> bool:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while group_alive(pgid):
        if loop.time() >= deadline:
            return False
        await asyncio.sleep(_POLL_S)
    return True


async def terminate_group(
    pgid: int, grace_s: float, gone_timeout_s: float, sent: list[str]
) -> None:
    """SIGTERM the group, SIGKILL it if it outlives ``grace_s``, then require it gone."""
    if not group_alive(pgid):
        return
    if _signal_group(pgid, signal.SIGTERM):
        sent.append("SIGTERM")
    if await _poll_gone(pgid, grace_s):
        return
    if _signal_group(pgid, signal.SIGKILL):
        sent.append("SIGKILL")
    await wait_group_gone(pgid, gone_timeout_s)


async def kill_group(
    pgid: int,
    grace_s: float = DEFAULT_KILL_GRACE_S,
    *,
    leader_start_ticks: int | None = None,
    gone_timeout_s: float = DEFAULT_GONE_TIMEOUT_S,
) -> bool:
    """SIGTERM process group ``pgid``, SIGKILL after ``grace_s``, and verify it is gone.

    Returns False (and signals nothing) when the group has no live member, or when
    ``leader_start_ticks`` is given and the process now holding pid ``pgid`` started at a
    different time (a recycled pid: not our group). Raises GroupSurvivedError if live members
    remain after SIGKILL.
    """
    if leader_start_ticks is not None:
        ticks = read_start_ticks(pgid)
        if ticks is not None and ticks != leader_start_ticks:
            return False
    if not group_alive(pgid):
        return False
    await terminate_group(pgid, grace_s, gone_timeout_s, [])
    return True


# ---------------------------------------------------------------------------------------------
# Running a child.
# ---------------------------------------------------------------------------------------------

_URL_USERINFO = re.compile(r"(?<=://)[^/@\s]+@")


def display_argv(argv: Sequence[str], limit: int = 300) -> str:
    """argv for messages: URL credentials masked, long arguments (scripts) shortened."""
    parts = []
    for arg in argv:
        shown = _URL_USERINFO.sub("***@", arg)
        if len(shown) > 80:
            shown = shown[:77] + "..."
        parts.append(shown)
    text = " ".join(parts)
    return text if len(text) <= limit else text[: limit - 3] + "..."


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


class _Protocol(asyncio.subprocess.SubprocessStreamProtocol):
    """The stream protocol plus a future that resolves when the child exits.

    ``Process.wait()`` (3.11) resolves only once the pipes close as well; a grandchild that
    holds stdout open would keep it pending, so exit is observed here instead.
    """

    def __init__(self, limit: int, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__(limit=limit, loop=loop)
        self.exited: asyncio.Future[None] = loop.create_future()

    def process_exited(self) -> None:
        super().process_exited()
        if not self.exited.done():
            self.exited.set_result(None)


class RunHandle:
    """A started child. Streaming begins at once; ``wait()`` returns the RunResult.

    ``started_at_ms`` and ``deadline_ms`` come from the injected clock (epoch ms);
    the timer itself runs on the event loop's monotonic clock.
    """

    def __init__(
        self,
        *,
        proc: asyncio.subprocess.Process,
        transport: asyncio.SubprocessTransport,
        protocol: _Protocol,
        argv: list[str],
        cwd: str | None,
        started_at_ms: int,
        timeout_s: float | None,
        kill_grace_s: float,
        on_stdout_line: LineCallback | None,
        stdout_file: IO[bytes] | None,
        stderr_file: IO[bytes] | None,
        capture_limit: int,
        abort_event: asyncio.Event | None,
        stdin_data: bytes | None,
        gone_timeout_s: float,
        drain_timeout_s: float,
    ) -> None:
        loop = asyncio.get_running_loop()
        self._proc = proc
        self._transport = transport
        self._protocol = protocol
        self.argv = argv
        self.cwd = cwd
        self.pid: int = proc.pid
        # start_new_session: the child is its own session and group leader.
        self.pgid: int = proc.pid
        self._start_ticks: int | None = None
        self.started_at_ms = started_at_ms
        self.timeout_s = timeout_s
        self.kill_grace_s = kill_grace_s
        self.deadline_ms: int | None = (
            None if timeout_s is None else started_at_ms + round(timeout_s * 1000)
        )
        self._t0 = loop.time()
        self._deadline_mono = None if timeout_s is None else self._t0 + timeout_s
        self._on_line = on_stdout_line
        self._stdout_file = stdout_file
        self._stderr_file = stderr_file
        self._out = _Capture(capture_limit)
        self._err = _Capture(capture_limit)
        self._abort = asyncio.Event()
        self._abort_reason: str | None = None
        self._external_abort = abort_event
        self._stdin_data = stdin_data
        self._gone_timeout_s = gone_timeout_s
        self._drain_timeout_s = drain_timeout_s
        # Bumped on every chunk read and line delivered: the drain waits while it moves.
        self._progress = 0
        self._callback_exc: BaseException | None = None
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
        stdin = self._proc.stdin
        if stdin is None:
            return
        try:
            if self._stdin_data:
                stdin.write(self._stdin_data)
                await stdin.drain()
        except (BrokenPipeError, ConnectionResetError):
            pass
        finally:
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                stdin.close()

    async def _read_stdout(self) -> None:
        stream = self._proc.stdout
        assert stream is not None
        pending = bytearray()
        pending_offset = 0
        offset = 0
        while True:
            chunk = await stream.read(_CHUNK)
            if not chunk:
                break
            if self._stdout_file is not None:
                self._stdout_file.write(chunk)
                self._stdout_file.flush()
            self._out.add(chunk)
            self._progress += 1
            offset += len(chunk)
            if self._on_line is None or self._callback_exc is not None:
                continue
            pending += chunk
            start = 0
            while True:
                nl = pending.find(b"\n", start)
                if nl < 0:
                    break
                line = bytes(pending[start : nl + 1])
                await self._deliver(line, pending_offset)
                pending_offset += len(line)
                start = nl + 1
                if self._callback_exc is not None:
                    break
            del pending[:start]
            # A line longer than the capture cap is delivered in pieces rather than held.
            if len(pending) >= self._out.limit:
                await self._deliver(bytes(pending), pending_offset)
                pending_offset += len(pending)
                pending.clear()
        if pending and self._on_line is not None and self._callback_exc is None:
            await self._deliver(bytes(pending), pending_offset)

    async def _deliver(self, line: bytes, offset: int) -> None:
        assert self._on_line is not None
        try:
            await self._on_line(line, offset)
            self._progress += 1
        except Exception as exc:
            self._callback_exc = exc
            self.abort(f"on_stdout_line raised {type(exc).__name__}")

    async def _read_stderr(self) -> None:
        stream = self._proc.stderr
        assert stream is not None
        while True:
            chunk = await stream.read(_CHUNK)
            if not chunk:
                break
            if self._stderr_file is not None:
                self._stderr_file.write(chunk)
                self._stderr_file.flush()
            self._err.add(chunk)
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
        exit_task = self._protocol.exited
        abort_task = asyncio.ensure_future(self._abort.wait())
        external_task = (
            asyncio.ensure_future(self._external_abort.wait())
            if self._external_abort is not None
            else None
        )
        waiters: set[asyncio.Future[Any]] = {exit_task, abort_task}
        if external_task is not None:
            waiters.add(external_task)
        timed_out = aborted = leftovers_killed = drain_incomplete = False
        sent: list[str] = []
        try:
            timeout = (
                None if self._deadline_mono is None else max(0.0, self._deadline_mono - loop.time())
            )
            done, _ = await asyncio.wait(
                waiters, timeout=timeout, return_when=asyncio.FIRST_COMPLETED
            )
            if exit_task not in done:
                if abort_task in done or (external_task is not None and external_task in done):
                    aborted = True
                    if self._abort_reason is None:
                        self._abort_reason = "aborted"
                else:
                    timed_out = True
                await terminate_group(self.pgid, self.kill_grace_s, self._gone_timeout_s, sent)
            await exit_task
            if not timed_out and not aborted and group_alive(self.pgid):
                leftovers_killed = True
                await terminate_group(self.pgid, self.kill_grace_s, self._gone_timeout_s, sent)
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
            if self._transport.get_returncode() is None or group_alive(self.pgid):
                _signal_group(self.pgid, signal.SIGKILL)
                # Reap the leader before going (bounded): no zombie or unwaited child is left.
                with contextlib.suppress(asyncio.TimeoutError, asyncio.CancelledError):
                    await asyncio.wait_for(asyncio.shield(exit_task), self._gone_timeout_s)
            raise
        finally:
            leftover: list[asyncio.Future[Any]] = [*readers, exit_task, abort_task]
            if external_task is not None:
                leftover.append(external_task)
            for fut in leftover:
                if not fut.done():
                    fut.cancel()
            for f in (self._stdout_file, self._stderr_file):
                if f is not None:
                    f.close()
            self._transport.close()
        wall_s = loop.time() - self._t0
        rc = self._transport.get_returncode()
        assert rc is not None
        exit_status = rc if rc >= 0 else None
        term_signal = -rc if rc < 0 else None
        if timed_out:
            code = TIMEOUT_CODE
        elif aborted:
            code = ABORT_CODE
        elif term_signal is not None:
            code = 128 + term_signal
        else:
            code = rc
        result = RunResult(
            argv=self.argv,
            pid=self.pid,
            pgid=self.pgid,
            code=code,
            timed_out=timed_out,
            aborted=aborted,
            abort_reason=self._abort_reason if aborted else None,
            wall_s=wall_s,
            exit_status=exit_status,
            term_signal=term_signal,
            signals_sent=sent,
            leftovers_killed=leftovers_killed,
            drain_incomplete=drain_incomplete,
            stdout=bytes(self._out.buf),
            stderr=bytes(self._err.buf),
            stdout_bytes=self._out.total,
            stderr_bytes=self._err.total,
            stdout_truncated=self._out.truncated,
            stderr_truncated=self._err.truncated,
        )
        if self._callback_exc is not None:
            raise StdoutCallbackError(result) from self._callback_exc
        return result


StdinSpec = bytes | os.PathLike[str] | None


async def start(
    argv: Sequence[str],
    *,
    cwd: str | os.PathLike[str] | None = None,
    env: Mapping[str, str] | None = None,
    stdin: StdinSpec = None,
    timeout_s: float | None = None,
    kill_grace_s: float = DEFAULT_KILL_GRACE_S,
    on_stdout_line: LineCallback | None = None,
    stdout_path: str | os.PathLike[str] | None = None,
    stderr_path: str | os.PathLike[str] | None = None,
    capture_limit: int = DEFAULT_CAPTURE_LIMIT,
    abort_event: asyncio.Event | None = None,
    clock: Clock = system_clock,
    gone_timeout_s: float = DEFAULT_GONE_TIMEOUT_S,
    drain_timeout_s: float = DEFAULT_DRAIN_TIMEOUT_S,
) -> RunHandle:
    """Start ``argv`` in its own session and return its handle at once.

    ``stdin``: None → /dev/null; bytes → written then closed; a path → that file.
    ``env``: the child's whole environment (None inherits ours). ``stdout_path`` /
    ``stderr_path`` are truncated and receive every byte (the in-memory capture is capped at
    ``capture_limit`` bytes each, keeping the head). ``on_stdout_line(line, offset)`` gets each
    stdout line with its terminator, in order, after the bytes reached ``stdout_path``;
    ``offset`` is the line's byte offset in the stream. A final unterminated line is delivered
    at EOF. ``timeout_s`` None means no timeout.
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
        loop = asyncio.get_running_loop()
        transport, protocol = await loop.subprocess_exec(
            lambda: _Protocol(_CHUNK * 4, loop),
            *argv,
            stdin=stdin_arg,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            cwd=None if cwd is None else os.fspath(cwd),
            env=None if env is None else dict(env),
            start_new_session=True,
        )
    except OSError as exc:
        for f in files:
            f.close()
        raise SpawnError(argv, f"{type(exc).__name__}: {exc.strerror or exc}") from exc
    finally:
        if stdin_file is not None:
            stdin_file.close()
    return RunHandle(
        proc=asyncio.subprocess.Process(transport, protocol, loop),
        transport=transport,
        protocol=protocol,
        argv=argv,
        cwd=None if cwd is None else os.fspath(cwd),
        started_at_ms=clock(),
        timeout_s=timeout_s,
        kill_grace_s=kill_grace_s,
        on_stdout_line=on_stdout_line,
        stdout_file=stdout_file,
        stderr_file=stderr_file,
        capture_limit=capture_limit,
        abort_event=abort_event,
        stdin_data=stdin_data,
        gone_timeout_s=gone_timeout_s,
        drain_timeout_s=drain_timeout_s,
    )


async def run(argv: Sequence[str], **kwargs: Any) -> RunResult:
    """``start(argv, **kwargs)`` then ``wait()``."""
    handle = await start(argv, **kwargs)
    return await handle.wait()


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
