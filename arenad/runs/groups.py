"""Process groups: identity, liveness, termination, and the race every run ends with.

Every child arenad starts leads a new session, so its pid is its process-group id and
everything it spawns stays in that group unless it calls ``setsid`` itself. On timeout or
abort the whole group gets SIGTERM, then SIGKILL after the kill grace; the run's code is
124 (timeout) or 130 (abort), the coreutils ``timeout`` encoding. After SIGKILL the group
must be gone within a short bounded poll, else :class:`GroupSurvivedError`. When the leader
exits on its own, members it left behind in the group are killed the same way.

"Gone" ignores zombies: on this kind of machine PID 1 reaps orphans late, and a group whose
members are all zombies still answers ``killpg(pgid, 0)``. Liveness is therefore
``killpg(pgid, 0)`` succeeding *and* some ``/proc/<pid>/stat`` in that group not being in
state Z or X.

:func:`supervise_group` is the one place that decides how a run ended: its leader exited,
its deadline passed, or it was aborted — for short commands (:mod:`arenad.runs.commands`)
and for agent runs that outlive the daemon (:mod:`arenad.runs.detached`) alike.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path

import msgspec

from arenad.errors import ArenadError

TIMEOUT_CODE = 124
ABORT_CODE = 130
DEFAULT_KILL_GRACE_S = 1.0
# After SIGKILL the kernel tears a group down in milliseconds; this bounds the poll.
DEFAULT_GONE_TIMEOUT_S = 5.0
_POLL_S = 0.02


class ProcError(ArenadError):
    """A child process could not be started or ended as required."""


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


# -- /proc and liveness --------------------------------------------------------------


def stat_fields(pid: int) -> list[str] | None:
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
    fields = stat_fields(pid)
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
        fields = stat_fields(int(name))
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


# -- termination ---------------------------------------------------------------------


def signal_group(pgid: int, sig: int) -> bool:
    """Send ``sig`` to the group; False when it no longer exists."""
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


async def wait_group_gone(pgid: int, timeout_s: float = DEFAULT_GONE_TIMEOUT_S) -> None:
    """Poll until group ``pgid`` has no live member; raise GroupSurvivedError at the deadline."""
    if not await _poll_gone(pgid, timeout_s):
        live = [(p, s) for p, s in group_members(pgid) if s not in ("Z", "X", "x")]
        raise GroupSurvivedError(pgid, live)


async def terminate_group(
    pgid: int, grace_s: float, gone_timeout_s: float, sent: list[str]
) -> None:
    """SIGTERM the group, SIGKILL it if it outlives ``grace_s``, then require it gone."""
    if not group_alive(pgid):
        return
    if signal_group(pgid, signal.SIGTERM):
        sent.append("SIGTERM")
    if await _poll_gone(pgid, grace_s):
        return
    if signal_group(pgid, signal.SIGKILL):
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


# -- the race ------------------------------------------------------------------------


class GroupEnd(msgspec.Struct, frozen=True, kw_only=True):
    """How :func:`supervise_group` saw a run end."""

    timed_out: bool
    aborted: bool
    # Members the leader left behind in its group were killed after it exited.
    leftovers_killed: bool
    # What was sent to the group, in order ("SIGTERM", "SIGKILL").
    signals_sent: list[str]


async def supervise_group(
    pgid: int,
    exited: Awaitable[None],
    aborts: Sequence[asyncio.Event],
    *,
    timeout_s: float | None,
    kill_grace_s: float,
    gone_timeout_s: float = DEFAULT_GONE_TIMEOUT_S,
    settled: Callable[[], Awaitable[None]] | None = None,
) -> GroupEnd:
    """Wait for the leader to exit, the deadline (``timeout_s`` from now) or an abort.

    On a deadline or an abort the group is terminated (TERM, grace, KILL) and the leader's
    exit awaited. After a normal exit, ``settled`` (if given) is awaited first — the leader
    must be reaped before the group can look empty — and members left in the group are
    terminated the same way. ``exited`` resolves once the leader has exited.
    """
    exit_task = asyncio.ensure_future(exited)
    abort_tasks = [asyncio.ensure_future(a.wait()) for a in aborts]
    sent: list[str] = []
    timed_out = aborted = leftovers = False
    try:
        done, _ = await asyncio.wait(
            {exit_task, *abort_tasks}, timeout=timeout_s, return_when=asyncio.FIRST_COMPLETED
        )
        if exit_task not in done:
            aborted = any(t in done for t in abort_tasks)
            timed_out = not aborted
            await terminate_group(pgid, kill_grace_s, gone_timeout_s, sent)
            await exit_task
        if settled is not None:
            await settled()
        if not (timed_out or aborted) and group_alive(pgid):
            leftovers = True
            await terminate_group(pgid, kill_grace_s, gone_timeout_s, sent)
    finally:
        for task in (exit_task, *abort_tasks):
            if not task.done():
                task.cancel()
    return GroupEnd(
        timed_out=timed_out, aborted=aborted, leftovers_killed=leftovers, signals_sent=sent
    )
