"""The agent line's ``cost`` carries the gateway's figures beside the agent store's, and a
disagreement beyond rounding is a labeled field (``cost.mismatch``), never one silently."""

from __future__ import annotations

import json
from typing import Any

from arenad.ledger.project import new_stats, project_cell
from events import cell as ev
from events.base import Event, Recorded
from events.ingest import LineIngested
from tests.events.samples import make_spec
from tests.ledger.test_project import T0, _run_events

SPEC = make_spec(instance_id="bug-1", arm="SOLO")


def _call(n: int, **fields: Any) -> dict[str, Any]:
    call: dict[str, Any] = {
        "call": f"c{n}",
        "request": {"model": "fixer"},
        "upstream": {"status": 200},
        "usage": {"input": 800, "output": 43, "reasoning": 7, "cache_read": 200, "cache_write": 0},
        "cost_usd": 0.003,
        "priced": True,
        "latency_ms": 12.5,
    }
    call.update(fields)
    return call


def _line(spend: ev.SpendFigures, calls: list[dict[str, Any]]) -> dict[str, Any]:
    cell: list[Event] = [ev.CellSubmitted(spec=SPEC), *_run_events("/r", spend=spend)]
    records = [
        Recorded(i, f"cell/{SPEC.cell_id}", i, "x", 1, T0 + i, e) for i, e in enumerate(cell)
    ]
    for j, call in enumerate(calls):
        raw = json.dumps(call)
        e = LineIngested(
            source="gateway",
            path="calls.jsonl",
            offset=j * 1000,
            length=len(raw) + 1,
            raw=raw,
            kind="gateway.call",
        )
        records.append(
            Recorded(100 + j, f"ingest/{SPEC.cell_id}/1", j, "ingest.line", 1, T0 + 50 + j, e)
        )
    [line] = project_cell(SPEC.cell_id, records, "run", new_stats())
    return line


AGREE = ev.SpendFigures(
    sessions=1,
    tokens_in=1600,
    tokens_out=86,
    tokens_reasoning=14,
    cache_read=400,
    cache_write=0,
    cost_usd=0.006000000000000001,  # the float sum opencode keeps
)


def test_the_gateway_figures_sit_beside_the_store_and_agree() -> None:
    cost = _line(AGREE, [_call(1), _call(2)])["cost"]
    assert cost["usd"] == AGREE.cost_usd and cost["tokens_in"] == 1600
    assert cost["llm_call_count"] == 2
    assert cost["gateway"] == {
        "usd": 0.006,
        "tokens_in": 1600,
        "tokens_out": 86,
        "tokens_reasoning": 14,
        "cache_read": 400,
        "cache_write": 0,
        "calls": 2,
        "answered": 2,
        "refused": 0,
        "failed": 0,
    }
    assert cost["mismatch"] == []


def test_a_disagreement_beyond_rounding_is_labeled_not_resolved() -> None:
    spend = ev.SpendFigures(sessions=1, tokens_in=1500, tokens_out=86, cost_usd=0.0055)
    cost = _line(spend, [_call(1), _call(2)])["cost"]
    # Both figures stay on the line; the fields that differ are named.
    assert (cost["usd"], cost["gateway"]["usd"]) == (0.0055, 0.006)
    assert (cost["tokens_in"], cost["gateway"]["tokens_in"]) == (1500, 1600)
    assert cost["mismatch"] == ["usd", "tokens_in"]


def test_refused_and_failed_calls_spend_nothing_and_unknown_usage_is_null() -> None:
    calls = [
        _call(1),
        _call(2, upstream={"status": 429}, usage=None, cost_usd=None),
        _call(3, refused="budget", upstream={}, usage=None, cost_usd=None),
    ]
    gateway = _line(AGREE, calls)["cost"]["gateway"]
    assert (gateway["answered"], gateway["failed"], gateway["refused"]) == (1, 1, 1)
    assert gateway["tokens_in"] == 800 and gateway["usd"] == 0.003
    # An answered call without a price: the gateway's usd is unknown, not a smaller sum,
    # and an unknown figure is no disagreement (both sides are shown).
    unpriced = _line(AGREE, [_call(1), _call(2, cost_usd=None, priced=False)])["cost"]
    assert unpriced["gateway"]["usd"] is None
    assert "usd" not in unpriced["mismatch"]


def test_a_line_without_gateway_records_is_unchanged() -> None:
    cost = _line(AGREE, [])["cost"]
    assert "gateway" not in cost and "mismatch" not in cost and "llm_call_count" not in cost
