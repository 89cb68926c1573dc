"""arenad.recovery.usage: the reference's parseOcUsage as a fold."""

from __future__ import annotations

import json
from typing import Any

import msgspec

from arenad.recovery.usage import fold_oc_usage, js_to_fixed_number, parse_oc_usage
from events.cell import SoloUsage


def _finish(inp: int, out: int, rea: int, cw: int, cr: int, total: int, cost: float) -> Any:
    return {
        "type": "step_finish",
        "sessionID": "ses_1",
        "part": {
            "type": "step-finish",
            "tokens": {
                "total": total,
                "input": inp,
                "output": out,
                "reasoning": rea,
                "cache": {"read": cr, "write": cw},
            },
            "cost": cost,
        },
    }


def test_sums_token_parts() -> None:
    stream = [
        {"type": "step_start", "part": {"type": "step-start"}},
        {"type": "text", "part": {"type": "text", "text": "hi"}},
        _finish(800, 43, 7, 0, 200, 1050, 0.00321),
        {"type": "tool_use", "part": {"type": "tool", "state": {"status": "completed"}}},
        _finish(100, 10, 0, 5, 900, 1010, 0.001),
    ]
    usage = fold_oc_usage(stream)
    assert usage == SoloUsage(
        steps=2,
        tokens_in=900,
        tokens_out=53,
        reasoning=7,
        cache_w=5,
        cache_r=1100,
        max_ctx=1050,
        oc_cost=0.00421,
        total_io=960,
    )
    assert msgspec.json.decode(msgspec.json.encode(usage), type=SoloUsage) == usage


def test_empty_stream() -> None:
    assert fold_oc_usage([]) == SoloUsage(
        steps=0,
        tokens_in=0,
        tokens_out=0,
        reasoning=0,
        cache_w=0,
        cache_r=0,
        max_ctx=0,
        oc_cost=0.0,
        total_io=0,
    )


def test_js_object_rules() -> None:
    stream: list[Any] = [
        "not an object",
        {"part": None},
        {"part": {"tokens": None}},
        {"part": [1, 2]},  # an array part has no .tokens: skipped
        # An array is typeof 'object' in JS: a step with every figure 0.
        {"part": {"tokens": [1]}},
        # Non-numbers count 0; booleans are not numbers; a missing cache is {}.
        {"part": {"tokens": {"input": "5", "output": True, "reasoning": 2}, "cost": "1"}},
    ]
    usage = fold_oc_usage(stream)
    assert usage.steps == 2
    assert usage.tokens_in == 0 and usage.tokens_out == 0 and usage.reasoning == 2
    assert usage.oc_cost == 0.0 and usage.total_io == 2


def test_cost_rounds_like_js_to_fixed() -> None:
    assert js_to_fixed_number(0.1 + 0.2) == 0.3
    assert js_to_fixed_number(1.23456789) == 1.234568
    # An exact binary tie: JS picks the larger n (0.007813); Python's format gives 0.007812.
    assert js_to_fixed_number(0.0078125) == 0.007813
    assert float(f"{0.0078125:.6f}") == 0.007812
    assert js_to_fixed_number(0.0000004) == 0.0
    usage = fold_oc_usage([_finish(1, 1, 0, 0, 0, 2, 0.0078125)])
    assert usage.oc_cost == 0.007813


def test_parse_text_like_the_seed() -> None:
    lines = [
        json.dumps(_finish(10, 1, 0, 0, 0, 11, 0.5)),
        "   " + json.dumps(_finish(20, 2, 1, 0, 0, 23, 0.25)) + "   ",
        "not json",
        "{broken",
        '{"part": {"tokens": {"input": NaN}}}',
        "",
    ]
    usage = parse_oc_usage("\n".join(lines))
    assert usage.steps == 2 and usage.tokens_in == 30 and usage.max_ctx == 23
    assert usage.oc_cost == 0.75 and usage.total_io == 34
    assert parse_oc_usage("\n".join(lines).encode()) == usage


def test_a_nan_or_infinity_literal_in_the_stream_is_not_json() -> None:
    """The opencode stream as JSON.parse reads it (finding 9): a line with a NaN or Infinity
    literal is dropped, even when the ingest kept it as text (a command arm's
    ``output = "text"``)."""
    from arenad.recovery.usage import stdout_objects
    from events.ingest import LineIngested

    def line(raw: str, offset: int) -> LineIngested:
        return LineIngested(source="stdout", path="oc.jsonl", offset=offset, length=1, raw=raw)

    good = '{"type":"step_finish","part":{"cost":0.5}}'
    lines = [
        line('{"type":"step_finish","part":{"cost":NaN}}', 0),
        line('{"type":"step_finish","part":{"cost":Infinity}}', 1),
        line(good, 2),
    ]
    assert stdout_objects(lines) == [json.loads(good)]
    assert parse_oc_usage('{"type":"step_finish","part":{"cost":NaN}}\n' + good) == (
        parse_oc_usage(good)
    )
