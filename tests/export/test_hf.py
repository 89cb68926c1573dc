from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import datasets
import pytest

from tests.export.support import export_ok, tree_bytes

pytestmark = pytest.mark.slow  # the demo's real opencode runs


def _ledger(home: Path, tmp_path: Path) -> list[dict[str, Any]]:
    import subprocess

    from tests.export.support import ARENAD

    out = tmp_path / "ledger.jsonl"
    subprocess.run(
        [ARENAD, "--home", str(home), "project-ledger", str(out)], check=True, capture_output=True
    )
    return [json.loads(line) for line in out.read_text().splitlines()]


def _load(root: Path, files: list[str]) -> datasets.Dataset:
    ds = datasets.load_dataset(
        "parquet",
        data_files={"train": [str(root / f) for f in files]},
        split="train",
        cache_dir=str(root.parent / "hf-cache"),
    )
    assert isinstance(ds, datasets.Dataset)
    return ds


def test_sft_rows_are_the_ledger_lines(mixed_home: Path, tmp_path: Path) -> None:
    ledger = _ledger(mixed_home, tmp_path)
    manifest = json.loads(export_ok(mixed_home, "hf-sft", tmp_path / "sft"))
    ds = _load(tmp_path / "sft", manifest["files"])
    assert ds.num_rows == len(ledger) == manifest["records"]
    for row, line in zip(ds, ledger, strict=True):
        assert row["rollout_id"] == line["rollout_id"]
        assert row["role"] == line["role"]
        assert row["reward"] == line["outcome"]["reward"]
        gap = line["provenance"].get("gap")
        if line["messages"]:
            assert [m["role"] for m in row["messages"]] == [m["role"] for m in line["messages"]]
            assert [m["content"] for m in row["messages"]] == [
                m["content"] for m in line["messages"]
            ]
            calls = [
                c["function"]["name"] for m in line["messages"] for c in m.get("tool_calls", [])
            ]
            assert [t["function"]["name"] for t in row["tools"]] == list(dict.fromkeys(calls))
        else:  # a gap line is an errored row, never a made-up conversation
            assert row["messages"] == [] and row["has_error"] and row["error"] == gap
        assert row["lineage"]["rollout_id"] == line["rollout_id"]
        assert row["lineage"]["head_seq"] == manifest["head"]["seq"]
    # The demo's solo runs are real opencode transcripts with tool calls.
    solo = [r for r in ds if r["arm"] == "SOLO"]
    assert solo and all(r["messages"] and r["tools"] for r in solo)
    # The supervisor's brain is a gap in the ledger: an errored row here.
    sup = [r for r in ds if r["role"] == "supervisor"]
    assert sup and all(r["has_error"] and r["messages"] == [] for r in sup)


def test_rl_rows_in_verl_layout(mixed_home: Path, tmp_path: Path) -> None:
    ledger = _ledger(mixed_home, tmp_path)
    manifest = json.loads(export_ok(mixed_home, "hf-rl", tmp_path / "rl"))
    ds = _load(tmp_path / "rl", manifest["files"])
    assert ds.num_rows == len(ledger)
    assert set(ds.column_names) >= {
        "data_source",
        "prompt",
        "ability",
        "reward_model",
        "extra_info",
        "reward",
        "is_truncated",
        "has_error",
        "split",
    }
    for i, (row, line) in enumerate(zip(ds, ledger, strict=True)):
        assert row["data_source"] == line["task"]["suite"]
        assert row["prompt"][0]["role"] == "user" and row["prompt"][0]["content"]
        assert row["reward"] == line["outcome"]["reward"]  # null stays null, never 0
        assert row["is_truncated"] == line["outcome"]["is_truncated"]
        assert row["split"] == line["task"]["split"] == row["extra_info"]["split"]
        assert row["extra_info"]["index"] == i
        assert row["extra_info"]["rollout_id"] == line["rollout_id"]
        failed = line["outcome"]["error"] is not None or "gap" in line["provenance"]
        assert row["has_error"] == failed
    assert any(r["reward"] is None for r in ds) and any(r["reward"] == 1.0 for r in ds)


@pytest.mark.parametrize("fmt", ["hf-sft", "hf-rl"])
def test_same_bytes_twice_and_without_run_dirs(home_copy: Path, tmp_path: Path, fmt: str) -> None:
    export_ok(home_copy, fmt, tmp_path / "a")
    export_ok(home_copy, fmt, tmp_path / "b")
    first = tree_bytes(tmp_path / "a")
    assert tree_bytes(tmp_path / "b") == first
    shutil.rmtree(home_copy / "campaigns")
    export_ok(home_copy, fmt, tmp_path / "a")
    assert tree_bytes(tmp_path / "a") == first


def test_shards(mixed_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import asyncio

    from arenad.export import parquet
    from arenad.export.service import export
    from arenad.home import Home

    monkeypatch.setattr(parquet, "ROW_GROUP_ROWS", 2)
    monkeypatch.setattr(parquet, "SHARD_ROWS", 4)
    manifest = asyncio.run(export(Home(mixed_home), "hf-sft", tmp_path / "s"))
    n = manifest["records"]
    assert len(manifest["files"]) == -(-n // 4) > 1
    assert manifest["files"][-1].endswith(f"-of-{len(manifest['files']):05d}.parquet")
    assert _load(tmp_path / "s", manifest["files"]).num_rows == n
