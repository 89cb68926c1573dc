"""The official SWE-bench grade, ``[judge] kind = "swebench"``: in a fresh container of the
instance's image, the cell's patch is applied and the instance's tests are run and graded
by the ``swebench`` package's own rules.

In one ``docker run --rm`` of the image (no network, the judge's memory / pids / cpus
limits), a script we write:

1. resets ``/testbed`` to the base commit (``git reset --hard``, ``git clean -fd``);
2. applies the cell's patch the way the harness does: each of :data:`APPLY_COMMANDS` in
   turn (``git apply``, ``--3way``, ``--reject``, ``patch --fuzz=5``), the tree restored
   between attempts, then the harness's "already applied" check (``git apply --check
   --reverse``); each attempt's exit status is in the log and in ``judge.json``;
3. checks out the files ``test_patch`` modifies from the base, removes those it creates
   (what the agent left there cannot stop it applying), and applies ``test_patch``;
4. runs ``test_cmd`` between swebench's start/end markers and records its exit status.

Its whole output is ``<run_dir>/judge.log``; swebench's ``get_eval_report`` (the chosen
``log_parser`` from its ``PARSER_REGISTRY``, FAIL_TO_PASS / PASS_TO_PASS, its eval type)
reads it. ``judge.json`` is the verdict in the reference's shape: ``judge``, ``resolved``,
``composite`` (1.0 resolved, else 0.0: the ledger's reward), and how it was reached.

What the agent's code does decides nothing but its tests' results: a hang, an OOM or a
crash in the test phase is unresolved (composite 0), as in the harness. A grade that could
not be made (no engine, no image, the swebench extra missing, a reset that failed, a
judge timeout before the tests started) is no verdict: resolved and composite null.
"""

from __future__ import annotations

import asyncio
import base64
import importlib
import json
import os
import re
import secrets
import shlex
from pathlib import Path
from typing import Any

import msgspec

from arenad.containers.docker import ContainerLimits, remove_container, run_argv
from arenad.materialize.image import default_image_name
from arenad.runs.commands import run
from arenad.runs.groups import SpawnError
from arenad.verdict.excerpt import VERIFY_LOG_KEEP_BYTES, file_tail_excerpt
from events.cell import TextExcerpt
from events.specs import InstanceSpec, JudgeSpec

__all__ = [
    "APPLY_COMMANDS",
    "Grading",
    "GradingError",
    "check_gradable",
    "grading_of",
    "judge_script",
    "log_parser_problem",
    "run_swebench_judge",
]

# The harness's GIT_APPLY_CMDS (swebench.harness.run_evaluation), in its order; a test
# checks they are the pinned package's.
APPLY_COMMANDS = (
    "git apply --verbose",
    "git apply --verbose --3way",
    "git apply --verbose --reject",
    "patch --batch --forward --fuzz=5 -p1 -i",
)
# swebench.harness.constants: the markers its grading looks for.
APPLY_PATCH_FAIL = ">>>>> Patch Apply Failed"
APPLY_PATCH_PASS = ">>>>> Applied Patch"
RESET_FAILED = ">>>>> Reset Failed"
START_TEST_OUTPUT = ">>>>> Start Test Output"
END_TEST_OUTPUT = ">>>>> End Test Output"
TEST_EXIT_CODE = ">>>>> Test Exit Code"
TEST_PATCH_FAILED = ">>>>> arenad: test_patch did not apply"
_ATTEMPT = re.compile(r"^>>>>> arenad apply exit (\d+): (-?\d+)$", re.M)
_TEST_EXIT = re.compile(rf"^{re.escape(TEST_EXIT_CODE)}: (-?\d+)$", re.M)
# swebench's DIFF_MODIFIED_FILE_REGEX: the files a test patch changes (not creates).
_MODIFIED = re.compile(r"^--- a/(.*)$", re.M)
_CREATED = re.compile(r"^--- /dev/null\n\+\+\+ b/(.*)$", re.M)
WORKDIR = "/testbed"
# The script arrives on stdin and is saved before it runs. Inside, coreutils' timeout
# bounds it too: a container whose client died with a killed daemon still ends (--rm).
_RUN_SCRIPT = (
    "cat >/tmp/arenad-judge.sh || exit 1; "
    "if command -v timeout >/dev/null; then"
    " exec timeout -k 5 {limit} bash /tmp/arenad-judge.sh </dev/null; fi; "
    "exec bash /tmp/arenad-judge.sh </dev/null"
)
# Beyond this the test log is not graded (the tests' output is not the grader's memory).
MAX_GRADED_LOG_BYTES = 256 * 1024 * 1024


class GradingError(ValueError):
    """An instance that cannot be graded (the message names the column)."""


class Grading(msgspec.Struct, frozen=True, kw_only=True):
    """What the grade needs of an instance (SWE-bench's columns)."""

    instance_id: str
    repo: str
    version: str
    image: str
    base_commit: str
    test_patch: str
    fail_to_pass: list[str]
    pass_to_pass: list[str]
    # The row's own grading columns, where the dataset carries them (swebench's eval
    # script and parser name): used when the campaign names no test_cmd / log_parser.
    eval_script: str | None = None
    log_parser: str | None = None


def _tests(value: Any, column: str) -> list[str]:
    # The hub's rows hold these as JSON text; a local file may hold the list itself.
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            raise GradingError(f"{column} is not a JSON list of test names") from None
    if not isinstance(value, list) or not all(isinstance(t, str) for t in value):
        raise GradingError(f"{column} must be a list of test names")
    return list(value)


def grading_of(instance: InstanceSpec) -> Grading:
    """The instance's grading columns; GradingError naming the one missing or malformed."""
    extra = instance.extra
    test_patch = extra.get("test_patch")
    if not isinstance(test_patch, str) or not test_patch.strip():
        raise GradingError("test_patch must be the instance's test diff (a non-empty string)")
    for column in ("FAIL_TO_PASS", "PASS_TO_PASS"):
        if column not in extra:
            raise GradingError(f"{column} is missing (SWE-bench's column)")
    version = extra.get("version", "")
    own = {k: extra.get(k) for k in ("eval_script", "log_parser")}
    for column, value in own.items():
        if value is not None and (not isinstance(value, str) or not value.strip()):
            raise GradingError(f"{column} must be a non-empty string")
    return Grading(
        instance_id=instance.instance_id,
        repo=instance.repo,
        version=str(version) if version is not None else "",
        image=instance.image or default_image_name(instance.instance_id),
        base_commit=instance.base_commit,
        test_patch=test_patch,
        fail_to_pass=_tests(extra["FAIL_TO_PASS"], "FAIL_TO_PASS"),
        pass_to_pass=_tests(extra["PASS_TO_PASS"], "PASS_TO_PASS"),
        eval_script=own["eval_script"],
        log_parser=own["log_parser"],
    )


def check_gradable(grading: Grading, spec: JudgeSpec) -> None:
    """GradingError unless the judge has a test command and a parser for this instance."""
    if spec.test_cmd is None and grading.eval_script is None:
        raise GradingError("no eval_script column, and [judge] names no test_cmd")
    if spec.log_parser is None and grading.log_parser is None:
        raise GradingError("no log_parser column, and [judge] names no log_parser")


def _swebench() -> tuple[Any, Any, Any, Any]:
    """swebench's grading pieces (an optional extra; importing it takes seconds, once)."""
    grading = importlib.import_module("swebench.harness.grading")
    parsers = importlib.import_module("swebench.harness.log_parsers")
    constants = importlib.import_module("swebench.harness.constants")
    types = importlib.import_module("swebench.types")
    return grading, parsers.PARSER_REGISTRY, constants, types.TestSpec


def log_parser_problem(name: str) -> str | None:
    """Why ``name`` cannot grade (the extra is missing, or swebench has no such parser)."""
    try:
        _, registry, _, _ = _swebench()
    except ImportError as exc:
        return (
            f"the swebench package is not installed ({exc}); install arenad's swebench extra"
            " (pip install 'arenad[swebench]')"
        )
    if _registry_name(name, registry) is None:
        shown = sorted(k.removeprefix("parse_log_") for k in registry)
        return f"swebench has no log parser {name!r} (it has {', '.join(shown)})"
    return None


def _registry_name(name: str, registry: Any) -> str | None:
    """swebench's key for ``name``: ``pytest`` or ``parse_log_pytest`` both name it."""
    for key in (name, f"parse_log_{name}"):
        if key in registry:
            return key
    return None


def _heredoc(path: str, data: str) -> str:
    # Base64 lines cannot end the here-document early, whatever the patch holds.
    # surrogateescape: a patch's bytes that are not UTF-8 go through unchanged.
    b64 = base64.encodebytes(data.encode("utf-8", "surrogateescape")).decode("ascii")
    return f"base64 -d > {path} <<'ARENAD_EOF'\n{b64}ARENAD_EOF\n"


def _with_exit_code(eval_script: str) -> str:
    """The row's eval script recording its test command's exit status after the end marker
    (swebench's record_test_exit_code: its script's own exit status is the last reset's)."""
    out: list[str] = []
    done = False
    for line in eval_script.split("\n"):
        if not done and END_TEST_OUTPUT in line:
            out += ["SWEBENCH_TEST_EXIT_CODE=$?", line]
            out.append(f'echo "{TEST_EXIT_CODE}: $SWEBENCH_TEST_EXIT_CODE"')
            done = True
        else:
            out.append(line)
    return "\n".join(out)


def judge_script(grading: Grading, patch: str, test_cmd: str | None) -> str:
    """The bash program the judge's container runs (its stdin is /dev/null). ``test_cmd``
    None: after the patch, the row's own eval script (it checks the test files out, applies
    the test patch and runs the tests between the markers, as the harness's eval.sh)."""
    base = shlex.quote(grading.base_commit)
    modified = sorted(set(_MODIFIED.findall(grading.test_patch)))
    created = sorted(set(_CREATED.findall(grading.test_patch)))
    lines = [
        "set -uo pipefail",
        # One log, as the harness's: the tests' stderr interleaved with their stdout.
        "exec 2>&1",
        f"cd {WORKDIR} || {{ echo '{RESET_FAILED}'; exit 1; }}",
        f"git reset -q --hard {base} && git clean -qfd || {{ echo '{RESET_FAILED}'; exit 1; }}",
        _heredoc("/tmp/arenad-model.patch", patch),
        _heredoc("/tmp/arenad-test.patch", grading.test_patch),
        "applied=0",
    ]
    for n, command in enumerate(APPLY_COMMANDS):
        # The first attempt that applies ends the chain (the harness's break); a failed
        # one (notably --reject) leaves a partial state behind, undone before the next.
        lines += [
            'if [ "$applied" = 0 ]; then',
            "  git checkout -q -- . ; git clean -qfd" if n else "  :",
            f"  echo '>>>>> arenad apply attempt {n}: {command}'",
            f"  {command} /tmp/arenad-model.patch 2>&1",
            "  rc=$?",
            f'  echo ">>>>> arenad apply exit {n}: $rc"',
            f'  if [ "$rc" = 0 ]; then applied=1; echo "{APPLY_PATCH_PASS}"; fi',
            "fi",
        ]
    lines += [
        'if [ "$applied" = 0 ]; then',
        # The harness's last check: the chain can leave the patch applied while each
        # command still exited non-zero.
        "  if git apply --check --reverse /tmp/arenad-model.patch >/dev/null 2>&1; then",
        f'    applied=1; echo "{APPLY_PATCH_PASS}: verified already applied"',
        "  fi",
        "fi",
        f'if [ "$applied" = 0 ]; then echo "{APPLY_PATCH_FAIL}"; exit 0; fi',
    ]
    if test_cmd is None:
        script = _with_exit_code(grading.eval_script or "")
        lines += [_heredoc("/tmp/arenad-eval.sh", script), "bash /tmp/arenad-eval.sh"]
        return "\n".join(lines) + "\n"
    if created:
        lines.append("rm -rf -- " + " ".join(shlex.quote(p) for p in created))
    if modified:
        lines.append(f"git checkout -q {base} -- " + " ".join(shlex.quote(p) for p in modified))
    lines += [
        "git apply --verbose /tmp/arenad-test.patch 2>&1"
        f" || {{ echo '{TEST_PATCH_FAILED}'; exit 0; }}",
        f"echo '{START_TEST_OUTPUT}'",
        test_cmd,
        "SWEBENCH_TEST_EXIT_CODE=$?",
        f"echo '{END_TEST_OUTPUT}'",
        f'echo "{TEST_EXIT_CODE}: $SWEBENCH_TEST_EXIT_CODE"',
    ]
    return "\n".join(lines) + "\n"


def _attempts(log: str) -> list[dict[str, Any]]:
    return [
        {"command": APPLY_COMMANDS[int(n)], "exit": int(rc)}
        for n, rc in _ATTEMPT.findall(log)
        if int(n) < len(APPLY_COMMANDS)
    ]


def _grade(
    grading: Grading, log_parser: str, patch: str, log_path: Path, arm: str
) -> dict[str, Any]:
    grading_mod, registry, constants, test_spec_cls = _swebench()
    parser_key = _registry_name(log_parser, registry)
    eval_type = (
        constants.EvalType.FAIL_ONLY.value
        if grading.repo in getattr(constants, "FAIL_ONLY_REPOS", ())
        else constants.EvalType.PASS_AND_FAIL.value
    )
    spec = test_spec_cls(
        instance_id=grading.instance_id,
        image=grading.image,
        eval_script_list=[],
        repo=grading.repo,
        version=grading.version,
        FAIL_TO_PASS=grading.fail_to_pass,
        PASS_TO_PASS=grading.pass_to_pass,
        log_parser=parser_key,
        eval_type=eval_type,
    )
    prediction = {
        "instance_id": grading.instance_id,
        "model_name_or_path": arm,
        "model_patch": patch,
    }
    report = grading_mod.get_eval_report(spec, prediction, str(log_path), True)
    out: dict[str, Any] = dict(report[grading.instance_id])
    out["eval_type"] = eval_type
    return out


def _verdict_doc(spec: JudgeSpec, grading: Grading, **fields: Any) -> dict[str, Any]:
    return {
        "judge": spec.name,
        "kind": "swebench",
        "instance_id": grading.instance_id,
        "image": grading.image,
        "log_parser": spec.log_parser or grading.log_parser,
        "test_cmd": spec.test_cmd if spec.test_cmd is not None else "(the row's eval_script)",
        **fields,
    }


class SwebenchOutcome(msgspec.Struct, frozen=True, kw_only=True):
    """The verdict document (None: no verdict, ``error`` says why) and the test log."""

    doc: dict[str, Any] | None
    error: str | None
    log_path: str | None


async def run_swebench_judge(
    spec: JudgeSpec,
    *,
    instance: InstanceSpec,
    patch_path: str | None,
    run_dir: str | os.PathLike[str],
    arm: str,
    docker: str | None = None,
) -> SwebenchOutcome:
    """Grade the cell's patch (``patch_path``; None: the agent changed nothing) in a fresh
    container of the instance's image."""
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    try:
        grading = grading_of(instance)
        check_gradable(grading, spec)
    except GradingError as exc:
        return SwebenchOutcome(doc=None, error=f"instance cannot be graded: {exc}", log_path=None)
    parser = spec.log_parser or grading.log_parser or ""
    patch = ""
    if patch_path is not None:
        patch = await asyncio.to_thread(
            Path(patch_path).read_text, encoding="utf-8", errors="surrogateescape"
        )
    if not patch.strip():
        # The harness's "patch_is_None"/empty: nothing to apply is unresolved, not a gap.
        doc = _verdict_doc(
            spec, grading, resolved=False, composite=0.0, patch_exists=False, apply_attempts=[]
        )
        return SwebenchOutcome(doc=doc, error=None, log_path=None)
    try:
        problem = await asyncio.to_thread(log_parser_problem, parser)
    except Exception as exc:  # an extra that fails to import is no verdict, not a crash
        problem = f"swebench could not be loaded: {type(exc).__name__}: {exc}"
    if problem is not None:
        return SwebenchOutcome(doc=None, error=problem, log_path=None)
    script = judge_script(grading, patch, spec.test_cmd)
    name = f"arenad-judge-{secrets.token_hex(6)}"
    limits = ContainerLimits(memory_mb=spec.memory_mb, pids=spec.pids, cpus=spec.cpus)
    # A test reading its stdin reads nothing of the script (nor is the script bounded by
    # an argument's size).
    argv = run_argv(
        grading.image,
        name,
        limits,
        command=["/bin/bash", "-c", _RUN_SCRIPT.format(limit=f"{spec.timeout_s + 30:.0f}")],
        stdin=True,
        # Whose grade it is: what a reaper (or an operator) finds leftovers by.
        labels={"arenad.judge": grading.instance_id, "arenad.run_dir": str(run_dir)},
        docker=docker,
    )
    log_path = run_dir / "judge.log"
    try:
        try:
            result = await run(
                argv,
                stdin=script.encode("utf-8", errors="surrogateescape"),
                timeout_s=spec.timeout_s,
                stdout_path=log_path,
                stderr_path=run_dir / "judge.engine.log",
                capture_limit=64 * 1024,
            )
        except SpawnError as exc:
            return SwebenchOutcome(
                doc=None, error=f"judge container could not start: {exc.reason}", log_path=None
            )
    finally:
        # Killing the client does not stop its container; --rm has removed a finished one.
        await asyncio.shield(remove_container(name, docker))
    log = await asyncio.to_thread(_read_head, log_path)
    attempts = _attempts(log)
    started = START_TEST_OUTPUT in log
    if not started:
        if result.timed_out:
            return SwebenchOutcome(
                doc=None,
                error=f"judge timed out after {spec.timeout_s:g}s before the tests started",
                log_path=str(log_path),
            )
        if result.aborted:
            return SwebenchOutcome(doc=None, error="judge aborted", log_path=str(log_path))
        if RESET_FAILED in log or result.code != 0:
            engine = result.stderr_text.strip().splitlines()[-1:] or [""]
            return SwebenchOutcome(
                doc=None,
                error=f"judge container exited {result.code} before the tests: {engine[0]}",
                log_path=str(log_path),
            )
    if result.aborted:
        return SwebenchOutcome(doc=None, error="judge aborted", log_path=str(log_path))
    applied = APPLY_PATCH_PASS in log
    fields: dict[str, Any] = {
        "patch_exists": True,
        "patch_applied": applied,
        "apply_attempts": attempts,
        "test_patch_applied": started,
        "tests_timed_out": started and result.timed_out,
        "test_exit_code": _test_exit(log),
        "container_exit": result.code,
        "limits": msgspec.to_builtins(limits),
    }
    size = log_path.stat().st_size
    if size > MAX_GRADED_LOG_BYTES:
        doc = _verdict_doc(
            spec,
            grading,
            resolved=False,
            composite=0.0,
            error="test log too large to grade",
            **fields,
        )
        return SwebenchOutcome(doc=doc, error=None, log_path=str(log_path))
    try:
        report = await asyncio.to_thread(_grade, grading, parser, patch, log_path, arm)
    except Exception as exc:
        return SwebenchOutcome(
            doc=None,
            error=f"swebench could not grade: {type(exc).__name__}: {exc}",
            log_path=str(log_path),
        )
    resolved = bool(report.get("resolved"))
    doc = _verdict_doc(
        spec,
        grading,
        resolved=resolved,
        composite=1.0 if resolved else 0.0,
        report=report,
        **fields,
    )
    return SwebenchOutcome(doc=doc, error=None, log_path=str(log_path))


def _read_head(path: Path, limit: int = 8 * 1024 * 1024) -> str:
    """The markers live before and around the test output: the log's head is enough."""
    try:
        with path.open("rb") as f:
            head = f.read(limit)
            f.seek(0, os.SEEK_END)
            if f.tell() > limit:
                f.seek(max(limit, f.tell() - 64 * 1024))
                head += b"\n" + f.read()
    except OSError:
        return ""
    return head.decode("utf-8", errors="replace")


def _test_exit(log: str) -> int | None:
    found = _TEST_EXIT.findall(log)
    return int(found[-1]) if found else None


def test_log_excerpt(log_path: str | None) -> TextExcerpt | None:
    """The test log's tail, size and sha256 for the log (None: there was no log)."""
    if log_path is None or not os.path.exists(log_path):
        return None
    return file_tail_excerpt(log_path, VERIFY_LOG_KEEP_BYTES)
