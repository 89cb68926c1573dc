"""The bubblewrap (bwrap 0.8) command line that confines one cell's child: a whitelist view.

Inside, a child sees the system read-only (``/usr``, ``/etc``, ``/opt``; the usr-merge links
as the links they are), the paths it was given read-only, its cell's run dir read-only and
the cell's workspace and private dirs read-write; fresh ``/tmp``, ``/var/tmp``, ``/run``,
``/proc`` and ``/dev``. Nothing else exists there: not the arenad home around the run dir,
not the user's home, not the secrets dir, not another cell. A whitelist, because a blacklist
(``--ro-bind / /`` minus some dirs) fails open: every path nobody thought of stays visible,
including sockets of root daemons, which accept ``connect()`` through a read-only bind.

Why each flag (verified on this machine with bwrap 0.8.0, as real root):

- ``--cap-drop ALL``: bwrap run by root keeps every capability otherwise (the child could
  remount the binds read-write).
- ``--ro-bind /proc/sys``: bwrap 0.8 leaves the new procfs's ``/proc/sys`` writable to uid 0,
  and ``kernel/core_pattern`` there runs a command as root outside.
- ``--unshare-pid`` and ``--die-with-parent``: the child's processes live in their own PID
  namespace, which the kernel empties once the sandbox's monitor goes. The monitor exits right
  after the child and its init (pid 1 inside) is killed with it, so nothing the child started
  outlives it, not even a process that called ``setsid``. No network namespace of bwrap's own
  for an agent run: its wrapper makes one, with the model endpoints forwarded in
  (``arenad.sandbox.network``); a verify or judge gets ``--unshare-net`` (loopback only).
- No ``--new-session``: the child stays in the run's process group, so the run's group
  signals (timeout, abort) reach it directly. bwrap forwards no signal itself.
- ``env --ignore-signal=TERM,INT,HUP`` before bwrap, ``env --default-signal=…`` inside: a
  group TERM must not kill bwrap (``--die-with-parent`` would then SIGKILL the child at once
  and its grace would be lost); the child gets the default handling back, as the run wrapper
  gives it. A child killed by signal N therefore exits with status 128+N (bwrap's own).
- ``PWD`` inside is the child's real working directory (a stale inherited one misleads
  programs that trust it, such as opencode).
- ``--remount-ro /``: a write to an invented path fails instead of landing in the
  sandbox's scratch root.

Paths keep their host names inside (the run dir at its own path), so the cell env's HOME,
XDG and opencode paths and the recorded session directories need no translation.

:func:`sandbox_argv` is pure; :func:`probe_host` reads the machine once per process.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
from collections.abc import Sequence

import msgspec

# Signals the outer chain ignores so that a group TERM reaches only the child.
GROUP_SIGNALS = "TERM,INT,HUP"
SYSTEM_DIRS = ("/usr", "/etc", "/opt")
TOP_LEVEL = ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
# Readable by uid 0 and needed by no agent.
MASKED_FILES = ("/etc/shadow", "/etc/gshadow", "/etc/shadow-", "/etc/gshadow-")
# /etc files that may be symlinks out of /etc (systemd-resolved's resolv.conf points into
# /run, which is a fresh tmpfs inside): their target dirs are shown read-only too.
ETC_LINKS = ("/etc/resolv.conf", "/etc/hosts", "/etc/localtime")
# Fresh and private inside (gone with the sandbox).
SCRATCH_DIRS = ("/tmp", "/var/tmp", "/run")


class Host(msgspec.Struct, frozen=True, kw_only=True):
    """What the command line needs to know of this machine (:func:`probe_host`)."""

    bwrap: str
    version: str
    env: str
    # Top-level symlinks (usr-merge: /bin -> usr/bin), mirrored as links.
    links: tuple[tuple[str, str], ...]
    # System dirs shown read-only at their own path.
    system: tuple[str, ...]
    masked: tuple[str, ...]
    # Dirs outside the system that /etc symlinks point into.
    etc_targets: tuple[str, ...] = ()

    @property
    def system_roots(self) -> tuple[str, ...]:
        """Everything shown read-only because it is the system."""
        return (*self.system, *(path for path, _ in self.links), *self.etc_targets)


class Binds(msgspec.Struct, frozen=True, kw_only=True):
    """One child's view beyond the system."""

    # Shown read-only (absolute, none inside another, none inside the system).
    read_only: tuple[str, ...]
    # The cell's run dir, read-only (the wrapper's exit record and the output files).
    run_dir: str
    # Read-write on top of it: the workspace and the private dirs (and files).
    read_write: tuple[str, ...]
    chdir: str


def inside(path: str, root: str) -> bool:
    """Whether ``path`` is ``root`` or below it (both absolute and normalized)."""
    return path == root or root == "/" or path.startswith(root.rstrip("/") + "/")


def nested_dropped(paths: Sequence[str], covered: Sequence[str] = ()) -> tuple[str, ...]:
    """``paths`` normalized, without duplicates, ones inside another or inside ``covered``;
    parents before children (bwrap makes a bind's mount point inside earlier ones)."""
    kept: list[str] = []
    for p in sorted({os.path.normpath(p) for p in paths}, key=lambda p: (p.count("/"), p)):
        if not any(inside(p, root) for root in (*covered, *kept)):
            kept.append(p)
    return tuple(kept)


def sandbox_argv(
    host: Host, binds: Binds, command: Sequence[str], *, unshare_net: bool = False
) -> list[str]:
    """The whole argv that runs ``command`` confined to ``binds`` (pure). ``unshare_net``:
    its own network namespace, loopback only (a verify or judge); otherwise the sandbox
    keeps the network it is started in (an agent run's is made by its wrapper)."""
    argv = [
        host.env,
        f"--ignore-signal={GROUP_SIGNALS}",
        host.bwrap,
        *(["--unshare-net"] if unshare_net else []),
        "--unshare-pid",
        "--unshare-ipc",
        "--unshare-uts",
        "--unshare-cgroup-try",
        "--cap-drop",
        "ALL",
        "--die-with-parent",
    ]
    for path, target in host.links:
        argv += ["--symlink", target, path]
    for d in host.system:
        argv += ["--ro-bind", d, d]
    for f in host.masked:
        argv += ["--ro-bind", "/dev/null", f]
    argv += ["--proc", "/proc", "--dev", "/dev"]
    argv += ["--ro-bind", "/proc/sys", "/proc/sys"]
    argv += ["--ro-bind-try", "/proc/sysrq-trigger", "/proc/sysrq-trigger"]
    # Scratch dirs before anything bound below them (a run dir or a share under /tmp).
    for d in SCRATCH_DIRS:
        argv += ["--tmpfs", d]
    for d in host.etc_targets:
        argv += ["--ro-bind", d, d]
    for d in binds.read_only:
        argv += ["--ro-bind", d, d]
    argv += ["--ro-bind", binds.run_dir, binds.run_dir]
    for d in binds.read_write:
        argv += ["--bind", d, d]
    argv += ["--remount-ro", "/", "--chdir", binds.chdir, "--"]
    argv += [host.env, f"--default-signal={GROUP_SIGNALS}", "-u", "OLDPWD", f"PWD={binds.chdir}"]
    return [*argv, *command]


# -- the machine ------------------------------------------------------------------------


def _version(bwrap: str) -> str | None:
    try:
        out = subprocess.run(
            [bwrap, "--version"],
            capture_output=True,
            text=True,
            stdin=subprocess.DEVNULL,
            timeout=30,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    if out.returncode != 0:
        return None
    # "bubblewrap 0.8.0"
    return out.stdout.strip().rpartition(" ")[2] or None


@functools.cache
def probe_host(path: str | None = None) -> Host | None:
    """This machine's layout and its bwrap (None: bubblewrap is not installed or does not
    run). ``path``: where to look for bwrap (default: this process's PATH)."""
    bwrap = shutil.which("bwrap", path=path)
    env = "/usr/bin/env" if os.access("/usr/bin/env", os.X_OK) else shutil.which("env")
    if bwrap is None or env is None:
        return None
    version = _version(bwrap)
    if version is None:
        return None
    links: list[tuple[str, str]] = []
    system: list[str] = []
    for top in TOP_LEVEL:
        if os.path.islink(top):
            links.append((top, os.readlink(top)))
        elif os.path.isdir(top):
            system.append(top)
    system += [d for d in SYSTEM_DIRS if os.path.isdir(d)]
    targets = []
    for f in ETC_LINKS:
        if os.path.islink(f):
            target = os.path.dirname(os.path.realpath(f))
            if not any(inside(target, d) for d in system):
                targets.append(target)
    return Host(
        bwrap=os.path.realpath(bwrap),
        version=version,
        env=env,
        links=tuple(links),
        system=tuple(system),
        masked=tuple(f for f in MASKED_FILES if os.path.exists(f)),
        etc_targets=nested_dropped(targets),
    )


def probe_works(host: Host) -> str | None:
    """Why bwrap cannot make a sandbox here (None: it can): a child that only exits 0,
    under the flags every cell uses (no user namespaces, a seccomp policy... show here)."""
    argv = [host.bwrap, "--ro-bind", "/", "/", "--proc", "/proc", "--dev", "/dev"]
    argv += ["--unshare-pid", "--cap-drop", "ALL", "--die-with-parent", "--", "/bin/true"]
    try:
        out = subprocess.run(
            argv, capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=30, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"{host.bwrap} did not run: {exc}"
    if out.returncode != 0:
        tail = out.stderr.strip().splitlines()[-1:] or [f"exit {out.returncode}"]
        return f"{host.bwrap} cannot make a sandbox here: {tail[0]}"
    return None
