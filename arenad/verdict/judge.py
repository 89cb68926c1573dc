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
import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import msgspec

from arenad.errors import ArenadError
from arenad.runs.commands import run
from arenad.runs.groups import SpawnError
from arenad.sandbox.confine import CellSandbox, SandboxError, confine
from arenad.sandbox.secrets import strip_provider_secrets
from events.cell import JudgeVerdictRecorded
from events.specs import JudgeSpec

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
        doc = json.loads(text)
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
) -> JudgeVerdictRecorded:
    """Run the campaign's judge for one attempt, confined to ``sandbox`` when given (it
    reads the agent's workspace); always returns the event to append, with
    how many times the judge ran (once: arenad does not retry it) and its wall time (the
    reference's judgeAttempts / judgeWallS, which the ledger reads)."""
    t0 = time.monotonic()
    event = await _judge_once(spec, attempt, workspace, run_dir, env, sandbox)
    # A duration, measured once and recorded: the projection never reads a clock.
    wall_s = round(time.monotonic() - t0, 3)
    return msgspec.structs.replace(event, attempts=1, wall_s=wall_s)


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
            argv = confine(sandbox, argv, env=child_env, chdir=os.fspath(workspace)).argv
        except SandboxError as exc:
            return no_verdict(spec, attempt, f"judge could not be sandboxed: {exc}", "")
    try:
        result = await run(
            argv,
            cwd=workspace,
            env=child_env,
            timeout_s=spec.timeout_s,
            stdout_path=out,
            stderr_path=out.with_name("judge.log"),
            capture_limit=0,
        )
    except SpawnError as exc:
        return no_verdict(spec, attempt, f"judge could not start: {exc.reason}", "")
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
