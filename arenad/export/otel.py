"""OpenTelemetry traces: an OTLP/JSON file (``traces.jsonl``, one
``ExportTraceServiceRequest`` a line, one line per cell, as the collector's file exporter
writes and its ``otlpjsonfile`` receiver reads), spans named by the GenAI semantic
conventions:

- each ledger line is an ``invoke_agent`` span (a cell's attempt; a supervisor's worker is
  a child of the supervisor's span), with its model, tokens, cost and, when the attempt
  failed or its transcript is a gap, an error status saying why;
- each assistant turn of its transcript is a ``chat`` span, and each tool call in it an
  ``execute_tool`` span, children of the agent's span;
- the verdict is a ``gen_ai.evaluation.result`` event on the agent's span (a line with no
  reward has none: no score is made up).

Ids are derived, not drawn: the trace id is the first 16 bytes of SHA-256 over
``cell/attempt``, a span id the first 8 over the line's rollout id (and the turn or the
call), so the same log gives the same bytes. Ids are hex, as OTLP/JSON wants (not
protobuf JSON's base64). Times are the run's start and end as the log recorded them; the
ledger keeps no time per model call, so a turn's span spans the run (documented, not
invented).
"""

from __future__ import annotations

import hashlib
from typing import IO, Any

from arenad.chat import decoded_messages
from arenad.export.output import ExportDir
from arenad.export.source import ExportCell, Head, LineAttempt
from arenad.js import js_date_parse, js_stringify_bytes

__all__ = ["OtelWriter"]

SPAN_KIND_INTERNAL = 1
SPAN_KIND_CLIENT = 3
STATUS_OK = 1
STATUS_ERROR = 2


def _id(text: str, size: int) -> str:
    return hashlib.sha256(text.encode()).digest()[:size].hex()


def _attr(key: str, value: Any) -> dict[str, Any] | None:
    if value is None:
        return None
    if isinstance(value, bool):
        v: dict[str, Any] = {"boolValue": value}
    elif isinstance(value, int):
        v = {"intValue": str(value)}
    elif isinstance(value, float):
        v = {"doubleValue": value}
    else:
        v = {"stringValue": str(value)}
    return {"key": key, "value": v}


def _attrs(**pairs: Any) -> list[dict[str, Any]]:
    out = []
    for key, value in pairs.items():
        a = _attr(key.replace("__", "."), value)
        if a is not None:
            out.append(a)
    return out


def _count(v: Any) -> int | None:
    """A token count as OTLP's int (the ledger's numbers may be integral floats)."""
    return int(v) if isinstance(v, int | float) and not isinstance(v, bool) else None


def _ns(ms: int) -> str:
    return str(ms * 1_000_000)


class OtelWriter:
    name = "otel"

    def __init__(self, out: ExportDir, head: Head) -> None:
        self.file: IO[bytes] = out.open("traces.jsonl")
        self.records = 0
        self.spans = 0

    def _times(self, cell: ExportCell, la: LineAttempt) -> tuple[str, str]:
        start, end = cell.run_times.get(la.attempt, (None, None))
        captured = js_date_parse(la.line["provenance"]["captured_at"])
        fallback = int(captured) if captured is not None else 0
        end_ms = end if end is not None else fallback
        start_ms = start if start is not None else end_ms
        return _ns(start_ms), _ns(end_ms)

    def _line_spans(
        self, cell: ExportCell, la: LineAttempt, parents: dict[int, str]
    ) -> list[dict[str, Any]]:
        line = la.line
        spec = cell.spec
        trace_id = _id(f"{cell.cell_id}/{la.attempt}", 16)
        span_id = _id(line["rollout_id"], 8)
        start, end = self._times(cell, la)
        outcome = line["outcome"]
        cost = line["cost"]
        policy = line["policy"]
        gap = line["provenance"].get("gap")
        error = outcome["error"]
        lineage = la.lineage
        span: dict[str, Any] = {
            "traceId": trace_id,
            "spanId": span_id,
        }
        if line["role"] == "worker" and la.attempt in parents:
            span["parentSpanId"] = parents[la.attempt]
        else:
            parents[la.attempt] = span_id
        span |= {
            "name": f"invoke_agent {spec.arm.name}",
            "kind": SPAN_KIND_INTERNAL,
            "startTimeUnixNano": start,
            "endTimeUnixNano": end,
            "attributes": _attrs(
                gen_ai__operation__name="invoke_agent",
                gen_ai__agent__name=spec.arm.name,
                gen_ai__agent__id=line["rollout_id"],
                gen_ai__request__model=policy["model"],
                gen_ai__provider__name=policy["provider"],
                gen_ai__usage__input_tokens=_count(cost["tokens_in"]),
                gen_ai__usage__output_tokens=_count(cost["tokens_out"]),
                arenad__role=line["role"],
                arenad__harness=policy["harness"],
                arenad__cost__usd=float(cost["usd"]) if cost["usd"] is not None else None,
                arenad__cell=cell.cell_id,
                arenad__attempt=la.attempt,
                arenad__instance_id=line["task"]["instance_id"],
                arenad__split=line["task"]["split"],
                arenad__gap=gap,
                arenad__lineage__first_seq=lineage.first_seq,
                arenad__lineage__last_seq=lineage.last_seq,
                arenad__lineage__head_seq=lineage.head_seq,
                arenad__lineage__head_hash=lineage.head_hash,
            ),
        }
        reward = outcome["reward"]
        if isinstance(reward, int | float) and not isinstance(reward, bool):
            resolved = outcome["metrics"].get("resolved")
            span["events"] = [
                {
                    "timeUnixNano": end,
                    "name": "gen_ai.evaluation.result",
                    "attributes": _attrs(
                        gen_ai__evaluation__name=outcome["reward_source"],
                        gen_ai__evaluation__score__value=float(reward),
                        gen_ai__evaluation__score__label=(
                            None
                            if not isinstance(resolved, bool)
                            else ("resolved" if resolved else "unresolved")
                        ),
                    ),
                }
            ]
        if error is not None or gap is not None:
            span["status"] = {"code": STATUS_ERROR, "message": str(error or gap)}
        else:
            span["status"] = {"code": STATUS_OK}
        spans = [span]
        for i, m in enumerate(decoded_messages(line["messages"])):
            if m.get("role") != "assistant":
                continue
            spans.append(
                {
                    "traceId": trace_id,
                    "spanId": _id(f"{line['rollout_id']}/turn/{i}", 8),
                    "parentSpanId": span_id,
                    "name": f"chat {policy['model']}" if policy["model"] else "chat",
                    "kind": SPAN_KIND_CLIENT,
                    "startTimeUnixNano": start,
                    "endTimeUnixNano": end,
                    "attributes": _attrs(
                        gen_ai__operation__name="chat",
                        gen_ai__request__model=policy["model"],
                        gen_ai__provider__name=policy["provider"],
                        arenad__message_index=i,
                    ),
                }
            )
            for j, call in enumerate(m.get("tool_calls") or ()):
                name = call["function"]["name"]
                spans.append(
                    {
                        "traceId": trace_id,
                        "spanId": _id(f"{line['rollout_id']}/turn/{i}/call/{j}", 8),
                        "parentSpanId": span_id,
                        "name": f"execute_tool {name}",
                        "kind": SPAN_KIND_INTERNAL,
                        "startTimeUnixNano": start,
                        "endTimeUnixNano": end,
                        "attributes": _attrs(
                            gen_ai__operation__name="execute_tool",
                            gen_ai__tool__name=name,
                            gen_ai__tool__call__id=call["id"],
                            gen_ai__tool__type="function",
                            arenad__message_index=i,
                        ),
                    }
                )
        return spans

    def add(self, cell: ExportCell) -> None:
        if not cell.lines:
            return
        parents: dict[int, str] = {}
        spans = [s for la in cell.lines for s in self._line_spans(cell, la, parents)]
        request = {
            "resourceSpans": [
                {
                    "resource": {
                        "attributes": _attrs(
                            service__name="arenad",
                            arenad__campaign=cell.spec.campaign,
                        )
                    },
                    "scopeSpans": [
                        {"scope": {"name": "arenad.export", "version": "1"}, "spans": spans}
                    ],
                }
            ]
        }
        self.file.write(js_stringify_bytes(request) + b"\n")
        self.records += len(cell.lines)
        self.spans += len(spans)

    def finish(self) -> dict[str, Any]:
        self.file.close()
        return {"records": self.records, "spans": self.spans, "files": ["traces.jsonl"]}
