"""A cgroup per run (agent run, verify, judge): the cell's memory, pids and cpu limits.

Every run of a cell gets its own group under one parent per arenad home
(``arenad-<home hash>``), nested under the daemon's own cgroup (so a daemon that is itself
confined by its host keeps its agents inside that confinement too). Two layouts:

- **cgroup v1** (one hierarchy per controller, e.g. ``/sys/fs/cgroup/memory``): the group
  is a directory in each of the memory, pids and cpu hierarchies. ``memory.limit_in_bytes``
  (and ``memory.memsw.limit_in_bytes`` where swap is accounted, so swap is no way out),
  ``pids.max``, ``cpu.cfs_quota_us`` over ``cpu.cfs_period_us``. v1 has no
  ``memory.oom.group``: the run wrapper watches ``memory.oom_control``'s ``oom_kill`` and
  kills every process of the group itself (``arenad/runs/wrapper.py``).
- **cgroup v2** (one unified hierarchy): one directory with ``memory.max``,
  ``memory.swap.max`` 0, ``memory.oom.group`` 1 (the kernel kills the whole group),
  ``pids.max``, ``cpu.max``; the controllers are enabled in the parents'
  ``cgroup.subtree_control``.

A process joins its group before it execs (:func:`join_argv`: a ``sh`` trampoline that
writes its own pid into each ``cgroup.procs``, raises its own ``oom_score_adj`` so the
kernel's global OOM killer takes agents before the daemon, then execs the run's argv), so
nothing the run forks is ever outside it. The outcome names the limit from the group's
own counters (:func:`read_counters`), never from anything the run wrote.

The group is removed once the run has ended (:func:`remove`); groups left by a daemon that
crashed are reaped when the next one starts (:func:`reap`).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import hashlib
import os
import re
import signal
import time
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Literal

import msgspec

from events import cell as cell_events
from events.specs import SandboxSpec

CGROUP_ROOT = "/sys/fs/cgroup"
V1_CONTROLLERS = ("memory", "pids", "cpu")
CPU_PERIOD_US = 100_000
# The agents' oom_score_adj (the most a process may be picked first) and the daemon's own
# (far below, yet not -1000: a daemon that is the only thing left may still be taken).
AGENT_OOM_SCORE_ADJ = 1000
DAEMON_OOM_SCORE_ADJ = -900
# The exit status of a run whose process could not join its group (it never ran).
JOIN_FAILED_EXIT = 125
# A group that will not empty after this many rounds of SIGKILL is left for the reaper.
_KILL_ROUNDS = 100
_KILL_PAUSE_S = 0.02

Limit = Literal["memory", "pids", "disk"]
# How an outcome says which limit ended the run (also the reason's words).
LIMIT_REASONS = cell_events.LIMIT_REASONS


class Limits(msgspec.Struct, frozen=True, kw_only=True):
    """A run's limits (None: not limited)."""

    memory_bytes: int | None = None
    pids: int | None = None
    cpus: float | None = None

    @property
    def any(self) -> bool:
        return self.memory_bytes is not None or self.pids is not None or self.cpus is not None


class Hierarchy(msgspec.Struct, frozen=True, kw_only=True):
    """Where this daemon's groups live: per controller (v1) or one directory (v2), the
    directory that holds the home's parent group."""

    version: Literal[1, 2]
    # controller -> the daemon's own group in that hierarchy ("" for v2's one hierarchy).
    bases: dict[str, str]


class Group(msgspec.Struct, frozen=True, kw_only=True):
    """One run's group: its name under the home's parent and its directories (one per v1
    controller; one for v2)."""

    version: Literal[1, 2]
    name: str
    dirs: tuple[str, ...]

    @property
    def procs_files(self) -> list[str]:
        return [os.path.join(d, "cgroup.procs") for d in self.dirs]


class Counters(msgspec.Struct, frozen=True, kw_only=True):
    """What the kernel counted in a group (None: that controller is not there)."""

    oom_kills: int | None = None
    pids_max_hits: int | None = None


def parent_name(home: str | os.PathLike[str]) -> str:
    """The parent group of one arenad home's runs (two homes on a machine never meet)."""
    digest = hashlib.sha256(os.fspath(home).encode()).hexdigest()[:12]
    return f"arenad-{digest}"


def group_name(stream: str, attempt: int, step: str) -> str:
    """A run's group name: readable, unique per (cell stream, attempt, step)."""
    safe = re.sub(r"[^A-Za-z0-9._-]", "_", stream)[:120]
    digest = hashlib.sha256(stream.encode()).hexdigest()[:8]
    return f"{safe}-{digest}.{attempt}.{step}"


def probe(root: str = CGROUP_ROOT, self_cgroup: str = "/proc/self/cgroup") -> Hierarchy | None:
    """The hierarchy this process can make groups in, or None (no cgroups, or not the
    controllers the limits need)."""
    try:
        lines = Path(self_cgroup).read_text().splitlines()
    except OSError:
        return None
    own: dict[str, str] = {}
    for line in lines:
        _, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        for name in controllers.split(",") if controllers else [""]:
            own[name] = path
    if os.path.exists(os.path.join(root, "cgroup.controllers")):
        base = os.path.join(root, own.get("", "/").lstrip("/"))
        return Hierarchy(version=2, bases={"": base.rstrip("/")})
    bases: dict[str, str] = {}
    for controller in V1_CONTROLLERS:
        mount = os.path.join(root, controller)
        if not os.path.isdir(mount):
            return None
        base = os.path.join(mount, own.get(controller, "/").lstrip("/")).rstrip("/")
        # Our own group may be invisible from here (another namespace): the mount then.
        bases[controller] = base if os.path.isdir(base) else mount
    return Hierarchy(version=1, bases=bases)


def _write(path: str, value: str) -> None:
    with open(path, "w") as f:
        f.write(value)


def _enable_v2(directory: str) -> None:
    """Let ``directory``'s children limit memory, pids and cpu (v2)."""
    try:
        available = Path(directory, "cgroup.controllers").read_text().split()
    except OSError:
        available = []
    wanted = [c for c in V1_CONTROLLERS if c in available]
    if wanted:
        _write(os.path.join(directory, "cgroup.subtree_control"), " ".join(f"+{c}" for c in wanted))


def create(hierarchy: Hierarchy, parent: str, name: str, limits: Limits) -> Group:
    """Make the run's group and write its limits (raises OSError if it cannot)."""
    dirs: list[str] = []
    if hierarchy.version == 2:
        base = hierarchy.bases[""]
        top = os.path.join(base, parent)
        os.makedirs(top, exist_ok=True)
        _enable_v2(base)
        _enable_v2(top)
        group = os.path.join(top, name)
        os.makedirs(group, exist_ok=True)
        dirs.append(group)
        if limits.memory_bytes is not None:
            _write(os.path.join(group, "memory.max"), str(limits.memory_bytes))
            with contextlib.suppress(FileNotFoundError):
                _write(os.path.join(group, "memory.swap.max"), "0")
            _write(os.path.join(group, "memory.oom.group"), "1")
        if limits.pids is not None:
            _write(os.path.join(group, "pids.max"), str(limits.pids))
        if limits.cpus is not None:
            quota = max(1000, round(limits.cpus * CPU_PERIOD_US))
            _write(os.path.join(group, "cpu.max"), f"{quota} {CPU_PERIOD_US}")
        return Group(version=2, name=name, dirs=tuple(dirs))
    for controller in V1_CONTROLLERS:
        group = os.path.join(hierarchy.bases[controller], parent, name)
        os.makedirs(group, exist_ok=True)
        dirs.append(group)
    memory, pids, cpu = dirs
    if limits.memory_bytes is not None:
        _write(os.path.join(memory, "memory.limit_in_bytes"), str(limits.memory_bytes))
        # Swap is no way out of the limit (memsw >= limit; written after it).
        with contextlib.suppress(FileNotFoundError):
            _write(os.path.join(memory, "memory.memsw.limit_in_bytes"), str(limits.memory_bytes))
    if limits.pids is not None:
        _write(os.path.join(pids, "pids.max"), str(limits.pids))
    if limits.cpus is not None:
        _write(os.path.join(cpu, "cpu.cfs_period_us"), str(CPU_PERIOD_US))
        quota = max(1000, round(limits.cpus * CPU_PERIOD_US))
        _write(os.path.join(cpu, "cpu.cfs_quota_us"), str(quota))
    return Group(version=1, name=name, dirs=tuple(dirs))


def find(hierarchy: Hierarchy, parent: str, name: str) -> Group:
    """The group a run of an earlier daemon was given (it may be gone)."""
    if hierarchy.version == 2:
        dirs: tuple[str, ...] = (os.path.join(hierarchy.bases[""], parent, name),)
    else:
        dirs = tuple(os.path.join(hierarchy.bases[c], parent, name) for c in V1_CONTROLLERS)
    return Group(version=hierarchy.version, name=name, dirs=dirs)


# The trampoline: raise our own oom_score_adj, join every group (our pid, which exec
# keeps), then exec the run. A group it cannot join ends it before anything ran: a run
# meant to be limited never runs unlimited.
_JOIN_SCRIPT = (
    'echo "$0" >/proc/self/oom_score_adj 2>/dev/null; '
    'while [ "$1" != -- ]; do echo $$ >"$1" || exit ' + str(JOIN_FAILED_EXIT) + "; shift; done; "
    'shift; exec "$@"'
)


def join_argv(group: Group | None, argv: Sequence[str]) -> list[str]:
    """``argv`` started inside ``group`` (None: only the raised ``oom_score_adj``)."""
    procs = group.procs_files if group is not None else []
    return ["/bin/sh", "-c", _JOIN_SCRIPT, str(AGENT_OOM_SCORE_ADJ), *procs, "--", *argv]


def _int_field(text: str, key: str) -> int | None:
    for line in text.splitlines():
        name, _, value = line.partition(" ")
        if name == key and value.strip().isdigit():
            return int(value)
    return None


def _read(path: str) -> str | None:
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return None


def read_counters(group: Group) -> Counters:
    """The group's OOM kills and pids-limit hits, as the kernel counted them."""
    oom: int | None = None
    hits: int | None = None
    for directory in group.dirs:
        for name in ("memory.events", "memory.oom_control"):
            text = _read(os.path.join(directory, name))
            if text is not None:
                found = _int_field(text, "oom_kill")
                if found is not None:
                    oom = (oom or 0) + found
        text = _read(os.path.join(directory, "pids.events"))
        if text is not None:
            found = _int_field(text, "max")
            if found is not None:
                hits = (hits or 0) + found
    return Counters(oom_kills=oom, pids_max_hits=hits)


def limit_hit(counters: Counters) -> Limit | None:
    """Which limit the counters say the run met (memory first: an OOM kill is what ends
    a run; a fork refused may only have slowed it)."""
    if counters.oom_kills:
        return "memory"
    if counters.pids_max_hits:
        return "pids"
    return None


def members(group: Group) -> set[int]:
    """Every pid in the group (in any of its hierarchies)."""
    pids: set[int] = set()
    for path in group.procs_files:
        text = _read(path)
        if text is not None:
            pids.update(int(p) for p in text.split() if p.isdigit())
    return pids


def kill(group: Group) -> bool:
    """SIGKILL every process in the group until it is empty (v1 has no ``cgroup.kill``; a
    process forked meanwhile is caught by the next round). True once it is empty."""
    for directory in group.dirs:
        with contextlib.suppress(OSError):
            _write(os.path.join(directory, "cgroup.kill"), "1")
    for _ in range(_KILL_ROUNDS):
        pids = members(group)
        if not pids:
            return True
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        # Killed processes leave the group as they exit: a short wait for that.
        time.sleep(_KILL_PAUSE_S)
    return not members(group)


def remove(group: Group) -> bool:
    """Remove the group's directories (its processes killed first). True if all are gone."""
    if members(group):
        kill(group)
    gone = True
    for directory in group.dirs:
        try:
            os.rmdir(directory)
        except FileNotFoundError:
            continue
        except OSError as exc:
            # EBUSY: a process killed above has not been reaped yet; the reaper retries.
            if exc.errno not in (errno.EBUSY, errno.ENOTEMPTY):
                raise
            gone = False
    return gone


def reap(hierarchy: Hierarchy, parent: str) -> list[str]:
    """Remove the empty groups under ``parent``: a daemon that crashed left them. A group
    with processes is a run the new daemon adopts (it removes the group at the run's end),
    so it is left alone. Returns the names removed."""
    names: set[str] = set()
    for base in hierarchy.bases.values():
        top = os.path.join(base, parent)
        with contextlib.suppress(OSError):
            names.update(e.name for e in os.scandir(top) if e.is_dir(follow_symlinks=False))
    removed = []
    for name in sorted(names):
        group = find(hierarchy, parent, name)
        if not members(group) and remove(group):
            removed.append(name)
    return removed


def lower_own_oom_score(value: int = DAEMON_OOM_SCORE_ADJ) -> str | None:
    """Make this process (the daemon) the kernel's last choice under memory pressure.
    None once done; else why it may not (lowering needs CAP_SYS_RESOURCE)."""
    try:
        _write("/proc/self/oom_score_adj", str(value))
    except OSError as exc:
        return f"{exc.strerror or exc} (lowering needs CAP_SYS_RESOURCE)"
    return None


def limits_of(sandbox: SandboxSpec) -> Limits | None:
    """The cgroup limits a cell's runs get (None: none asked for)."""
    limits = Limits(memory_bytes=sandbox.memory_bytes, pids=sandbox.pids, cpus=sandbox.cpus)
    return limits if limits.any else None


class Scope:
    """A short run's group (verify, judge) while it runs: the argv that joins it, and
    afterwards the limit its counters name."""

    def __init__(self, group: Group | None, unlimited_reason: str | None) -> None:
        self.group = group
        self.unlimited_reason = unlimited_reason
        self.counters: Counters | None = None

    def argv(self, argv: Sequence[str]) -> list[str]:
        return join_argv(self.group, argv) if self.group is not None else list(argv)

    def limit(self, succeeded: bool) -> Limit | None:
        """The limit that ended the run (never for one that succeeded)."""
        if succeeded or self.counters is None:
            return None
        return limit_hit(self.counters)


_HIERARCHY: list[Hierarchy | None] = []


def _hierarchy() -> Hierarchy | None:
    # Probed once per process: the machine's cgroup layout does not change under us.
    if not _HIERARCHY:
        _HIERARCHY.append(probe())
    return _HIERARCHY[0]


@contextlib.asynccontextmanager
async def scope(
    limits: Limits | None, home: str | os.PathLike[str], key: str, step: str
) -> AsyncIterator[Scope]:
    """A group for one run of ``step`` (``key``: what makes it unique, the run dir),
    removed (its processes killed) when the block ends; ``limits`` None: no group."""
    hierarchy = _hierarchy() if limits is not None else None
    if limits is None:
        yield Scope(None, None)
        return
    if hierarchy is None:
        yield Scope(None, "no cgroup hierarchy with memory, pids and cpu controllers here")
        return
    name = group_name(key, 0, step)
    try:
        group = await asyncio.to_thread(create, hierarchy, parent_name(home), name, limits)
    except OSError as exc:
        yield Scope(None, f"cannot make cgroup {name}: {exc.strerror or exc}")
        return
    held = Scope(group, None)
    try:
        yield held
    finally:
        held.counters = await asyncio.to_thread(read_counters, group)
        await asyncio.to_thread(remove, group)
