"""What the gateway records of one call (pure): the prompt chain, usage, cost, bounds."""

from __future__ import annotations

import json

from arenad.gateway import record


def test_only_messages_after_a_recorded_prefix_are_new() -> None:
    first = [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}]
    part, prompt_hash = record.request_part({"model": "m"}, first, set())
    assert part["prefix_len"] == 0 and part["new_messages"] == first
    assert part["prefix_hash"] == record.EMPTY_CHAIN
    second = [*first, {"role": "assistant", "content": "a"}, {"role": "tool", "content": "t"}]
    part2, prompt_hash2 = record.request_part({"model": "m"}, second, {prompt_hash})
    assert part2["prefix_len"] == 2 and part2["prefix_hash"] == prompt_hash
    assert part2["new_messages"] == second[2:]
    # The chain of the full prompt is the chain of the prefix extended by the new messages.
    assert record.chain(second)[-1] == prompt_hash2
    # A changed earlier message breaks the chain: everything is new again.
    edited = [{"role": "system", "content": "other"}, *second[1:]]
    part3, _ = record.request_part({}, edited, {prompt_hash, prompt_hash2})
    assert part3["prefix_len"] == 0


def test_a_record_past_the_bound_elides_and_labels_what_it_left_out() -> None:
    big = "x" * 5000
    entry = {
        "call": "c",
        "request": {"new_messages": [{"role": "user", "content": big}], "prompt_hash": "h"},
        "response": {"content": "short"},
        "usage": {"input": 1},
    }
    line = record.bounded(entry, 1000)
    assert len(line) <= 1000 and line.endswith(b"\n")
    out = json.loads(line)
    assert out["request"]["new_messages"] is None
    assert out["elided"]["request.new_messages"]["bytes"] > 5000
    assert out["usage"] == {"input": 1} and out["response"] == {"content": "short"}
    small = record.bounded({"a": 1}, 1000)
    assert json.loads(small) == {"a": 1}
