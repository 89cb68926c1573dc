from __future__ import annotations

import copy
import json
import os
import stat
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest

from arenad.js import js_stringify_bytes
from arenad.ledger.rollout import (
    GATE_CHECK_IDS,
    ROLLOUT_ID_NAMESPACE,
    ROLLOUT_SCHEMA,
    InvalidRolloutLine,
    assert_minted,
    assert_reward_gate,
    assert_rollout_line,
    gate_errors,
    gate_gamed_outcome,
    iso_ms,
    js_round,
    rollout_id,
    serialize_ledger,
    serialize_rollout_line,
    validate_rollout_line,
)
from arenad.ledger.service import write_ledger_atomically

CAPTURED_AT = iso_ms(1787393472123)


def make_line(role: str = "agent", **over: Any) -> dict[str, Any]:
    """A valid line in the declaration order; ``over`` replaces top-level keys."""
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": "fix the bug"},
        {
            "role": "assistant",
            "content": None,
            "reasoning_content": "look first",
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "read", "arguments": '{"filePath":"a.py"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "name": "read", "content": "x = 1"},
        {"role": "assistant", "content": "done"},
    ]
    line: dict[str, Any] = {
        "schema": ROLLOUT_SCHEMA,
        "rollout_id": rollout_id("run-1", role, "cell-a", 0),
        "parent_rollout_id": None,
        "run_id": "run-1",
        "experiment_id": None,
        "candidate_id": "baseline",
        "generation": -1,
        "candidate_index": -1,
        "role": role,
        "task": {
            "suite": "swe-bench-verified",
            "instance_id": "astropy__astropy-13033",
            "split": "search",
            "seed": None,
            "rep": 0,
        },
        "policy": {
            "harness": "opencode",
            "harness_version": "1.18.33",
            "model": "mock",
            "provider": "local",
            "profile_commit": None,
            "sampling": None,
        },
        "messages": messages,
        "tool_defs": [],
        "outcome": {
            "reward": 1,
            "realness_gated": False,
            "reward_source": "swe-arena-official-judge",
            "verdict": {"resolved": True},
            "metrics": {"patch_lines": 3},
            "is_completed": True,
            "is_truncated": False,
            "error": None,
        },
        "cost": {
            "usd": 0.00642,
            "tokens_in": 1600,
            "tokens_out": 86,
            "tokens_reasoning": 14,
            "cache_read": 400,
            "cache_write": 0,
            "wall_s": js_round(1.9),
        },
        "artifacts": {"patch_path": None, "run_dir": "/runs/a", "transcript_ref": "opencode:ses"},
        "provenance": {"captured_at": CAPTURED_AT, "capture": "mint"},
    }
    line.update(over)
    return line


def gap_line(role: str) -> dict[str, Any]:
    line = make_line(role, messages=[])
    line["provenance"]["gap"] = "supervisor brain transcript not persisted"
    line["outcome"]["verdict"] = None
    return line


def proposer_line() -> dict[str, Any]:
    line = make_line("proposer")
    line["task"] = {
        "suite": "swe-arena-proposer",
        "instance_id": "gen0-cand1",
        "split": "search",
        "seed": None,
        "rep": 1,
    }
    line["policy"]["provider"] = None
    line["outcome"]["reward"] = 0.5
    line["steps"] = [{"kind": "llm", "name": "shot", "durationMs": 12.5, "llm_call_count": 2}]
    return line


VALID: dict[str, Callable[[], dict[str, Any]]] = {
    "agent": lambda: make_line("agent"),
    "supervisor": lambda: gap_line("supervisor"),
    "worker": lambda: make_line("worker", parent_rollout_id=rollout_id("sup")),
    "proposer": proposer_line,
    "judge": lambda: make_line("judge"),
    "analyst": lambda: make_line("analyst"),
}


@pytest.mark.parametrize("role", list(VALID))
def test_valid_lines_pass(role: str) -> None:
    line = VALID[role]()
    assert validate_rollout_line(line) == []
    assert_rollout_line(line)
    assert assert_minted(line) == line
    # A line must survive the trip through its own bytes.
    assert validate_rollout_line(json.loads(serialize_rollout_line(line))) == []


def test_an_encoded_transcript_is_vouched_for_and_written_as_it_is() -> None:
    line = make_line()
    encoded = msgspec.Raw(js_stringify_bytes(line["messages"]))
    assert validate_rollout_line(make_line(messages=encoded)) == []
    assert serialize_rollout_line(make_line(messages=encoded)) == serialize_rollout_line(line)


def test_unknown_keys_are_never_rejected() -> None:
    line = make_line(extra=1)
    line["outcome"]["other"] = [1]
    line["messages"][0]["x"] = True
    assert validate_rollout_line(line) == []


# ---------------------------------------------------------------- each rule


Mutation = Callable[[dict[str, Any]], None]


def _set(path: str, value: Any) -> Mutation:
    def mutate(line: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        obj: Any = line
        for key in parents:
            obj = obj[int(key)] if isinstance(obj, list) else obj[key]
        if isinstance(obj, list):
            obj[int(last)] = value
        else:
            obj[last] = value

    return mutate


def _del(path: str) -> Mutation:
    def mutate(line: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        obj: Any = line
        for key in parents:
            obj = obj[int(key)] if isinstance(obj, list) else obj[key]
        del obj[last]

    return mutate


VIOLATIONS: list[tuple[str, Mutation, str]] = [
    ("schema", _set("schema", "tangle.rollout.v2"), "schema: expected"),
    ("rollout_id empty", _set("rollout_id", ""), "rollout_id: expected non-empty string"),
    ("rollout_id missing", _del("rollout_id"), "rollout_id:"),
    ("parent", _set("parent_rollout_id", 3), "parent_rollout_id: expected string|null"),
    ("run_id", _set("run_id", None), "run_id: expected non-empty string"),
    ("experiment_id missing", _del("experiment_id"), "experiment_id:"),
    ("candidate_id missing", _del("candidate_id"), "candidate_id:"),
    ("candidate_id type", _set("candidate_id", 1), "candidate_id:"),
    ("generation float", _set("generation", 1.5), "generation: expected integer|null"),
    ("generation bool", _set("generation", True), "generation: expected integer|null"),
    ("candidate_index", _set("candidate_index", "0"), "candidate_index: expected integer|null"),
    ("role", _set("role", "trainer"), 'role: invalid role "trainer"'),
    ("task", _set("task", []), "task: not an object"),
    ("suite", _set("task.suite", ""), "task.suite: expected non-empty string"),
    ("instance", _del("task.instance_id"), "task.instance_id: expected non-empty string"),
    ("split train", _set("task.split", "train"), "task.split: expected one of"),
    ("seed", _set("task.seed", "1"), "task.seed: expected number|null"),
    ("rep float", _set("task.rep", 0.5), "task.rep: expected integer"),
    ("rep null", _set("task.rep", None), "task.rep: expected integer"),
    ("policy", _set("policy", None), "policy: not an object"),
    ("harness", _set("policy.harness", 1), "policy.harness: expected string|null"),
    ("h_version", _del("policy.harness_version"), "policy.harness_version:"),
    ("model", _del("policy.model"), "policy.model: expected string|null"),
    ("provider", _set("policy.provider", []), "policy.provider:"),
    ("commit", _del("policy.profile_commit"), "policy.profile_commit:"),
    ("sampling", _set("policy.sampling", [1]), "policy.sampling: expected object|null"),
    ("prompt_hash", _set("policy.prompt_hash", 5), "policy.prompt_hash: expected string|null"),
    ("config_hash", _set("policy.config_hash", 5), "policy.config_hash:"),
    ("cell id", _set("policy.agent_profile_cell_id", {}), "policy.agent_profile_cell_id:"),
    ("messages", _set("messages", {}), "messages: expected array"),
    ("message", _set("messages.0", "hi"), "messages[0]: not an object"),
    ("chat role", _set("messages.0.role", "developer"), "messages[0].role: invalid role"),
    ("content missing", _del("messages.0.content"), "messages[0].content:"),
    ("content type", _set("messages.0.content", ["a"]), "messages[0].content:"),
    ("reasoning", _set("messages.1.reasoning_content", None), "messages[1].reasoning_content:"),
    ("tool_call_id", _del("messages.2.tool_call_id"), "messages[2].tool_call_id: required on"),
    ("tool_call_id type", _set("messages.0.tool_call_id", 1), "messages[0].tool_call_id: must"),
    ("copied", _set("messages.0.is_copied_context", 1), "messages[0].is_copied_context:"),
    ("tool_calls", _set("messages.1.tool_calls", {}), "messages[1].tool_calls: must be an array"),
    ("call id", _set("messages.1.tool_calls.0.id", 7), "messages[1].tool_calls[0]: must be"),
    ("call type", _set("messages.1.tool_calls.0.type", "fn"), "messages[1].tool_calls[0]:"),
    (
        "call args",
        _set("messages.1.tool_calls.0.function.arguments", {"a": 1}),
        "messages[1].tool_calls[0].function: must be",
    ),
    ("call fn", _del("messages.1.tool_calls.0.function"), "messages[1].tool_calls[0].function:"),
    ("tool_defs", _del("tool_defs"), "tool_defs: expected array"),
    ("tool_def", _set("tool_defs", [{"type": "function", "function": {}}]), "tool_defs[0]:"),
    ("tool_def type", _set("tool_defs", [{"function": {"name": "x"}}]), "tool_defs[0]: must"),
    ("steps", _set("steps", {}), "steps: expected array when present"),
    ("step", _set("steps", [{"kind": "llm"}]), "steps[0]: must be {kind: string, name"),
    (
        "step count",
        _set("steps", [{"kind": "llm", "name": "x", "llm_call_count": 1.5}]),
        "steps[0].llm_call_count: expected integer",
    ),
    (
        "step ids",
        _set("steps", [{"kind": "llm", "name": "x", "prompt_token_ids": [1, 2.5]}]),
        "steps[0].prompt_token_ids: expected integer[]",
    ),
    (
        "step completion ids",
        _set("steps", [{"kind": "llm", "name": "x", "completion_token_ids": "1"}]),
        "steps[0].completion_token_ids:",
    ),
    (
        "logprobs",
        _set("steps", [{"kind": "llm", "name": "x", "logprobs": [-0.1, float("nan")]}]),
        "steps[0].logprobs: expected number[]",
    ),
    ("outcome", _set("outcome", "good"), "outcome: not an object"),
    ("reward", _set("outcome.reward", "1"), "outcome.reward: expected number|null"),
    ("reward bool", _set("outcome.reward", True), "outcome.reward: expected number|null"),
    ("reward_source", _del("outcome.reward_source"), "outcome.reward_source:"),
    ("verdict", _del("outcome.verdict"), "outcome.verdict: field required"),
    ("metrics", _set("outcome.metrics", None), "outcome.metrics: expected object"),
    ("completed", _set("outcome.is_completed", 1), "outcome.is_completed: expected boolean"),
    ("truncated", _del("outcome.is_truncated"), "outcome.is_truncated: expected boolean"),
    ("error", _set("outcome.error", {}), "outcome.error: expected string|null"),
    ("gated missing", _del("outcome.realness_gated"), "outcome.realness_gated: expected boolean"),
    ("screened", _set("outcome.realness_screened", None), "outcome.realness_screened:"),
    ("cost", _set("cost", None), "cost: not an object"),
    ("usd", _set("cost.usd", "0.1"), "cost.usd: expected number|null"),
    ("tokens_in", _del("cost.tokens_in"), "cost.tokens_in: expected number|null"),
    ("tokens_out", _del("cost.tokens_out"), "cost.tokens_out:"),
    ("tokens_reasoning", _del("cost.tokens_reasoning"), "cost.tokens_reasoning:"),
    ("cache_read", _del("cost.cache_read"), "cost.cache_read:"),
    ("cache_write", _set("cost.cache_write", False), "cost.cache_write:"),
    ("wall_s", _del("cost.wall_s"), "cost.wall_s:"),
    ("llm_call_count", _set("cost.llm_call_count", 0.5), "cost.llm_call_count: expected integer"),
    ("artifacts", _set("artifacts", []), "artifacts: not an object"),
    ("patch_path", _del("artifacts.patch_path"), "artifacts.patch_path: expected string|null"),
    ("run_dir", _set("artifacts.run_dir", 1), "artifacts.run_dir:"),
    ("transcript_ref", _del("artifacts.transcript_ref"), "artifacts.transcript_ref:"),
    ("provenance", _set("provenance", None), "provenance: not an object"),
    ("captured_at", _set("provenance.captured_at", "yesterday"), "provenance.captured_at:"),
    ("captured_at ms", _set("provenance.captured_at", 1787393472123), "provenance.captured_at:"),
    ("capture", _set("provenance.capture", "import"), "provenance.capture: expected one of"),
    ("gap type", _set("provenance.gap", 1), "provenance.gap: must be string"),
    ("gap required", _set("messages", []), "provenance.gap: required when messages is empty"),
    (
        "evidence",
        _set("provenance.gated_evidence", []),
        "provenance.gated_evidence: must be an object",
    ),
    (
        "evidence metrics",
        _set("provenance.gated_evidence", {"metrics": 1}),
        "provenance.gated_evidence.metrics: must be an object",
    ),
    (
        "gated positive",
        _set("outcome.realness_gated", True),
        "outcome.reward: 1 with outcome.realness_gated: true",
    ),
]


@pytest.mark.parametrize(("name", "mutate", "message"), VIOLATIONS, ids=[v[0] for v in VIOLATIONS])
def test_each_rule_fails_naming_its_field(name: str, mutate: Mutation, message: str) -> None:
    line = make_line()
    mutate(line)
    errors = validate_rollout_line(line)
    assert any(e.startswith(message) for e in errors), errors
    with pytest.raises(InvalidRolloutLine, match="invalid rollout line"):
        assert_rollout_line(line)


def test_not_an_object() -> None:
    assert validate_rollout_line([1]) == ["line: not an object"]


def test_a_tool_message_without_call_id_reports_both_rules() -> None:
    line = make_line()
    line["messages"][2]["tool_call_id"] = None
    errors = validate_rollout_line(line)
    assert "messages[2].tool_call_id: must be string when present" in errors
    assert 'messages[2].tool_call_id: required on role "tool"' in errors


def test_gap_is_allowed_on_a_full_line_and_numbers_may_be_anything_finite() -> None:
    line = make_line()
    line["provenance"]["gap"] = "imported from Harbor ATIF; no verdict"
    line["cost"].update(usd=-0.5, tokens_in=1.25, wall_s=None)
    line["task"]["seed"] = 0.5
    line["task"]["rep"] = 2.0  # Number.isInteger(2.0) holds
    assert validate_rollout_line(line) == []


# ---------------------------------------------------------------- gate checks


def gated(**outcome: Any) -> dict[str, Any]:
    line = make_line()
    line["outcome"].update(realness_gated=True, reward=0, metrics={}, verdict=None)
    line["outcome"].update(outcome)
    return line


@pytest.mark.parametrize(
    ("outcome", "fires"),
    [
        ({"reward": 0.95}, True),
        ({"reward": "0.95"}, True),
        ({"reward": float("nan")}, True),
        ({"reward": float("inf")}, True),
        ({"reward": 5e-324}, True),
        ({"reward": 0}, False),
        ({"reward": -1}, False),
        ({"reward": None}, False),
    ],
)
def test_reward_relationship(outcome: dict[str, Any], fires: bool) -> None:
    line = gated(**outcome)
    errors = gate_errors(line, "validate_rollout_line")
    assert bool(errors) == fires
    if fires:
        assert errors[0].startswith("outcome.reward: ")
        assert "outcome.realness_gated: true" in errors[0]


def test_reward_relationship_is_in_the_validator_and_the_others_are_not() -> None:
    evidence = gated(metrics={"layer.tests": 1}, verdict={"resolved": True})
    evidence["steps"] = [{"kind": "tool", "name": "edit", "reward": 0.9}]
    assert validate_rollout_line(evidence) == []
    unscreened = make_line()
    unscreened["outcome"]["realness_screened"] = False
    assert validate_rollout_line(unscreened) == []  # supervision-journal rows stay readable


@pytest.mark.parametrize(
    ("line", "check"),
    [
        (gated(metrics={"layer.tests": 1}), "outcome.metrics: populated"),
        (gated(metrics=0.95), "outcome.metrics: populated"),
        (gated(metrics=[]), "outcome.metrics: populated"),
        (gated(verdict=False), "outcome.verdict: populated"),
        (gated(verdict={"resolved": True}), "outcome.verdict: populated"),
    ],
)
def test_gated_evidence(line: dict[str, Any], check: str) -> None:
    errors = gate_errors(line)
    assert [e for e in errors if e.startswith(check)], errors
    with pytest.raises(InvalidRolloutLine, match=check.split(":")[0]):
        assert_reward_gate(line)


def test_empty_evidence_passes_every_door() -> None:
    outcomes: list[dict[str, Any]] = [{"metrics": {}, "verdict": None}, {"verdict": None}]
    for outcome in outcomes:
        line = gated(**outcome)
        if "metrics" not in outcome:
            del line["outcome"]["metrics"]
        assert [e for e in gate_errors(line) if "metrics" in e or "verdict" in e] == []


@pytest.mark.parametrize(
    "steps",
    [
        [{"kind": "tool", "name": "edit", "reward": 0.9}],
        [{"kind": "tool", "name": "edit"}, "not a step"],
        {"kind": "tool"},
    ],
)
def test_undeclared_step_payload(steps: Any) -> None:
    line = gated()
    line["steps"] = steps
    errors = gate_errors(line)
    assert len(errors) == 1 and errors[0].startswith("steps: carries fields")


def test_declared_step_keys_and_null_steps_are_clean() -> None:
    line = gated()
    line["steps"] = [
        {
            "kind": "llm",
            "name": "x",
            "input": "i",
            "output": "o",
            "status": "ok",
            "durationMs": 3,
            "llm_call_count": 1,
            "prompt_token_ids": [1],
            "completion_token_ids": [2],
            "logprobs": [-0.5],
        },
        None,
    ]
    assert gate_errors(line) == []
    ungated = make_line(steps=[{"kind": "llm", "name": "x", "reward": 1}])
    assert gate_errors(ungated) == []


@pytest.mark.parametrize(
    ("reward", "fires"), [(1, True), ("2", True), (0, False), (None, False), (-3, False)]
)
def test_unscreened_reward(reward: Any, fires: bool) -> None:
    line = make_line()
    line["outcome"].update(reward=reward, realness_gated=False, realness_screened=False)
    errors = gate_errors(line, "assert_minted")
    assert bool(errors) == fires
    if fires:
        assert "outcome.realness_screened: false" in errors[0]
        # A string reward is refused by the validator before the gate runs.
        match = "realness_screened" if reward == 1 else "expected number"
        with pytest.raises(InvalidRolloutLine, match=match):
            assert_minted(line)
        with pytest.raises(InvalidRolloutLine, match="realness_screened"):
            assert_reward_gate(line)


def test_checks_run_in_their_declared_order() -> None:
    line = gated(reward=0.9, metrics={"a": 1}, realness_screened=False)
    line["steps"] = [{"kind": "k", "name": "n", "score": 1}]
    errors = gate_errors(line)
    assert [e.split(":")[0] for e in errors] == [
        "outcome.reward",
        "outcome.metrics",
        "steps",
        "outcome.reward",
    ]
    assert len(GATE_CHECK_IDS) == 4
    with pytest.raises(InvalidRolloutLine, match=r"rollout .* — outcome.reward: 0.9 with"):
        assert_reward_gate(line)


def test_gate_gamed_outcome_moves_the_evidence_and_is_idempotent() -> None:
    line = gated(metrics={"layer.tests": 1}, verdict={"resolved": True})
    line["steps"] = [{"kind": "tool", "name": "edit", "reward": 0.9}, "raw"]
    line["provenance"]["gated_evidence"] = {"metrics": {"old": 1, "layer.tests": 0}}
    original = copy.deepcopy(line)

    repaired = gate_gamed_outcome(line)

    assert line == original  # not mutated
    assert list(repaired) == list(line)  # keys keep their positions
    assert repaired["outcome"]["metrics"] == {} and repaired["outcome"]["verdict"] is None
    assert list(repaired["outcome"]) == list(line["outcome"])
    assert repaired["steps"] == [{"kind": "tool", "name": "edit"}]
    assert list(repaired["provenance"]) == ["captured_at", "capture", "gated_evidence"]
    assert repaired["provenance"]["gated_evidence"] == {
        "metrics": {"old": 1, "layer.tests": 1},
        "verdict": {"resolved": True},
        "steps": [{"reward": 0.9}, {"step": "raw"}],
    }
    assert_reward_gate(repaired)
    assert validate_rollout_line(repaired) == []
    assert gate_gamed_outcome(repaired) == repaired
    assert serialize_rollout_line(assert_minted(repaired)) == serialize_rollout_line(repaired)


def test_assert_minted_repairs_what_the_validator_lets_through() -> None:
    line = gated(verdict={"resolved": True})
    line["steps"] = [{"kind": "tool", "name": "edit", "reward": 0.9}]
    with pytest.raises(InvalidRolloutLine):
        assert_reward_gate(line)
    minted = assert_minted(line)
    assert minted["provenance"]["gated_evidence"] == {
        "verdict": {"resolved": True},
        "steps": [{"reward": 0.9}],
    }
    assert_reward_gate(minted)


def test_a_clean_gated_line_is_returned_unchanged() -> None:
    line = gated()
    assert gate_gamed_outcome(line) is line
    ungated = make_line()
    assert gate_gamed_outcome(ungated) is ungated


# ---------------------------------------------------------------- bytes


def test_serialization_is_compact_ordered_and_js_shaped() -> None:
    line = make_line()
    line["cost"]["usd"] = 0.1 + 0.2
    line["cost"]["tokens_in"] = 1600.0
    line["cost"]["cache_write"] = -0.0
    line["outcome"]["metrics"] = {"big": 1e21, "small": 1e-7, "path": "a/b", "name": "é"}
    text = serialize_rollout_line(line)
    assert "\n" not in text and ": " not in text
    assert text.startswith(
        '{"schema":"tangle.rollout.v1","rollout_id":"' + line["rollout_id"] + '",'
        '"parent_rollout_id":null,"run_id":"run-1","experiment_id":null,'
        '"candidate_id":"baseline","generation":-1,"candidate_index":-1,"role":"agent",'
    )
    assert '"usd":0.30000000000000004,"tokens_in":1600,' in text
    assert '"cache_write":0,' in text
    assert '"metrics":{"big":1e+21,"small":1e-7,"path":"a/b","name":"é"}' in text
    top = list(json.loads(text))
    assert top == list(line)


def test_a_ledger_has_one_line_per_row_and_a_trailing_newline() -> None:
    assert serialize_ledger([]) == ""
    a, b = make_line(), gap_line("supervisor")
    assert serialize_ledger([a, b]) == (
        serialize_rollout_line(a) + "\n" + serialize_rollout_line(b) + "\n"
    )


# ---------------------------------------------------------------- ids


def test_rollout_ids_are_deterministic_uuid5() -> None:
    a = rollout_id("run-1", "worker", "cell", 0)
    assert a == rollout_id("run-1", "worker", "cell", 0)
    parsed = uuid.UUID(a)
    assert parsed.version == 5
    assert a == str(uuid.uuid5(ROLLOUT_ID_NAMESPACE, '["run-1","worker","cell",0]'))
    assert uuid.UUID("b761e035-a147-512d-9092-45dbea57e1f5") == ROLLOUT_ID_NAMESPACE
    assert len({rollout_id("a", "b"), rollout_id("a\x00b"), rollout_id("ab"), a}) == 4
    assert rollout_id(1) != rollout_id("1")
    assert rollout_id(None) != rollout_id("null")
    with pytest.raises(ValueError):
        rollout_id()
    with pytest.raises(TypeError):
        rollout_id(True)


# ---------------------------------------------------------------- the writer


@pytest.fixture
def ledger_dir(tmp_path: Path) -> Iterator[Path]:
    yield tmp_path / "out" / "deep"


def test_write_ledger_atomically(ledger_dir: Path) -> None:
    path = ledger_dir / "rollouts.jsonl"
    lines = [VALID[role]() for role in ("agent", "supervisor", "worker", "proposer")]
    assert write_ledger_atomically(path, iter(lines)) == 4
    data = path.read_bytes()
    assert data == serialize_ledger(lines).encode("utf-8")
    assert data.endswith(b"\n") and data.count(b"\n") == 4
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
    assert sorted(p.name for p in ledger_dir.iterdir()) == ["rollouts.jsonl"]
    read_back = [json.loads(raw) for raw in data.decode().splitlines()]
    assert [validate_rollout_line(x) for x in read_back] == [[], [], [], []]


def test_an_empty_ledger_is_an_empty_file(ledger_dir: Path) -> None:
    path = ledger_dir / "rollouts.jsonl"
    assert write_ledger_atomically(path, []) == 0
    assert path.read_bytes() == b""


def test_a_bad_line_leaves_the_old_ledger_untouched(ledger_dir: Path) -> None:
    path = ledger_dir / "rollouts.jsonl"
    write_ledger_atomically(path, [make_line()])
    os.chmod(path, 0o600)
    before = path.read_bytes()
    bad = make_line(role="trainer")

    def lines() -> Iterator[dict[str, Any]]:
        yield make_line()
        yield bad

    with pytest.raises(InvalidRolloutLine, match=r"rollout line \[1\]"):
        write_ledger_atomically(path, lines())
    assert path.read_bytes() == before
    assert sorted(p.name for p in ledger_dir.iterdir()) == ["rollouts.jsonl"]

    # A later good write keeps the file's mode.
    write_ledger_atomically(path, [make_line(), make_line("judge")])
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert path.read_bytes().count(b"\n") == 2


def test_lone_surrogates_still_write(ledger_dir: Path) -> None:
    path = ledger_dir / "rollouts.jsonl"
    line = make_line()
    line["messages"][0]["content"] = "broken \ud800 text"
    write_ledger_atomically(path, [line])
    assert b'"broken \\ud800 text"' in path.read_bytes()


def test_gate_gamed_outcome_spreads_like_js() -> None:
    line = gated(metrics=0.95)
    line["provenance"] = {
        "captured_at": CAPTURED_AT,
        "gated_evidence": {"verdict": "old", "metrics": {"kept": 1}},
        "capture": "mint",
    }
    repaired = gate_gamed_outcome(line)
    # An existing gated_evidence keeps its place; a primitive metrics spreads to nothing.
    assert list(repaired["provenance"]) == ["captured_at", "gated_evidence", "capture"]
    assert repaired["provenance"]["gated_evidence"] == {"metrics": {"kept": 1}, "verdict": "old"}
    listed = gate_gamed_outcome(gated(metrics=["a", "b"]))
    assert listed["provenance"]["gated_evidence"] == {"metrics": {"0": "a", "1": "b"}}
