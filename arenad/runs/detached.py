"""Agent runs that outlive the daemon: started through the run wrapper, watched by pid.

:func:`spawn_detached` has the daemon's :class:`WrapperLauncher` fork a run wrapper
(``arenad/runs/wrapper.py``) in a new session (it is the group leader; the agent will be its
child in the same group) with the agent's stdio going to
files in the run dir, not to pipes of the daemon — so nothing ties the agent's life to
the daemon's. The wrapper holds the agent back until :meth:`DetachedRun.release` (called
once ``RunStarted`` is committed) writes into its release socket or, if the daemon died
(the socket reads end-of-file), until it has checked the log itself; see ``arenad/runs/wrapper.py``
for that rule.

:meth:`DetachedRun.wait` is the same for a run this daemon started and for one it adopted
after a restart: it watches the wrapper through a pidfd (no polling, and no need to be its
parent), enforces the recorded deadline, turns an abort into TERM/grace/KILL of the whole
group, and reads the wrapper's exit record to say how the agent ended.

The release channel is a socket pair, not a pipe: after the release the daemon keeps its
end, and a wrapper that cannot write its exit record (a full disk) sends the record back
through it (``arenad/runs/wrapper.py``, job 3). The daemon then has the run's real end
without the file, and ends the wrapper, which would otherwise retry the file for as long
as the disk stays full.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Literal

import msgspec

from arenad.clock import Clock
from arenad.runs import groups
from arenad.runs.files import (
    WRAPPER_LOG,
    ExitRecord,
    RunFiles,
    capped_marker,
    capped_outputs,
    decode_exit_record,
    read_exit_record,
)
from arenad.runs.launcher import LIFELINE_FD
from arenad.runs.launcher_client import WrapperLauncher
from arenad.sandbox.container import docker_bin

# How long a run's end waits for the launcher to reap its wrapper (it does so at once).
_REAP_WAIT_S = 1.0
# The most of an exit record read from the wrapper's socket (a record is ~300 bytes).
_MAX_REPORT = 1 << 16
# Bytes of the wrapper's log quoted when it died without an exit record.
_LOG_TAIL = 400
# What a run gone without an exit record is recorded as when no daemon watched it end.
LOST_WITH_THE_DAEMON = "lost with the daemon"


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
    without an exit record (``reason`` says what is known: how it died, or that it ended
    while no daemon watched). ``not_started``: the wrapper ran but the agent never did
    (``reason`` says why).
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
    # The bytes each cut file kept (where known).
    kept: dict[str, int] = {}
    # The limit that ended the run ("memory", "pids", "disk": arenad.runs.cgroups), from
    # the wrapper's record and the run's cgroup counters; None: none did.
    limit: str | None = None


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
        reaped: asyncio.Future[int | None] | None = None,
        gone_timeout_s: float = groups.DEFAULT_GONE_TIMEOUT_S,
        channel: socket.socket | None = None,
    ) -> None:
        self.pid = pid
        # The wrapper is its session's leader, so its pid is the group id.
        self.pgid = pid
        self.start_ticks = start_ticks
        self.files = files
        self.started_at_ms = started_at_ms
        self.deadline_ms = deadline_ms
        self.kill_grace_s = kill_grace_s
        # Set to its wait status once the launcher has reaped the wrapper (only for a
        # wrapper started here).
        self._reaped = reaped
        self.gone_timeout_s = gone_timeout_s
        self._abort = asyncio.Event()
        self._abort_reason: str | None = None
        # The daemon's end of the wrapper's release socket (only for a wrapper started
        # here): the release goes in, an exit record that found no room on disk comes out.
        self._channel = channel
        self._released = False
        self._report: ExitRecord | None = None
        # Whether the wrapper was already gone when this daemon began to watch it.
        self._gone_before_watch = False

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
        pid, written into its release socket (kept open: see the module docstring)."""
        channel = self._channel
        if channel is None or self._released:
            raise RuntimeError(f"wrapper {self.pid} has no release socket (released already?)")
        self._released = True
        # An error: the wrapper is gone; wait() reads its exit record (or finds none).
        with contextlib.suppress(OSError):
            channel.send(f"{self.pid}\n".encode())

    def close(self) -> None:
        """Drop the daemon's end of the release socket (after the run's end, or when the
        daemon leaves the run running for the next one: the wrapper then writes its file)."""
        channel, self._channel = self._channel, None
        if channel is not None:
            channel.close()

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
            self.close()

    async def wait(self, clock: Clock) -> RunEnd:
        """Wait for the run to end: on its own, at the deadline, or on :meth:`abort`."""
        try:
            end = await groups.supervise_group(
                self.pgid,
                self._wait_exit(asyncio.get_running_loop()),
                [self._abort],
                timeout_s=max(0.0, (self.deadline_ms - clock()) / 1000),
                kill_grace_s=self.kill_grace_s,
                gone_timeout_s=self.gone_timeout_s,
                settled=self._until_reaped,
            )
        finally:
            self.close()
        timed_out, aborted, sent = end.timed_out, end.aborted, end.signals_sent
        leftovers = end.leftovers_killed
        record = read_exit_record(self.files.exit_file, self.pid) or self._report
        capped = capped_outputs([self.files.stdout, self.files.stderr])
        if record is not None and record.capped:
            # The wrapper's own word: a marker may be empty on a full disk.
            capped = [(path, record.capped.get(path, cause)) for path, cause in capped]
            capped += [(p, c) for p, c in record.capped.items() if p not in dict(capped)]
        kept = _kept_bytes([path for path, _ in capped], record)
        now = clock()
        if timed_out:
            return RunEnd(
                how="timed_out",
                code=groups.TIMEOUT_CODE,
                ended_at_ms=now,
                signals_sent=sent,
                capped=capped,
                kept=kept,
            )
        if aborted:
            return RunEnd(
                how="aborted",
                code=groups.ABORT_CODE,
                ended_at_ms=now,
                reason=self._abort_reason,
                signals_sent=sent,
                capped=capped,
                kept=kept,
            )
        if record is None:
            return RunEnd(
                how="lost",
                code=None,
                ended_at_ms=now,
                reason=self._lost_reason(),
                signals_sent=sent,
                leftovers_killed=leftovers,
                capped=capped,
                kept=kept,
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
                kept=kept,
            )
        return RunEnd(
            how="exited",
            code=record.code,
            ended_at_ms=record.ended_at_ms or now,
            signals_sent=sent,
            leftovers_killed=leftovers,
            capped=capped,
            kept=kept,
            limit=record.limit,
        )

    def _wrapper_running(self) -> bool:
        """Whether the wrapper itself (not its group) runs: a zombie does not (an
        orphaned wrapper may wait long for a late reaper)."""
        fields = groups.stat_fields(self.pid)
        return (
            fields is not None
            and len(fields) > 19
            and fields[0] not in ("Z", "X", "x")
            and self.start_ticks is not None
            and fields[19] == str(self.start_ticks)
        )

    def _lost_reason(self) -> str:
        """What is known of a wrapper gone without an exit record: "lost with the daemon"
        only when no daemon watched it end."""
        if self._reaped is None:
            if self._gone_before_watch:
                return LOST_WITH_THE_DAEMON
            how = "how is unknown: an adopted wrapper is not this daemon's child"
        elif self._reaped.done() and (status := self._reaped.result()) is not None:
            how = _wait_status(status)
        else:
            how = "how is unknown: its launcher died before it"
        reason = f"the run's wrapper died without an exit record while the daemon ran ({how})"
        tail = _log_tail(Path(self.files.run_dir) / WRAPPER_LOG)
        return f"{reason}; its log ends: {tail}" if tail else reason

    async def _wait_exit(self, loop: asyncio.AbstractEventLoop) -> None:
        """Return when the wrapper has exited (a pidfd becomes readable; no polling), or
        has sent its exit record because it could not write it (it is then ended here)."""
        self._gone_before_watch = not self._wrapper_running()
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
            reading = self._read_report(loop) if self._channel is not None else None
            try:
                waits: set[asyncio.Future[None]] = {ready}
                if reading is not None:
                    waits.add(reading)
                done, _ = await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
                if ready not in done and self._report is not None:
                    await self._end_reporting_wrapper(ready)
            finally:
                loop.remove_reader(fd)
                if reading is not None and not reading.done():
                    reading.cancel()
                    with contextlib.suppress(BaseException):
                        await reading
        finally:
            os.close(fd)

    def _read_report(self, loop: asyncio.AbstractEventLoop) -> asyncio.Future[None]:
        """A task that ends once the wrapper has sent an exit record (setting
        ``_report``); at end-of-file (the wrapper exited) it waits forever instead."""
        channel = self._channel
        assert channel is not None

        async def read() -> None:
            channel.setblocking(False)
            got = b""
            while len(got) < _MAX_REPORT:
                try:
                    chunk = await loop.sock_recv(channel, 4096)
                except OSError:
                    chunk = b""
                if not chunk:
                    break
                got += chunk
                if got.endswith(b"\n"):
                    record = decode_exit_record(got)
                    if record is not None and record.wrapper_pid == self.pid:
                        self._report = record
                        return
                    got = b""
            await asyncio.Event().wait()  # the pidfd says when the wrapper is gone

        return asyncio.ensure_future(read())

    async def _end_reporting_wrapper(self, exited: asyncio.Future[None]) -> None:
        """The wrapper sent its exit record for want of disk space and keeps retrying the
        file: this daemon has the record now, so the wrapper may go."""
        if self.start_ticks is None or not groups.process_identity_matches(
            self.pid, self.start_ticks
        ):
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, signal.SIGTERM)
        try:
            async with asyncio.timeout(max(self.kill_grace_s, 0.1)):
                await exited
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)
            await exited

    async def _until_reaped(self) -> None:
        # An exited wrapper stays a zombie, and its group alive to killpg, until reaped;
        # the launcher says when it has reaped it. Without that word (an adopted run, or a
        # launcher that died) liveness checks look past zombies in /proc instead.
        if self._reaped is None:
            return
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(_REAP_WAIT_S):
                await asyncio.shield(self._reaped)


def _kept_bytes(paths: list[str], record: ExitRecord | None) -> dict[str, int]:
    """The bytes each cut file kept: the wrapper's count, else the file's size now."""
    kept: dict[str, int] = {}
    for path in paths:
        if record is not None and record.kept and path in record.kept:
            kept[path] = record.kept[path]
            continue
        with contextlib.suppress(OSError):
            kept[path] = os.stat(path).st_size
    return kept


def _wait_status(status: int) -> str:
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        try:
            name = signal.Signals(sig).name
        except ValueError:
            name = f"signal {sig}"
        return f"killed by {name}"
    if os.WIFEXITED(status):
        return f"it exited with status {os.WEXITSTATUS(status)}"
    return f"wait status {status}"


def _log_tail(path: Path) -> str:
    """The last line of the wrapper's log (where its traceback or complaint went)."""
    try:
        with path.open("rb") as f:
            f.seek(max(0, f.seek(0, os.SEEK_END) - _LOG_TAIL))
            data = f.read()
    except OSError:
        return ""
    lines = data.decode(errors="replace").strip().splitlines()
    return lines[-1].strip() if lines else ""


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
    cgroup_dirs: Sequence[str] = (),
    disk: tuple[str, int] | None = None,
    network: str = "host",
    forwards: Sequence[str] = (),
    container: str | None = None,
    container_forwards: Sequence[str] | None = None,
) -> DetachedRun:
    """Start the wrapper (forked by ``launcher``), holding the agent back until
    :meth:`DetachedRun.release`.

    ``store_path`` None: no log on this machine (a cluster node), so a wrapper whose
    release pipe closes unreleased never starts its agent. ``lifeline``: the wrapper also
    ends its group when its supervisor goes (see ``arenad/runs/wrapper.py``).
    ``cgroup_dirs``: the run's cgroup (``argv`` joins it), whose counters the wrapper
    watches; ``disk``: a directory and the bytes it may hold (both: wrapper.py, "Limits").
    ``network`` other than "host": the agent runs in its own network namespace, with
    ``forwards`` ("PORT=TARGET") let in (``wrapper.py --network``). ``container``: the
    agent's docker container, by name (``wrapper.py --container``)."""
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
    if cgroup_dirs:
        options += ["--cgroups", ":".join(cgroup_dirs)]
    if disk is not None:
        options += ["--disk-dir", disk[0], "--disk-max", str(disk[1])]
    if network != "host":
        options += ["--network", network]
        if forwards:
            options += ["--forward", ",".join(forwards)]
    if container is not None:
        options += ["--container", container, "--docker", docker_bin()]
        if container_forwards is not None:
            options += ["--container-forward", ",".join(container_forwards)]
    log_path = str(Path(files.run_dir) / WRAPPER_LOG)
    # The release socket: one end is the wrapper's stdin; the other stays here
    # (close-on-exec, so no child inherits it) until the run's end or cancel_unreleased().
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        pid, start_ticks, reaped = await launcher.spawn(
            log_path,
            [*options, "--", *argv],
            env,
            theirs.fileno(),
            lifeline.read_fd if lifeline is not None else None,
        )
    except BaseException:
        ours.close()
        raise
    finally:
        theirs.close()
    started_at_ms = clock()
    return DetachedRun(
        pid=pid,
        start_ticks=start_ticks,
        files=files,
        started_at_ms=started_at_ms,
        deadline_ms=started_at_ms + round(timeout_s * 1000),
        kill_grace_s=kill_grace_s,
        reaped=reaped,
        channel=ours,
    )
