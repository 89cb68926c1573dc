"""Verdicts: the optional campaign judge command, and the verdict document both it and
``arenad record-verdict`` produce.

A verdict document is a JSON object. Fields read: ``resolved`` (true/false/null),
``score`` (a number or null; else ``composite``), ``judge`` (a non-empty string; default
the judge's name). The document is kept verbatim in ``JudgeVerdictRecorded.verdict_json``.

The judge command runs after verify as ``bash -c <command>`` in a grading checkout of its
own (:mod:`arenad.verdict.grade`; the workspace with ``verify_in = "workspace"``), with the
verify gate's environment (provider secrets removed: a judge must not pass a patch only
because a key leaked in). Its stdout is the verdict, written to ``<run_dir>/judge.json``
(the reference's name), its stderr to ``<run_dir>/judge.log``. A judge that fails, times
out or prints no verdict still gives a ``JudgeVerdictRecorded``: ``resolved`` and
``score`` null (no reward: a labeled gap, never 0) and a document naming what went wrong.
A judged verdict records ``attempts`` (1) and ``wall_s``; an operator's (``parse_verdict``
for ``record-verdict``) leaves both None, so the ledger reads its document's own.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import msgspec

from arenad.errors import ArenadError
from arenad.js import js_parse
from arenad.runs import cgroups
from arenad.runs.commands import run
from arenad.runs.groups import SpawnError
from arenad.sandbox.confine import CellSandbox, SandboxError, confine
from arenad.sandbox.secrets import strip_provider_secrets
from arenad.verdict.swebench import run_swebench_judge, test_log_excerpt
from events.cell import LIMIT_REASONS, JudgeVerdictRecorded
from events.specs import InstanceSpec, JudgeSpec

__all__ = ["DEFAULT_JUDGE", "VerdictError", "no_verdict", "parse_verdict", "run_judge"]

DEFAULT_JUDGE = "swe-arena-official-judge"
_TAIL = 2000


class VerdictError(ArenadError, ValueError):
    """A verdict document that cannot be read (the message says why)."""


def parse_verdict(
    text: str,
    *,
    attempt: int,
    default_judge: str = DEFAULT_JUDGE,
    source: Literal["command", "operator"] = "operator",
) -> JudgeVerdictRecorded:
    """The event for a verdict document; ``VerdictError`` if it is not one."""
    try:
        # As JSON.parse reads it: a NaN or Infinity literal is not JSON (finding 9: one was
        # accepted, and a NaN score became a null reward labelled as a judge's).
        doc = js_parse(text)
    except ValueError as exc:
        raise VerdictError(f"not JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise VerdictError("the verdict must be a JSON object")
    resolved = doc.get("resolved")
    if resolved is not None and not isinstance(resolved, bool):
        raise VerdictError("'resolved' must be true, false or null")
    score: Any = doc.get("score", doc.get("composite"))
    if score is not None and (isinstance(score, bool) or not isinstance(score, int | float)):
        raise VerdictError("'score' must be a number or null")
    if score is not None and not math.isfinite(score):
        raise VerdictError("'score' must be a finite number (or null)")
    judge = doc.get("judge", default_judge)
    if not isinstance(judge, str) or not judge:
        raise VerdictError("'judge' must be a non-empty string")
    return JudgeVerdictRecorded(
        attempt=attempt,
        judge=judge,
        verdict_json=text,
        resolved=resolved,
        score=None if score is None else float(score),
        source=source,
    )


def no_verdict(spec: JudgeSpec, attempt: int, error: str, stdout: str = "") -> JudgeVerdictRecorded:
    """The event for a judge that gave no verdict: null resolved and score, and why."""
    doc = {"error": error, "stdout_tail": stdout[-_TAIL:]}
    return JudgeVerdictRecorded(
        attempt=attempt,
        judge=spec.name,
        verdict_json=json.dumps(doc, ensure_ascii=False),
        resolved=None,
        score=None,
        source="command",
    )


async def run_judge(
    spec: JudgeSpec,
    *,
    attempt: int,
    workspace: str | os.PathLike[str],
    run_dir: str | os.PathLike[str],
    env: Mapping[str, str] | None = None,
    sandbox: CellSandbox | None = None,
    instance: InstanceSpec | None = None,
    patch_path: str | None = None,
    arm: str = "",
) -> JudgeVerdictRecorded:
    """Run the campaign's judge for one attempt, confined to ``sandbox`` when given (it
    reads the agent's workspace); always returns the event to append, with
    how many times the judge ran (once: arenad does not retry it) and its wall time (the
    reference's judgeAttempts / judgeWallS, which the ledger reads).

    ``kind = "swebench"`` grades ``patch_path`` (the cell's extracted patch; None: none)
    against ``instance`` in a container of its image instead (:mod:`arenad.verdict.swebench`).
    """
    t0 = time.monotonic()
    if spec.kind == "swebench":
        event = await _swebench_once(spec, attempt, run_dir, instance, patch_path, arm)
    else:
        event = await _judge_once(spec, attempt, workspace, run_dir, env, sandbox)
    # A duration, measured once and recorded: the projection never reads a clock.
    wall_s = round(time.monotonic() - t0, 3)
    return msgspec.structs.replace(event, attempts=1, wall_s=wall_s)


async def _swebench_once(
    spec: JudgeSpec,
    attempt: int,
    run_dir: str | os.PathLike[str],
    instance: InstanceSpec | None,
    patch_path: str | None,
    arm: str,
) -> JudgeVerdictRecorded:
    if instance is None:
        return no_verdict(spec, attempt, "the swebench judge was not given the instance")
    outcome = await run_swebench_judge(
        spec, instance=instance, patch_path=patch_path, run_dir=run_dir, arm=arm
    )
    excerpt = await asyncio.to_thread(test_log_excerpt, outcome.log_path)
    if outcome.doc is None:
        event = no_verdict(spec, attempt, outcome.error or "no verdict")
    else:
        text = json.dumps(outcome.doc, ensure_ascii=False, indent=1)
        out = Path(run_dir) / "judge.json"
        await asyncio.to_thread(out.write_text, text + "\n", encoding="utf-8")
        event = parse_verdict(text, attempt=attempt, default_judge=spec.name, source="command")
    return msgspec.structs.replace(event, test_log=excerpt)


async def _judge_once(
    spec: JudgeSpec,
    attempt: int,
    workspace: str | os.PathLike[str],
    run_dir: str | os.PathLike[str],
    env: Mapping[str, str] | None,
    sandbox: CellSandbox | None,
) -> JudgeVerdictRecorded:
    out = Path(run_dir) / "judge.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    child_env = strip_provider_secrets(dict(os.environ if env is None else env))
    argv = ["bash", "-c", spec.command]
    if sandbox is not None:
        try:
            argv = confine(
                sandbox, argv, env=child_env, chdir=os.fspath(workspace), network="none"
            ).argv
        except SandboxError as exc:
            return no_verdict(spec, attempt, f"judge could not be sandboxed: {exc}", "")
    limits = cgroups.limits_of(sandbox.spec) if sandbox is not None else None
    home = sandbox.home_root if sandbox is not None else ""
    try:
        async with cgroups.scope(limits, home, os.fspath(run_dir), "judge") as group:
            result = await run(
                group.argv(argv),
                cwd=workspace,
                env=child_env,
                timeout_s=spec.timeout_s,
                stdout_path=out,
                stderr_path=out.with_name("judge.log"),
                capture_limit=0,
            )
    except SpawnError as exc:
        return no_verdict(spec, attempt, f"judge could not start: {exc.reason}", "")
    limit = group.limit(result.code == 0 and not result.timed_out)
    if limit is not None:
        reason = LIMIT_REASONS.get(limit, f"{limit} limit")
        return no_verdict(spec, attempt, f"judge stopped: {reason}", "")
    stdout = await asyncio.to_thread(out.read_text, encoding="utf-8", errors="replace")
    if result.timed_out:
        return no_verdict(spec, attempt, f"judge timed out after {spec.timeout_s:g}s", stdout)
    if result.aborted:
        return no_verdict(spec, attempt, "judge aborted", stdout)
    if result.code != 0:
        return no_verdict(spec, attempt, f"judge exited {result.code}", stdout)
    try:
        return parse_verdict(stdout, attempt=attempt, default_judge=spec.name, source="command")
    except VerdictError as exc:
        return no_verdict(spec, attempt, f"judge printed no verdict: {exc}", stdout)
