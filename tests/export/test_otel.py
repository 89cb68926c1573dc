from __future__ import annotations

import base64
import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from google.protobuf import json_format
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from tests.export.support import ARENAD, export_ok, tree_bytes

pytestmark = pytest.mark.slow  # the demo's real opencode runs

_IDS = ("traceId", "spanId", "parentSpanId")


def _hex_ids_to_base64(doc: Any) -> Any:
    """OTLP/JSON writes ids as hex; protobuf's JSON mapping reads bytes as base64: the
    translation the collector's own JSON unmarshaler makes."""
    if isinstance(doc, dict):
        return {
            k: (base64.b64encode(bytes.fromhex(v)).decode() if k in _IDS else _hex_ids_to_base64(v))
            for k, v in doc.items()
        }
    if isinstance(doc, list):
        return [_hex_ids_to_base64(v) for v in doc]
    return doc


def _ledger(home: Path, tmp_path: Path) -> list[dict[str, Any]]:
    out = tmp_path / "ledger.jsonl"
    subprocess.run(
        [ARENAD, "--home", str(home), "project-ledger", str(out)], check=True, capture_output=True
    )
    return [json.loads(line) for line in out.read_text().splitlines()]


def test_traces_read_back_by_opentelemetry_proto(mixed_home: Path, tmp_path: Path) -> None:
    ledger = _ledger(mixed_home, tmp_path)
    manifest = json.loads(export_ok(mixed_home, "otel", tmp_path / "o"))
    requests = []
    for text in (tmp_path / "o" / "traces.jsonl").read_text().splitlines():
        request = ExportTraceServiceRequest()
        json_format.Parse(json.dumps(_hex_ids_to_base64(json.loads(text))), request)
        requests.append(request)
    spans = [
        s for r in requests for rs in r.resource_spans for ss in rs.scope_spans for s in ss.spans
    ]
    assert len(spans) == manifest["spans"]

    def attrs(span: Any) -> dict[str, Any]:
        return {a.key: json_format.MessageToDict(a.value) for a in span.attributes}

    by_op: dict[str, list[Any]] = {}
    for s in spans:
        by_op.setdefault(attrs(s)["gen_ai.operation.name"]["stringValue"], []).append(s)
        assert len(s.trace_id) == 16 and len(s.span_id) == 8
    agents = by_op["invoke_agent"]
    assert [attrs(s)["gen_ai.agent.id"]["stringValue"] for s in agents] == [
        line["rollout_id"] for line in ledger
    ]
    assistant = [m for line in ledger for m in line["messages"] if m["role"] == "assistant"]
    assert len(by_op["chat"]) == len(assistant) > 0
    calls = [c for m in assistant for c in m.get("tool_calls", [])]
    assert [attrs(s)["gen_ai.tool.name"]["stringValue"] for s in by_op["execute_tool"]] == [
        c["function"]["name"] for c in calls
    ]
    # The verdict is an evaluation event where the ledger has a reward, and nowhere else.
    for span, line in zip(agents, ledger, strict=True):
        events = [e for e in span.events if e.name == "gen_ai.evaluation.result"]
        reward = line["outcome"]["reward"]
        if reward is None:
            assert events == []
        else:
            score = {a.key: a.value.double_value for a in events[0].attributes}
            assert score["gen_ai.evaluation.score.value"] == reward
        failed = line["outcome"]["error"] is not None or "gap" in line["provenance"]
        assert span.status.code == (2 if failed else 1)
    # Workers are children of their supervisor's span, in its trace.
    ids = {s.span_id: s for s in agents}
    workers = [s for s in agents if attrs(s)["arenad.role"]["stringValue"] == "worker"]
    assert workers
    for w in workers:
        parent = ids[w.parent_span_id]
        assert attrs(parent)["arenad.role"]["stringValue"] == "supervisor"
        assert parent.trace_id == w.trace_id


def test_same_bytes_twice_and_without_run_dirs(home_copy: Path, tmp_path: Path) -> None:
    export_ok(home_copy, "otel", tmp_path / "a")
    export_ok(home_copy, "otel", tmp_path / "b")
    first = tree_bytes(tmp_path / "a")
    assert tree_bytes(tmp_path / "b") == first
    shutil.rmtree(home_copy / "campaigns")
    export_ok(home_copy, "otel", tmp_path / "a")
    assert tree_bytes(tmp_path / "a") == first
