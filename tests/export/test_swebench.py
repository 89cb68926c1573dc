from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from swebench.harness.utils import get_predictions_from_file

from tests.export.mixed_log import PATCH
from tests.export.support import export_ok, run_export, tree_bytes

pytestmark = pytest.mark.slow  # the demo's real opencode runs


def test_predictions_read_back_by_swebench(mixed_home: Path, tmp_path: Path) -> None:
    manifest = json.loads(export_ok(mixed_home, "swebench", tmp_path / "a"))
    files = manifest["files"]
    assert files == [
        "predictions/demo-1/SOLO/rep-0.jsonl",
        "predictions/demo-1/SOLO/rep-1.jsonl",
        "predictions/mixed/CMD/rep-0.jsonl",
        "predictions/mixed/SUP/rep-0.jsonl",
    ]
    read = {f: get_predictions_from_file(str(tmp_path / "a" / f), "unused", "test") for f in files}
    solo = read["predictions/demo-1/SOLO/rep-0.jsonl"]
    assert [p["instance_id"] for p in solo] == ["add-bug", "mul-bug"]
    assert all(p["model_name_or_path"] == "arenad/demo-1/SOLO" for p in solo)
    # The demo's agent fixes each bug: its patch, as the log kept it.
    assert "+    return a + b" in solo[0]["model_patch"]
    assert "+    return a * b" in solo[1]["model_patch"]
    cmd = read["predictions/mixed/CMD/rep-0.jsonl"]
    assert [p["instance_id"] for p in cmd] == ["inst-00000", "inst-00001", "inst-00003"]
    assert {p["model_patch"] for p in cmd} == {PATCH}
    sup = read["predictions/mixed/SUP/rep-0.jsonl"]
    assert [p["instance_id"] for p in sup] == ["inst-00002", "inst-00008"]
    for preds in read.values():  # one prediction per instance in a file
        assert len({p["instance_id"] for p in preds}) == len(preds)
        for p in preds:
            lineage = p["arenad_lineage"]
            assert lineage["head_seq"] == manifest["head"]["seq"]
            assert lineage["first_seq"] <= lineage["last_seq"] <= lineage["head_seq"]
    # What a predictions file cannot carry is named, never made up.
    assert manifest["omitted"] == 2
    omitted = [
        json.loads(line) for line in (tmp_path / "a" / "omitted.jsonl").read_text().splitlines()
    ]
    assert [(o["cell"], o["reason"]) for o in omitted] == [
        ("mixed:inst-00004:CMD:0", "the attempt never reached verification: no patch"),
        (
            "mixed:inst-00005:SUP:0",
            f"the log keeps only the first 20 of the patch's {len(PATCH)} bytes",
        ),
    ]


def test_same_bytes_twice_and_without_run_dirs(home_copy: Path, tmp_path: Path) -> None:
    export_ok(home_copy, "swebench", tmp_path / "a")
    export_ok(home_copy, "swebench", tmp_path / "b")
    first = tree_bytes(tmp_path / "a")
    assert tree_bytes(tmp_path / "b") == first
    shutil.rmtree(home_copy / "campaigns")
    export_ok(home_copy, "swebench", tmp_path / "a")  # replaces the earlier export
    assert tree_bytes(tmp_path / "a") == first


def test_filters(mixed_home: Path, tmp_path: Path) -> None:
    manifest = json.loads(
        export_ok(mixed_home, "swebench", tmp_path / "a", "--campaign", "mixed", "--arm", "CMD")
    )
    assert manifest["files"] == ["predictions/mixed/CMD/rep-0.jsonl"]
    assert manifest["campaigns"] == ["mixed"] and manifest["arms"] == ["CMD"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("nope",), "arenad: unknown export format 'nope'"),
        (("atif",), "arenad: export format atif is not implemented yet"),
        (("swebench", "--campaign", "ghost"), "arenad: --campaign ghost: no such campaign"),
        (("swebench", "--arm", "GHOST"), "arenad: --arm GHOST: no chosen cell has this arm"),
    ],
)
def test_bad_input_one_line_nothing_written(
    mixed_home: Path, tmp_path: Path, args: tuple[str, ...], message: str
) -> None:
    fmt, *rest = args
    done = run_export(mixed_home, fmt, tmp_path / "out", *rest)
    assert done.returncode == 2
    assert done.stderr.startswith(message) and done.stderr.count("\n") == 1
    assert list(tmp_path.iterdir()) == []


def test_refuses_to_replace_a_directory_it_did_not_write(mixed_home: Path, tmp_path: Path) -> None:
    keep = tmp_path / "mine"
    keep.mkdir()
    (keep / "notes.txt").write_text("mine")
    done = run_export(mixed_home, "swebench", keep)
    assert done.returncode == 2 and "not an arenad export" in done.stderr
    assert (keep / "notes.txt").read_text() == "mine"
