from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from inspect_ai.log import read_eval_log

from tests.export.support import export_ok, tree_bytes

pytestmark = pytest.mark.slow  # the demo's real opencode runs


def test_eval_logs_read_back_by_inspect(mixed_home: Path, tmp_path: Path) -> None:
    manifest = json.loads(export_ok(mixed_home, "inspect", tmp_path / "i"))
    assert manifest["files"] == [
        "logs/demo-1/SOLO.eval",
        "logs/mixed/CMD.eval",
        "logs/mixed/SUP.eval",
    ]
    logs = {f: read_eval_log(str(tmp_path / "i" / f)) for f in manifest["files"]}
    solo = logs["logs/demo-1/SOLO.eval"]
    assert solo.status == "success" and solo.eval.task == "demo-1/SOLO"
    assert solo.samples is not None
    assert sorted((s.id, s.epoch) for s in solo.samples) == [
        ("add-bug", 1),
        ("add-bug", 2),
        ("mul-bug", 1),
        ("mul-bug", 2),
    ]
    # Messages from the real opencode transcripts, with their tool calls.
    for s in solo.samples:
        assert s.messages and any(m.role == "assistant" and m.tool_calls for m in s.messages)
        assert s.error is None
    sup = logs["logs/mixed/SUP.eval"]
    assert sup.samples is not None
    for s in sup.samples:  # the brain is a gap: an errored sample, its workers named
        assert s.messages == [] and s.error is not None and s.metadata["workers"]
    cmd = logs["logs/mixed/CMD.eval"]
    assert cmd.samples is not None
    by_id = {s.id: s for s in cmd.samples}
    assert by_id["inst-00004"].error is not None  # failed before verification
    assert by_id["inst-00004"].scores is None  # no verdict: no score, never a 0
    assert by_id["inst-00000"].scores is not None
    assert by_id["inst-00000"].scores["verdict"].value == 1.0  # judged resolved
    for log in logs.values():
        assert log.samples is not None
        for s in log.samples:
            assert s.metadata["arenad_lineage"]["head_seq"] == manifest["head"]["seq"]


def test_same_bytes_twice_and_without_run_dirs(home_copy: Path, tmp_path: Path) -> None:
    export_ok(home_copy, "inspect", tmp_path / "a")
    export_ok(home_copy, "inspect", tmp_path / "b")
    first = tree_bytes(tmp_path / "a")
    assert tree_bytes(tmp_path / "b") == first
    shutil.rmtree(home_copy / "campaigns")
    export_ok(home_copy, "inspect", tmp_path / "a")
    assert tree_bytes(tmp_path / "a") == first
