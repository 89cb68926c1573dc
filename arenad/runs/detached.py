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
import os
import signal
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Literal

import msgspec

from arenad.clock import Clock
from arenad.runs import groups
from arenad.runs.files import (
    WRAPPER_LOG,
    RunFiles,
    capped_marker,
    capped_outputs,
    read_exit_record,
)
from arenad.runs.launcher import LIFELINE_FD
from arenad.runs.launcher_client import WrapperLauncher

# How long a run's end waits for the launcher to reap its wrapper (it does so at once).
_REAP_WAIT_S = 1.0


How = Literal["exited", "timed_out", "aborted", "lost", "not_started"]


class Lifeline(msgspec.Struct, frozen=True, kw_only=True):
    """A run's lifeline (``wrapper.py --lifeline``): the read end the wrapper gets, the
    silence after which it ends its group, and how long after the run's deadline its own
    deadline falls."""

    read_fd: int
    silence_s: float
    deadline_margin_s: float = 2.0


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
    # (path, cause) of each output file the wrapper cut: cause "cap", or the write error
    # after which the rest of that output was dropped.
    capped: list[tuple[str, str]] = []


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
        capped = capped_outputs([self.files.stdout, self.files.stderr])
        now = clock()
        if timed_out:
            return RunEnd(
                how="timed_out",
                code=groups.TIMEOUT_CODE,
                ended_at_ms=now,
                signals_sent=sent,
                capped=capped,
            )
        if aborted:
            return RunEnd(
                how="aborted",
                code=groups.ABORT_CODE,
                ended_at_ms=now,
                reason=self._abort_reason,
                signals_sent=sent,
                capped=capped,
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
                capped=capped,
            )
        if record.ended_by == "deadline":
            # The wrapper's own deadline (a remote run whose supervisor could not act).
            return RunEnd(
                how="timed_out",
                code=groups.TIMEOUT_CODE,
                ended_at_ms=record.ended_at_ms or now,
                signals_sent=sent,
                capped=capped,
            )
        if record.started and record.ended_by is not None:
            return RunEnd(
                how="lost",
                code=None,
                ended_at_ms=record.ended_at_ms or now,
                reason=record.ended_by,
                signals_sent=sent,
                capped=capped,
            )
        if not record.started:
            return RunEnd(
                how="not_started",
                code=None,
                ended_at_ms=record.ended_at_ms or now,
                reason=record.error or "the agent was not started",
                capped=capped,
            )
        return RunEnd(
            how="exited",
            code=record.code,
            ended_at_ms=record.ended_at_ms or now,
            signals_sent=sent,
            leftovers_killed=leftovers,
            capped=capped,
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


async def spawn_detached(
    argv: Sequence[str],
    *,
    cwd: str,
    env: Mapping[str, str],
    files: RunFiles,
    store_path: Path | None,
    stream: str,
    attempt: int,
    timeout_s: float,
    kill_grace_s: float,
    clock: Clock,
    launcher: WrapperLauncher,
    lifeline: Lifeline | None = None,
) -> DetachedRun:
    """Start the wrapper (forked by ``launcher``), holding the agent back until
    :meth:`DetachedRun.release`.

    ``store_path`` None: no log on this machine (a cluster node), so a wrapper whose
    release pipe closes unreleased never starts its agent. ``lifeline``: the wrapper also
    ends its group when its supervisor goes (see ``arenad/runs/wrapper.py``)."""
    if not argv:
        raise groups.SpawnError(list(argv), "empty argv")
    # A leftover of an earlier wrapper in this run dir must not speak for this one.
    for stale in (files.exit_file, capped_marker(files.stdout), capped_marker(files.stderr)):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(stale)
    options = [
        "--exit-file",
        str(files.exit_file),
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
    if store_path is not None:
        options += ["--store", str(store_path)]
    if lifeline is not None:
        options += ["--lifeline", str(LIFELINE_FD), "--grace", str(kill_grace_s)]
        options += ["--lifeline-silence", str(lifeline.silence_s)]
        # Later than the supervisor's own deadline, which normally ends the run first.
        options += ["--deadline-s", str(timeout_s + kill_grace_s + lifeline.deadline_margin_s)]
    log_path = str(Path(files.run_dir) / WRAPPER_LOG)
    # The release pipe: the wrapper's stdin; the write end stays here (close-on-exec, so no
    # child inherits it) until release() or cancel_unreleased().
    release_r, release_w = os.pipe()
    try:
        pid, start_ticks, reaped = await launcher.spawn(
            log_path,
            [*options, "--", *argv],
            env,
            release_r,
            lifeline.read_fd if lifeline is not None else None,
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
