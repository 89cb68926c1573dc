"""The [judge] kind = "swebench" keys: checked at submit, naming the file and the key."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from arenad.campaign import load_campaign
from arenad.errors import CampaignError
from tests.campaign.test_load import arenad, write

ROW = {
    "instance_id": "arenad__textkit-9",
    "repo": "arenad/textkit",
    "base_commit": "0" * 40,
    "problem_statement": "median is wrong",
    "test_patch": "--- a/tests/test_x.py\n+++ b/tests/test_x.py\n@@ -1 +1 @@\n-a\n+b\n",
    "FAIL_TO_PASS": '["tests/test_x.py::test_a"]',
    "PASS_TO_PASS": "[]",
    "version": "1.0",
}
ARM = '[[arms]]\nname = "CMD"\nkind = "command"\nargv = ["true"]\nuses_model = false\n'


def campaign(tmp_path: Path, judge: str, row: dict[str, object] = ROW) -> Path:
    (tmp_path / "rows.jsonl").write_text(json.dumps(row) + "\n")
    return write(
        tmp_path,
        'name = "sw"\ninstances_file = "rows.jsonl"\nverify_template = "true"\n'
        f'[materializer]\nkind = "image"\n[judge]\n{judge}\n{ARM}',
    )


GOOD = 'kind = "swebench"\ntest_cmd = "python3 -m pytest -rA"\nlog_parser = "pytest"'


def test_a_swebench_judge_goes_into_every_cell(tmp_path: Path) -> None:
    loaded = load_campaign(campaign(tmp_path, GOOD + "\nmemory_mb = 1024\ncpus = 1.5"))
    (cell,) = loaded.cells
    assert cell.judge is not None and cell.judge.kind == "swebench"
    assert (cell.judge.test_cmd, cell.judge.log_parser) == ("python3 -m pytest -rA", "pytest")
    assert (cell.judge.memory_mb, cell.judge.pids, cell.judge.cpus) == (1024, 4096, 1.5)
    # The image the cells need, for submit to check, named as SWE-bench names it.
    assert loaded.images == {
        "swebench/sweb.eval.x86_64.arenad_1776_textkit-9:latest": "arenad__textkit-9"
    }


def test_the_rows_own_grading_columns_stand_in_for_the_keys(tmp_path: Path) -> None:
    row = {**ROW, "eval_script": "cd /testbed && pytest", "log_parser": "parse_log_pytest"}
    (cell,) = load_campaign(campaign(tmp_path, 'kind = "swebench"', row)).cells
    assert cell.judge is not None and cell.judge.test_cmd is None
    assert cell.instance.extra["eval_script"] == "cd /testbed && pytest"


@pytest.mark.parametrize(
    ("judge", "row", "expected"),
    [
        (
            'kind = "swebench"\nlog_parser = "pytest"',
            {**ROW, "log_parser": "x"},
            "no eval_script column, and [judge] names no test_cmd",
        ),
        (
            'kind = "swebench"\ntest_cmd = "x"',
            {**ROW, "eval_script": "x"},
            "no log_parser column, and [judge] names no log_parser",
        ),
        (
            'kind = "swebench"',
            {**ROW, "eval_script": "x", "log_parser": "nosuch"},
            "log_parser: swebench has no log parser 'nosuch'",
        ),
        (GOOD.replace('"pytest"', '"nosuch"'), ROW, "swebench has no log parser 'nosuch'"),
        (GOOD + '\ncommand = "echo {}"', ROW, '[judge] command is for kind = "command"'),
        ('command = "echo {}"\ntest_cmd = "x"', ROW, '[judge] test_cmd is for kind = "swebench"'),
        ('kind = "command"', ROW, "[judge] command is required"),
        (GOOD + "\nmemory_mb = 1", ROW, "[judge] memory_mb must be at least 16"),
        (GOOD, {k: v for k, v in ROW.items() if k != "test_patch"}, "test_patch must be"),
        (GOOD, {**ROW, "FAIL_TO_PASS": "[1"}, "FAIL_TO_PASS is not a JSON list"),
        (GOOD, {k: v for k, v in ROW.items() if k != "PASS_TO_PASS"}, "PASS_TO_PASS is missing"),
    ],
)
def test_bad_swebench_judges_say_what_and_where(
    tmp_path: Path, judge: str, row: dict[str, object], expected: str
) -> None:
    path = campaign(tmp_path, judge, row)
    with pytest.raises(CampaignError) as err:
        load_campaign(path)
    # A key of the file names the file; a column of a row names the row (file and line).
    where = f"{tmp_path / 'rows.jsonl'}:1: instance" if row is not ROW else str(path)
    assert expected in str(err.value) and str(err.value).startswith(where), err.value


def test_a_bad_swebench_judge_is_exit_2_with_one_line(tmp_path: Path) -> None:
    path = campaign(tmp_path, 'kind = "swebench"\nlog_parser = "pytest"')
    assert arenad(tmp_path / "home", "init").returncode == 0
    done = arenad(tmp_path / "home", "submit", str(path))
    assert done.returncode == 2
    assert done.stderr.strip().count("\n") == 0 and "names no test_cmd" in done.stderr
