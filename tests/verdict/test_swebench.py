"""The swebench judge against a real docker engine and the local SWE-bench's real images."""

from __future__ import annotations

import base64
import difflib
import json
from pathlib import Path

import msgspec
import pytest

from arenad.verdict.judge import run_judge
from arenad.verdict.swebench import (
    APPLY_COMMANDS,
    Grading,
    GradingError,
    grading_of,
    judge_script,
)
from events.cell import JudgeVerdictRecorded
from events.specs import InstanceSpec, JudgeSpec
from scripts.local_swebench import PROJECT, strip_blocks
from tests.swebench_support import LocalSwebench, local_swebench  # noqa: F401

IID = "arenad__textkit-3"  # median of an even count
TEST_CMD = "python3 -m pytest -rA -p no:cacheprovider tests"
SPEC = JudgeSpec(
    kind="swebench", test_cmd=TEST_CMD, log_parser="pytest", timeout_s=120, memory_mb=512
)

WRONG_FIX = """\
--- a/textkit/stats.py
+++ b/textkit/stats.py
@@ -24,7 +24,7 @@ def median(values: Sequence[float]) -> float:
     mid = len(data) // 2
     if len(data) % 2:
         return data[mid]
-    return data[mid]
+    return data[mid - 1]
"""


async def judge(
    lsb: LocalSwebench, tmp_path: Path, patch: str | None, spec: JudgeSpec = SPEC
) -> tuple[JudgeVerdictRecorded, dict[str, object] | None]:
    patch_path = None
    if patch is not None:
        patch_path = tmp_path / "cell.patch"
        patch_path.write_text(patch)
    run_dir = tmp_path / "run"
    event = await run_judge(
        spec,
        attempt=1,
        workspace=tmp_path,
        run_dir=run_dir,
        instance=lsb.instance(IID),
        patch_path=None if patch_path is None else str(patch_path),
        arm="GOLD",
    )
    doc = json.loads(event.verdict_json)
    return event, doc


def test_apply_commands_are_the_harness_s() -> None:
    from swebench.harness.run_evaluation import GIT_APPLY_CMDS

    assert list(APPLY_COMMANDS) == GIT_APPLY_CMDS


async def test_the_gold_patch_is_resolved(
    local_swebench: LocalSwebench,  # noqa: F811
    tmp_path: Path,
) -> None:
    event, doc = await judge(local_swebench, tmp_path, local_swebench.rows[IID]["patch"])
    assert event.resolved is True and event.score == 1.0, doc
    assert doc is not None and doc["judge"] == "swe-arena-official-judge"
    assert doc["composite"] == 1.0 and doc["patch_applied"] is True
    assert doc["apply_attempts"] == [{"command": "git apply --verbose", "exit": 0}]
    report = doc["report"]
    assert isinstance(report, dict)
    f2p = report["tests_status"]["FAIL_TO_PASS"]
    assert f2p["success"] == ["tests/test_stats.py::test_median_even"] and not f2p["failure"]
    assert doc["test_exit_code"] == 0
    # The verdict file is the document; the test log is in the event, bounded.
    assert json.loads((tmp_path / "run" / "judge.json").read_text()) == doc
    assert event.test_log is not None and "PASSED" in event.test_log.text
    assert event.test_log.size == (tmp_path / "run" / "judge.log").stat().st_size
    assert event.attempts == 1 and event.wall_s is not None


async def test_a_wrong_fix_is_unresolved(
    local_swebench: LocalSwebench,  # noqa: F811
    tmp_path: Path,
) -> None:
    event, doc = await judge(local_swebench, tmp_path, WRONG_FIX)
    assert event.resolved is False and event.score == 0.0, doc
    assert doc is not None and doc["patch_applied"] is True
    report = doc["report"]
    assert isinstance(report, dict)
    assert report["tests_status"]["FAIL_TO_PASS"]["failure"] == [
        "tests/test_stats.py::test_median_even"
    ]


async def test_rewriting_the_tests_does_not_change_the_grade(
    local_swebench: LocalSwebench,  # noqa: F811
    tmp_path: Path,
) -> None:
    # A patch that leaves the bug, makes the F2P test (same file, same name) pass whatever
    # median does and weakens another; the judge checks the test files out from the base
    # and applies test_patch before the tests run.
    base = strip_blocks((PROJECT / "tests/test_stats.py").read_text(), IID)
    cheated = base.replace("assert mean([1, 2, 3, 4]) == 2.5", "assert True")
    cheated += "\n\ndef test_median_even():\n    pass\n"
    cheat = "".join(
        difflib.unified_diff(
            base.splitlines(True),
            cheated.splitlines(True),
            "a/tests/test_stats.py",
            "b/tests/test_stats.py",
        )
    )
    conftest = """\
--- /dev/null
+++ b/tests/conftest.py
@@ -0,0 +1,3 @@
+import textkit.stats
+
+textkit.stats.median = lambda values: 2.5
"""
    event, doc = await judge(local_swebench, tmp_path, cheat + conftest)
    assert event.resolved is False, doc
    assert doc is not None and doc["patch_applied"] is True


async def test_a_patch_that_does_not_apply_is_unresolved_after_every_attempt(
    local_swebench: LocalSwebench,  # noqa: F811
    tmp_path: Path,
) -> None:
    bad = WRONG_FIX.replace("return data[mid]\n+", "return data[nowhere]\n+")
    event, doc = await judge(local_swebench, tmp_path, bad)
    assert event.resolved is False and event.score == 0.0, doc
    assert doc is not None and doc["patch_applied"] is False
    attempts = doc["apply_attempts"]
    assert isinstance(attempts, list)
    assert [a["command"] for a in attempts] == list(APPLY_COMMANDS)
    assert all(a["exit"] != 0 for a in attempts)


async def test_no_patch_is_unresolved_without_a_container(
    local_swebench: LocalSwebench,  # noqa: F811
    tmp_path: Path,
) -> None:
    event, doc = await judge(local_swebench, tmp_path, None)
    assert event.resolved is False and event.score == 0.0
    assert doc is not None and doc["patch_exists"] is False
    assert event.test_log is None


async def test_tests_that_hang_are_unresolved_not_a_gap(
    local_swebench: LocalSwebench,  # noqa: F811
    tmp_path: Path,
) -> None:
    hang = WRONG_FIX.replace(
        "+    return data[mid - 1]", "+    while True:\n+        pass"
    ).replace("@@ -24,7 +24,7 @@", "@@ -24,7 +24,8 @@")
    spec = JudgeSpec(kind="swebench", test_cmd=TEST_CMD, log_parser="pytest", timeout_s=20)
    event, doc = await judge(local_swebench, tmp_path, hang, spec)
    assert event.resolved is False and event.score == 0.0, doc
    assert doc is not None and doc["tests_timed_out"] is True


async def test_a_missing_image_is_no_verdict(
    local_swebench: LocalSwebench,  # noqa: F811
    tmp_path: Path,
) -> None:
    import msgspec

    instance = local_swebench.instance(IID)
    instance = msgspec.structs.replace(instance, image="arenad-test/no-such-image:never")
    (tmp_path / "p.patch").write_text(WRONG_FIX)
    event = await run_judge(
        SPEC,
        attempt=1,
        workspace=tmp_path,
        run_dir=tmp_path / "run",
        instance=instance,
        patch_path=str(tmp_path / "p.patch"),
    )
    assert event.resolved is None and event.score is None
    assert "exited 125" in json.loads(event.verdict_json)["error"]


def test_grading_columns_are_checked(local_swebench: LocalSwebench) -> None:  # noqa: F811
    import msgspec

    instance = local_swebench.instance(IID)
    extra = dict(instance.extra)
    extra.pop("test_patch")
    with pytest.raises(GradingError, match="test_patch"):
        grading_of(msgspec.structs.replace(instance, extra=extra))
    extra = {**instance.extra, "FAIL_TO_PASS": "not json"}
    with pytest.raises(GradingError, match="FAIL_TO_PASS"):
        grading_of(msgspec.structs.replace(instance, extra=extra))
    grading = grading_of(instance)
    assert grading.image == "swebench/sweb.eval.x86_64.arenad_1776_textkit-3:latest"
    script = judge_script(grading, "x", TEST_CMD)
    # The test files test_patch modifies are checked out from the base before it applies.
    assert f"git checkout -q {grading.base_commit} -- tests/test_stats.py" in script


async def test_tests_that_exhaust_the_memory_limit_are_unresolved(
    local_swebench: LocalSwebench,  # noqa: F811
    tmp_path: Path,
) -> None:
    hog = WRONG_FIX.replace("+    return data[mid - 1]", "+    return len(bytearray(2 << 30))")
    spec = JudgeSpec(kind="swebench", test_cmd=TEST_CMD, log_parser="pytest", memory_mb=256)
    event, doc = await judge(local_swebench, tmp_path, hog, spec)
    assert event.resolved is False and event.score == 0.0, doc
    assert doc is not None and doc["limits"] == {
        "memory_mb": 256,
        "pids": 4096,
        "cpus": None,
        "network": "none",
    }


def test_a_patch_of_any_bytes_reaches_the_container_unchanged() -> None:
    grading = Grading(
        instance_id="a__b-1",
        repo="a/b",
        version="1",
        image="i:1",
        base_commit="0" * 40,
        test_patch="--- a/t.py\n+++ b/t.py\n",
        fail_to_pass=[],
        pass_to_pass=[],
    )
    raw = b"--- a/x\n+++ b/x\n+\xff\xfe latin-1 \xe9 and ARENAD_EOF\n"
    script = judge_script(grading, raw.decode("utf-8", "surrogateescape"), "true")
    body = script.split("base64 -d > /tmp/arenad-model.patch <<'ARENAD_EOF'\n")[1]
    assert base64.b64decode(body.split("ARENAD_EOF\n")[0]) == raw


def _with_eval_script(lsb: LocalSwebench) -> InstanceSpec:
    """The instance as a dataset that carries its own grading columns would give it: the
    harness's eval script (reset the test files, apply test_patch, run the tests between
    the markers under `set -x`, reset again) and the parser's registry name."""
    instance = lsb.instance(IID)
    base = instance.base_commit
    test_patch = lsb.rows[IID]["test_patch"]
    eval_script = "\n".join(
        [
            "#!/bin/bash",
            "set -uxo pipefail",
            "cd /testbed",
            f"git checkout {base} tests/test_stats.py",
            "git apply -v - <<'EOF_114329324912'",
            test_patch.rstrip("\n"),
            "EOF_114329324912",
            ": '>>>>> Start Test Output'",
            TEST_CMD,
            ": '>>>>> End Test Output'",
            f"git checkout {base} tests/test_stats.py",
        ]
    )
    extra = {**instance.extra, "eval_script": eval_script, "log_parser": "parse_log_pytest"}
    return msgspec.structs.replace(instance, extra=extra)


@pytest.mark.parametrize(("patch", "resolved"), [("gold", True), ("wrong", False)])
async def test_the_rows_own_eval_script_grades_when_the_campaign_names_none(
    local_swebench: LocalSwebench,  # noqa: F811
    tmp_path: Path,
    patch: str,
    resolved: bool,
) -> None:
    text = local_swebench.rows[IID]["patch"] if patch == "gold" else WRONG_FIX
    (tmp_path / "p.patch").write_text(text)
    spec = JudgeSpec(kind="swebench", timeout_s=120)
    event = await run_judge(
        spec,
        attempt=1,
        workspace=tmp_path,
        run_dir=tmp_path / "run",
        instance=_with_eval_script(local_swebench),
        patch_path=str(tmp_path / "p.patch"),
    )
    doc = json.loads(event.verdict_json)
    assert event.resolved is resolved, doc
    assert doc["log_parser"] == "parse_log_pytest" and doc["test_exit_code"] == (
        0 if resolved else 1
    )
