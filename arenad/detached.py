"""Agent runs that outlive the daemon: started through the run wrapper, watched by pid.

:func:`spawn_detached` starts ``arenad/runwrap.py`` in a new session (it is the group
leader; the agent will be its child in the same group) with the agent's stdio going to
files in the run dir, not to pipes of the daemon — so nothing ties the agent's life to
the daemon's. The wrapper holds the agent back until :meth:`DetachedRun.release` (called
once ``RunStarted`` is committed) writes into its release pipe or, if the daemon died (the
pipe reads end-of-file), until it has checked the log itself; see ``arenad/runwrap.py``
for that rule.

:meth:`DetachedRun.wait` is the same for a run this daemon started and for one it adopted
after a restart: it watches the wrapper through a pidfd (no polling, and no need to be its
parent), enforces the recorded deadline, turns an abort into TERM/grace/KILL of the whole
group, and reads the wrapper's exit record to say how the agent ended.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Literal

import msgspec

from arenad import proc, runwrap
from arenad.clock import Clock

WRAPPER = Path(runwrap.__file__).resolve()
# The wrapper is imported, not run as a script, so its bytecode is cached rather than
# compiled on every start. Its dir goes last on the path: stdlib names win over arenad's.
# It opens its own log (argv[1]) first thing: created in the child, not in the spawn's file
# actions, where the daemon would wait on it with its GIL held.
_LOG_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_APPEND
_BOOT = (
    f"import os, sys; fd = os.open(sys.argv[1], {_LOG_FLAGS}, 0o644); os.dup2(fd, 1);"
    " os.dup2(fd, 2); os.close(fd);"
    f" sys.path.append({str(WRAPPER.parent)!r}); import runwrap;"
    " sys.exit(runwrap.main(sys.argv[2:]))"
)
EXIT_FILE = "arenad.exit.json"
WRAPPER_LOG = "arenad.wrapper.log"


class RunFiles(msgspec.Struct, frozen=True, kw_only=True):
    """Where one run's wrapper reads and writes (all in the cell's run dir)."""

    run_dir: str
    stdout: str
    stderr: str
    stdin: str | None = None

    @property
    def exit_file(self) -> Path:
        return Path(self.run_dir) / EXIT_FILE


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
        is_child: bool,
        gone_timeout_s: float = proc.DEFAULT_GONE_TIMEOUT_S,
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
        self.is_child = is_child
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
            is_child=False,
        )

    @property
    def alive(self) -> bool:
        """Whether our wrapper (not a process that recycled its pid) is still running."""
        if self.start_ticks is None or not proc.process_identity_matches(
            self.pid, self.start_ticks
        ):
            return False
        return proc.group_alive(self.pgid)

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
            self._reap()
        finally:
            # Only now: an end-of-file would send a live wrapper to the log.
            if self._release_fd is not None:
                os.close(self._release_fd)
                self._release_fd = None

    async def wait(self, clock: Clock) -> RunEnd:
        """Wait for the run to end: on its own, at the deadline, or on :meth:`abort`."""
        loop = asyncio.get_running_loop()
        exited = asyncio.ensure_future(self._wait_exit(loop))
        abort = asyncio.ensure_future(self._abort.wait())
        sent: list[str] = []
        timed_out = aborted = leftovers = False
        try:
            timeout = max(0.0, (self.deadline_ms - clock()) / 1000)
            done, _ = await asyncio.wait(
                {exited, abort}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED
            )
            if exited not in done:
                aborted = abort in done
                timed_out = not aborted
                await proc.terminate_group(self.pgid, self.kill_grace_s, self.gone_timeout_s, sent)
                await exited
            self._reap()
            if not (timed_out or aborted) and proc.group_alive(self.pgid):
                # The agent left members behind in its group: they must not outlive the run.
                leftovers = True
                await proc.terminate_group(self.pgid, self.kill_grace_s, self.gone_timeout_s, sent)
        finally:
            exited.cancel()
            abort.cancel()
        now = clock()
        if timed_out:
            return RunEnd(
                how="timed_out", code=proc.TIMEOUT_CODE, ended_at_ms=now, signals_sent=sent
            )
        if aborted:
            return RunEnd(
                how="aborted",
                code=proc.ABORT_CODE,
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
            if self.start_ticks is None or proc.read_start_ticks(self.pid) != self.start_ticks:
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

    def _reap(self) -> None:
        # Only the daemon that started the wrapper is its parent; an adopted one is reaped
        # by whoever inherited it.
        if self.is_child:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(self.pid, os.WNOHANG)


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
) -> DetachedRun:
    """Start the wrapper, holding the agent back until :meth:`DetachedRun.release`."""
    if not argv:
        raise proc.SpawnError(list(argv), "empty argv")
    with contextlib.suppress(FileNotFoundError):
        files.exit_file.unlink()
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
    log = str(Path(files.run_dir) / WRAPPER_LOG)
    wrapper_argv = [sys.executable, "-I", "-S", "-c", _BOOT, log, *options, "--", *argv]
    # The release pipe: the wrapper's stdin; the write end stays here (close-on-exec, so no
    # other child inherits it) until release() or cancel_unreleased().
    release_r, release_w = os.pipe()
    try:
        pid = os.posix_spawn(
            sys.executable,
            wrapper_argv,
            dict(env),
            file_actions=[
                (os.POSIX_SPAWN_DUP2, release_r, 0),
                (os.POSIX_SPAWN_OPEN, 1, os.devnull, os.O_WRONLY, 0),
                (os.POSIX_SPAWN_DUP2, 1, 2),
            ],
            setsid=True,
        )
    except OSError as exc:
        os.close(release_w)
        raise proc.SpawnError(wrapper_argv, f"{type(exc).__name__}: {exc}") from exc
    finally:
        os.close(release_r)
    started_at_ms = clock()
    return DetachedRun(
        pid=pid,
        start_ticks=proc.read_start_ticks(pid),
        files=files,
        started_at_ms=started_at_ms,
        deadline_ms=started_at_ms + round(timeout_s * 1000),
        kill_grace_s=kill_grace_s,
        is_child=True,
        release_fd=release_w,
    )
