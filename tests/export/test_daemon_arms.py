"""Every export of a log the daemon wrote for solo (real opencode), supervisor (the
stand-in driver) and command arms: read back by each format's own reader, with the
ledger's counts, the same bytes twice and after the run dirs are deleted."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import datasets
import pytest
from google.protobuf import json_format
from inspect_ai.log import read_eval_log
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from swebench.harness.utils import get_predictions_from_file

from tests.export.support import ARENAD, export_ok, tree_bytes
from tests.export.test_otel import _hex_ids_to_base64

pytestmark = pytest.mark.slow  # real opencode, a real daemon


def _ledger(home: Path, out: Path) -> list[dict[str, Any]]:
    subprocess.run(
        [ARENAD, "--home", str(home), "project-ledger", str(out)], check=True, capture_output=True
    )
    return [json.loads(line) for line in out.read_text().splitlines()]


def test_every_format_read_back(daemon_home: Path, tmp_path: Path) -> None:
    ledger = _ledger(daemon_home, tmp_path / "ledger.jsonl")
    roles = {line["role"] for line in ledger}
    assert {"agent", "supervisor"} <= roles
    arms = {line["policy"]["harness"] for line in ledger}
    assert {"opencode", "pi-loops"} <= arms and any(a.startswith("command:") for a in arms)
    cells = {
        (line["task"]["instance_id"], line["task"]["rep"], line["run_id"])
        for line in ledger
        if line["role"] != "worker"
    }

    sw = json.loads(export_ok(daemon_home, "swebench", tmp_path / "sw"))
    preds = [
        p
        for f in sw["files"]
        for p in get_predictions_from_file(str(tmp_path / "sw" / f), "unused", "test")
    ]
    assert len(preds) + sw["omitted"] == len(cells)
    cmd = [p for p in preds if p["model_name_or_path"] == "arenad/cmd/CMD"]
    assert len(cmd) == 2 and all("+b" in p["model_patch"] for p in cmd)

    for fmt in ("hf-sft", "hf-rl"):
        m = json.loads(export_ok(daemon_home, fmt, tmp_path / fmt))
        ds = datasets.load_dataset(
            "parquet",
            data_files={"train": [str(tmp_path / fmt / f) for f in m["files"]]},
            split="train",
            cache_dir=str(tmp_path / "hf-cache"),
        )
        assert isinstance(ds, datasets.Dataset)
        assert ds.num_rows == len(ledger)
        assert ds["reward"] == [line["outcome"]["reward"] for line in ledger]

    ot = json.loads(export_ok(daemon_home, "otel", tmp_path / "ot"))
    spans = 0
    for text in (tmp_path / "ot" / "traces.jsonl").read_text().splitlines():
        request = ExportTraceServiceRequest()
        json_format.Parse(json.dumps(_hex_ids_to_base64(json.loads(text))), request)
        spans += sum(len(ss.spans) for rs in request.resource_spans for ss in rs.scope_spans)
    assert spans == ot["spans"] >= len(ledger)

    ins = json.loads(export_ok(daemon_home, "inspect", tmp_path / "ins"))
    samples = 0
    for f in ins["files"]:
        log = read_eval_log(str(tmp_path / "ins" / f))
        assert log.samples is not None
        samples += len(log.samples)
    assert samples == len(cells)


@pytest.mark.parametrize("fmt", ["swebench", "inspect", "hf-sft", "hf-rl", "otel"])
def test_same_bytes_twice_and_without_run_dirs(daemon_home: Path, tmp_path: Path, fmt: str) -> None:
    home = tmp_path / "h"
    shutil.copytree(daemon_home, home, symlinks=True)
    export_ok(home, fmt, tmp_path / "a")
    export_ok(home, fmt, tmp_path / "b")
    first = tree_bytes(tmp_path / "a")
    assert tree_bytes(tmp_path / "b") == first
    shutil.rmtree(home / "campaigns")
    export_ok(home, fmt, tmp_path / "a")
    assert tree_bytes(tmp_path / "a") == first
