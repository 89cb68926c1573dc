"""The verify gate: ``bash -c <verify_cmd>`` in the directory it is given (the grading
checkout of base + the stored patch, :mod:`arenad.verdict.grade`; the agent's workspace only
with ``verify_in = "workspace"``), provider secrets stripped, confined to the sandbox given.

A test must not pass only because a key leaked in, so the gate's env loses every provider
secret *name* (arenad.sandbox.secrets). Output goes to ``verify.log``: stdout, then stderr, as
the reference writes it. pass = exit 0; a timeout is rc 124 and never a pass, an abort rc 130.
The log's tail (up to ``keep_bytes``) comes back with the result, for the log
(:mod:`arenad.verdict.excerpt`).
"""

from __future__ import annotations

import asyncio
import os
import shutil
from collections.abc import Mapping
from pathlib import Path

import msgspec

from arenad.runs import cgroups
from arenad.runs.commands import run
from arenad.runs.groups import DEFAULT_KILL_GRACE_S
from arenad.sandbox.confine import CellSandbox, SandboxError, confine
from arenad.sandbox.secrets import strip_provider_secrets, stripped_names
from arenad.verdict.excerpt import VERIFY_LOG_KEEP_BYTES, file_tail_excerpt
from events.cell import TextExcerpt

VERIFY_TIMEOUT_S = 600.0


class VerifyResult(msgspec.Struct, frozen=True, kw_only=True):
    rc: int
    passed: bool
    timed_out: bool
    aborted: bool
    wall_s: float
    log_path: str
    # Names (never values) removed from the gate's env.
    stripped: list[str]
    # The log's last bytes, with its whole size and sha256 (None: not asked for).
    log_excerpt: TextExcerpt | None = None
    # The cell's limit that ended the command ("memory", "pids": its cgroup's counters).
    limit: str | None = None


async def run_verify(
    verify_cmd: str,
    ws: str | os.PathLike[str],
    log_path: str | os.PathLike[str],
    *,
    env: Mapping[str, str] | None = None,
    timeout_s: float = VERIFY_TIMEOUT_S,
    kill_grace_s: float = DEFAULT_KILL_GRACE_S,
    keep_bytes: int = VERIFY_LOG_KEEP_BYTES,
    sandbox: CellSandbox | None = None,
) -> VerifyResult:
    """Run the verify command; ``env`` (default: ours) is passed with provider secrets
    removed; ``sandbox``: the cell's view it is confined to (None: not confined)."""
    base = dict(os.environ if env is None else env)
    child_env = strip_provider_secrets(base)
    log = Path(log_path)
    log.parent.mkdir(parents=True, exist_ok=True)
    argv = ["bash", "-c", verify_cmd]
    if sandbox is not None:
        try:
            argv = confine(sandbox, argv, env=child_env, chdir=os.fspath(ws), network="none").argv
        except SandboxError as exc:
            # Never run unconfined what was to be confined: a verdict that says why.
            log.write_text(f"arenad: verify could not be sandboxed: {exc}\n")
            return VerifyResult(
                rc=127,
                passed=False,
                timed_out=False,
                aborted=False,
                wall_s=0.0,
                log_path=os.fspath(log),
                stripped=stripped_names(base),
            )
    err_path = log.with_name(log.name + ".stderr")
    limits = cgroups.limits_of(sandbox.spec) if sandbox is not None else None
    home = sandbox.home_root if sandbox is not None else ""
    key = sandbox.run_dir if sandbox is not None else ""
    try:
        async with cgroups.scope(limits, home, key, "verify") as group:
            result = await run(
                group.argv(argv),
                cwd=ws,
                env=child_env,
                timeout_s=timeout_s,
                kill_grace_s=kill_grace_s,
                stdout_path=log,
                stderr_path=err_path,
                capture_limit=0,
            )
        with open(log, "ab") as out, open(err_path, "rb") as err:
            shutil.copyfileobj(err, out)
    finally:
        err_path.unlink(missing_ok=True)
    # The whole log is hashed (a test suite can print megabytes): off the event loop.
    excerpt = await asyncio.to_thread(file_tail_excerpt, log, keep_bytes)
    return VerifyResult(
        rc=result.code,
        passed=result.code == 0 and not result.timed_out and not result.aborted,
        timed_out=result.timed_out,
        aborted=result.aborted,
        wall_s=result.wall_s,
        log_path=os.fspath(log),
        stripped=stripped_names(base),
        log_excerpt=excerpt,
        limit=group.limit(result.code == 0 and not result.timed_out),
    )
