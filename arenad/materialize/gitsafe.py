"""The one door for every git command arenad runs: on a workspace, a template, a source.

An agent owns its workspace, ``ws/.git`` included: its config, hooks, index, objects, and
whether it is a directory at all. Git reads all of that by default, and several config keys
run commands (``core.fsmonitor``, ``core.hooksPath``, ``diff.external``, textconv and
filter drivers, reached through ``include``/``includeIf`` too); ``core.worktree`` or a
``gitdir:`` file point git at other files; a missing ``.git`` makes git climb to whatever
repository encloses the home. So a git command here never discovers anything:

- it names its git dir and work tree (``--git-dir``/``--work-tree``), so git opens no
  ``.git`` by itself and never climbs;
- it runs in a clean environment: no system or global config, no ``GIT_*`` variable from
  the daemon's environment, ``HOME`` and the cwd a daemon-owned dir, prompts and pagers off;
- ``-c`` overrides switch off every config-driven execution git 2.39 has for the commands
  used here (:data:`HARDENING`); the git dir arenad owns defines no driver, so attributes
  that name one are inert.

Commands on the user's *source* (clone, the fetch of a base commit) are different: they may
need the user's credentials, proxies and URL rewrites, so they keep the daemon's
environment, less the variables that would redirect them to another repository
(:func:`source_env`).
"""

from __future__ import annotations

import functools
import os
import shlex
import shutil
import subprocess
from collections.abc import Mapping, Sequence

import msgspec

from arenad.runs.commands import CommandError, RunResult, run, run_ok
from arenad.runs.groups import SpawnError

GIT = "git"


@functools.cache
def git_binary() -> str:
    """``git`` as the daemon's PATH finds it, made absolute: the hardened environment's
    PATH is only /usr/bin:/bin, and a git installed elsewhere must still be the one run."""
    return shutil.which(GIT) or GIT


GIT_TIMEOUT_S = 120.0

# Keys that make git run a command or read a file the agent chose, for the commands arenad
# uses (add, diff, status, rev-parse, read-tree, update-index, checkout, reset, clean,
# branch, repack, prune). Transports (sshCommand, askPass, credential helpers, ext::) are
# shut by protocol.allow=never; aliases of builtins are never expanded; pagers need a tty.
HARDENING: tuple[str, ...] = (
    "-c",
    "core.fsmonitor=false",
    "-c",
    "core.hooksPath=/dev/null",
    "-c",
    "core.untrackedCache=false",
    "-c",
    "core.splitIndex=false",
    "-c",
    "core.attributesFile=/dev/null",
    "-c",
    "core.excludesFile=/dev/null",
    "-c",
    "core.sparseCheckout=false",
    "-c",
    "core.pager=cat",
    "-c",
    "core.autocrlf=false",
    "-c",
    "core.safecrlf=false",
    # The patch step trusts a sealed index's stat data (arenad.materialize.seal): a file an
    # agent rewrote has a new ctime it cannot set back, so keep git comparing all of it.
    "-c",
    "core.checkStat=default",
    "-c",
    "core.trustctime=true",
    "-c",
    "submodule.recurse=false",
    "-c",
    "diff.ignoreSubmodules=all",
    "-c",
    "status.submoduleSummary=false",
    "-c",
    "gc.auto=0",
    "-c",
    "maintenance.auto=false",
    "-c",
    "protocol.allow=never",
)

# What would point a source command at a repository other than the one it names.
_REDIRECTING = frozenset(
    {
        "GIT_DIR",
        "GIT_WORK_TREE",
        "GIT_INDEX_FILE",
        "GIT_OBJECT_DIRECTORY",
        "GIT_ALTERNATE_OBJECT_DIRECTORIES",
        "GIT_COMMON_DIR",
        "GIT_NAMESPACE",
        "GIT_SHALLOW_FILE",
        "GIT_QUARANTINE_PATH",
        "GIT_CEILING_DIRECTORIES",
        "GIT_DISCOVERY_ACROSS_FILESYSTEM",
        "GIT_REPLACE_REF_BASE",
    }
)


def hardened_env(home: str, *, index: str | None = None) -> dict[str, str]:
    """The whole environment of a hardened git command. ``home`` is a daemon-owned dir
    (also its cwd); ``index`` a private index file (else the git dir's own)."""
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": home,
        "XDG_CONFIG_HOME": home,
        "PWD": home,
        "LC_ALL": "C",
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": "/dev/null",
        "GIT_ATTR_NOSYSTEM": "1",
        "GIT_NO_REPLACE_OBJECTS": "1",
        "GIT_TERMINAL_PROMPT": "0",
        "GIT_PAGER": "cat",
        "GIT_EDITOR": "true",
        "GIT_ASKPASS": "/bin/false",
        "GIT_PROTOCOL_FROM_USER": "0",
        "GIT_ALLOW_PROTOCOL": "none",
    }
    if index is not None:
        env["GIT_INDEX_FILE"] = index
    return env


def hardened_argv(git_dir: str, work_tree: str | None, args: Sequence[str]) -> list[str]:
    tree = ["--work-tree", work_tree] if work_tree is not None else []
    return [git_binary(), "--git-dir", git_dir, *tree, *HARDENING, *args]


async def run_git(
    args: Sequence[str],
    *,
    git_dir: str | os.PathLike[str],
    work_tree: str | os.PathLike[str] | None,
    home: str | os.PathLike[str],
    index: str | os.PathLike[str] | None = None,
    stage: str | None = None,
    timeout_s: float = GIT_TIMEOUT_S,
    stdout_path: str | os.PathLike[str] | None = None,
) -> RunResult:
    """``git <args>`` on exactly ``git_dir`` (and ``work_tree``), hardened; raises
    CommandError unless it exits 0 in time."""
    h = os.fspath(home)
    return await run_ok(
        hardened_argv(
            os.fspath(git_dir), None if work_tree is None else os.fspath(work_tree), args
        ),
        timeout_s,
        cwd=h,
        env=hardened_env(h, index=None if index is None else os.fspath(index)),
        stage=stage or (args[0] if args else "git"),
        stdout_path=stdout_path,
    )


class GitStep(msgspec.Struct, frozen=True, kw_only=True):
    """One command of :func:`run_git_steps`: its args, where its stdout goes (a file, else
    the run's), and whether the sequence stops when it fails (else its stderr goes to
    ``stdout`` too, which then holds the output or the error)."""

    args: list[str]
    stage: str
    stdout: str | None = None
    may_fail: bool = False


_FIRST_STEP_CODE = 100  # exit status 100+i: step i failed


async def run_git_steps(
    steps: Sequence[GitStep],
    *,
    git_dir: str | os.PathLike[str],
    work_tree: str | os.PathLike[str] | None,
    home: str | os.PathLike[str],
    index: str | os.PathLike[str] | None = None,
    timeout_s: float = GIT_TIMEOUT_S,
) -> RunResult:
    """Hardened git commands in order, as one process tree (``/bin/sh`` running them): the
    daemon pays one spawn for them all. Every word is quoted with :func:`shlex.quote`, so
    nothing in them is read by the shell. Raises CommandError with the failed step's stage
    (the last stderr lines), or ``steps[0].stage`` for a timeout."""
    h = os.fspath(home)
    d, w = os.fspath(git_dir), None if work_tree is None else os.fspath(work_tree)
    prefix = shlex.join(hardened_argv(d, w, []))
    lines = []
    for i, step in enumerate(steps):
        line = f"{prefix} {shlex.join(step.args)}"
        if step.stdout is not None:
            line += f" >{shlex.quote(step.stdout)}"
        if step.may_fail:
            line += " 2>&1 || :" if step.stdout is not None else " || :"
        else:
            # The command's own status goes to stderr's last line; sh's says which failed.
            line += f' || {{ echo "[exit $?]" >&2; exit {_FIRST_STEP_CODE + i}; }}'
        lines.append(line)
    argv = ["/bin/sh", "-c", "\n".join(lines)]
    try:
        result = await run(
            argv,
            cwd=h,
            env=hardened_env(h, index=None if index is None else os.fspath(index)),
            timeout_s=timeout_s,
        )
    except SpawnError as exc:
        raise CommandError(steps[0].stage, argv, None, exc.reason) from exc
    if result.ok:
        return result
    failed = result.code - _FIRST_STEP_CODE
    if 0 <= failed < len(steps) and not result.timed_out:
        # The failed command, as it ran, with its own exit status.
        stderr, _, status = result.stderr_text.rstrip("\n").rpartition("\n")
        if not status.startswith("[exit "):
            stderr, status = stderr + "\n" + status, f"[exit {result.code}]"
        step = steps[failed]
        raise CommandError(
            step.stage,
            hardened_argv(d, w, step.args),
            int(status.removeprefix("[exit ").removesuffix("]")),
            stderr[-2000:],
        )
    raise CommandError(
        steps[0].stage, argv, result.code, result.stderr_text[-2000:], timed_out=result.timed_out
    )


def source_env(base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The daemon's environment for a command on the user's source, without what would
    redirect it, and never prompting."""
    env = {k: v for k, v in (os.environ if base is None else base).items() if k not in _REDIRECTING}
    env["GIT_TERMINAL_PROMPT"] = "0"
    return env


# A clone or fetch runs no hook and no fsmonitor either (the source's config is not copied,
# but the daemon's global config could name hooks or a template with hooks).
_SOURCE_HARDENING: tuple[str, ...] = (
    "-c",
    "core.hooksPath=/dev/null",
    "-c",
    "core.fsmonitor=false",
)


async def run_source_git(
    args: Sequence[str],
    *,
    cwd: str | os.PathLike[str],
    stage: str | None = None,
    timeout_s: float = GIT_TIMEOUT_S,
) -> RunResult:
    """``git <args>`` that talks to the user's source (clone, fetch): their config and
    credentials apply; the repository it acts on is named in ``args``."""
    c = os.fspath(cwd)
    env = source_env()
    env["PWD"] = c
    return await run_ok(
        [git_binary(), *_SOURCE_HARDENING, *args],
        timeout_s,
        cwd=c,
        env=env,
        stage=stage or (args[0] if args else "git"),
    )


def head_commit_blocking(repo: str, *, timeout_s: float = 30.0) -> str | None:
    """``HEAD``'s commit of a checkout the user named (the supervisor's loops repo), found
    the ordinary way but hardened; None when it is not a repository or git fails."""
    home = repo if os.path.isdir(repo) else "/"
    try:
        out = subprocess.run(
            [git_binary(), *HARDENING, "-C", repo, "rev-parse", "--verify", "-q", "HEAD"],
            capture_output=True,
            text=True,
            stdin=subprocess.DEVNULL,
            cwd=home,
            env=hardened_env(home),
            timeout=timeout_s,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    commit = out.stdout.strip()
    return commit if out.returncode == 0 and commit else None


__all__ = [
    "GIT",
    "GIT_TIMEOUT_S",
    "HARDENING",
    "CommandError",
    "GitStep",
    "git_binary",
    "hardened_argv",
    "hardened_env",
    "head_commit_blocking",
    "run_git",
    "run_git_steps",
    "run_source_git",
    "source_env",
]
