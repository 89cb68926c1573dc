"""The ``tangle.rollout.v1`` line: its validator, its gate checks, its bytes, its ids.

A line is a plain ``dict`` built in the declaration order (schema, rollout_id,
parent_rollout_id, run_id, experiment_id, candidate_id, generation, candidate_index,
role, task, policy, messages, tool_defs, steps?, outcome, cost, artifacts, provenance):
ledgers are compared byte for byte, and ``serialize_rollout_line`` writes keys in
insertion order exactly as JS ``JSON.stringify`` would.

Everything here is pure; the ledger file is written by ``arenad.ledger.service``.

Validation mirrors agent-eval's ``validateRolloutLine`` (one ``<dotted.path>: <what>``
message per defect; unknown keys are never rejected). A key that is absent is JS
``undefined``; a key holding ``None`` is JS ``null``. Numbers are ``int``/``float`` but
never ``bool``; "integer" means an ``int`` or an integral finite ``float``.

The gate checks (applied in this order):

1. ``reward-relationship`` — a line with ``realness_gated: true`` must carry a reward
   that is null or a number ≤ 0 (a positive number, NaN or a non-number fires).
2. ``gated-evidence`` — a gated line's ``outcome.metrics`` must be empty (absent, null
   or ``{}``; a primitive counts as populated) and ``outcome.verdict`` null/absent.
3. ``undeclared-step-payload`` — a gated line's steps may carry only the ten declared
   step keys, and each step must be an object (a null step is ignored).
4. ``unscreened-reward`` — ``realness_screened: false`` with a positive or unreadable
   reward fires, gated or not.

Policies: ``validate_rollout_line`` enforces check 1 only; ``assert_minted`` enforces 1
and 4 and repairs 2 and 3 with ``gate_gamed_outcome``; ``assert_reward_gate`` (the
strict mode) enforces all four.
"""

from __future__ import annotations

import functools
import hashlib
import math
import uuid
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Final, Literal

import msgspec

from arenad.chat import CheckedChatMessages
from arenad.errors import ArenadError
from arenad.js import (
    iso_ms,
    js_date_parse,
    js_round,
    js_stringify,
    js_stringify_bytes,
)

__all__ = [
    "DECLARED_STEP_KEYS",
    "GATE_CHECK_IDS",
    "GATE_POLICIES",
    "ROLLOUT_CAPTURES",
    "ROLLOUT_ID_NAMESPACE",
    "ROLLOUT_ROLES",
    "ROLLOUT_SCHEMA",
    "ROLLOUT_SPLITS",
    "GateCheckId",
    "InvalidRolloutLine",
    "assert_minted",
    "assert_reward_gate",
    "assert_rollout_line",
    "gate_errors",
    "gate_gamed_outcome",
    "iso_ms",
    "js_round",
    "rollout_id",
    "serialize_ledger",
    "serialize_rollout_line",
    "serialize_rollout_line_bytes",
    "validate_rollout_line",
]

ROLLOUT_SCHEMA: Final = "tangle.rollout.v1"
ROLLOUT_ROLES: Final = ("agent", "supervisor", "worker", "proposer", "judge", "analyst")
# The legacy ``train`` split is rejected; only ``search`` is trainable.
ROLLOUT_SPLITS: Final = ("search", "dev", "holdout", "canary")
ROLLOUT_CAPTURES: Final = ("mint", "settle-time", "backfill")
CHAT_ROLES: Final = ("system", "user", "assistant", "tool")
DECLARED_STEP_KEYS: Final = frozenset(
    {
        "kind",
        "name",
        "input",
        "output",
        "status",
        "durationMs",
        "llm_call_count",
        "prompt_token_ids",
        "completion_token_ids",
        "logprobs",
    }
)

# Fixed for ever: rollout ids minted under it are stable across runs and machines.
# (= uuid5(NAMESPACE_URL, "https://github.com/tangle-network/agent-eval#tangle.rollout.v1/arenad"))
ROLLOUT_ID_NAMESPACE: Final = uuid.UUID("b761e035-a147-512d-9092-45dbea57e1f5")


class InvalidRolloutLine(ArenadError, ValueError):
    """A line that does not validate (a producer defect, not a user mistake)."""


# --------------------------------------------------------------------------- readers

_MISSING: Final = object()  # JS ``undefined``: the key is absent.


def _is_record(v: object) -> bool:
    return isinstance(v, dict)


def _is_number(v: object) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


def _is_integer(v: object) -> bool:
    if isinstance(v, bool):
        return False
    if isinstance(v, int):
        return True
    return isinstance(v, float) and math.isfinite(v) and v.is_integer()


def _number_or_null(v: object) -> bool:
    return v is None or _is_number(v)


def _string_or_null(v: object) -> bool:
    return v is None or isinstance(v, str)


def _integer_or_null(v: object) -> bool:
    return v is None or _is_integer(v)


def _non_empty_string(v: object) -> bool:
    return isinstance(v, str) and len(v) > 0


def _get(obj: Mapping[str, Any], key: str) -> Any:
    return obj.get(key, _MISSING)


def _shown(v: object) -> str:
    """How a value reads in a message (JSON where it has one)."""
    if v is _MISSING:
        return "undefined"
    try:
        return js_stringify(v)
    except TypeError:
        return repr(v)


def _type_name(v: object) -> str:
    if isinstance(v, bool):
        return "boolean"
    if _is_number(v):
        return "number"
    if isinstance(v, str):
        return "string"
    if v is None or isinstance(v, dict | list):
        return "object"
    return type(v).__name__


# --------------------------------------------------------------------------- gate checks

GateCheckId = Literal[
    "reward-relationship", "gated-evidence", "undeclared-step-payload", "unscreened-reward"
]
GATE_CHECK_IDS: Final[tuple[GateCheckId, ...]] = (
    "reward-relationship",
    "gated-evidence",
    "undeclared-step-payload",
    "unscreened-reward",
)
Disposition = Literal["enforce", "repair", "omit"]
GATE_POLICIES: Final[Mapping[str, Mapping[GateCheckId, Disposition]]] = {
    "validate_rollout_line": {
        "reward-relationship": "enforce",
        "gated-evidence": "omit",
        "undeclared-step-payload": "omit",
        "unscreened-reward": "omit",
    },
    "assert_minted": {
        "reward-relationship": "enforce",
        "gated-evidence": "repair",
        "undeclared-step-payload": "repair",
        "unscreened-reward": "enforce",
    },
    "assert_reward_gate": {
        "reward-relationship": "enforce",
        "gated-evidence": "enforce",
        "undeclared-step-payload": "enforce",
        "unscreened-reward": "enforce",
    },
}

RewardReading = Literal["absent", "cleared", "positive", "unreadable"]


def _read_reward(v: object) -> RewardReading:
    if v is None or v is _MISSING:
        return "absent"
    if _is_number(v):
        assert isinstance(v, int | float)
        if isinstance(v, float) and math.isnan(v):
            return "unreadable"
        return "positive" if v > 0 else "cleared"
    return "unreadable"


def _reward_shown(v: object) -> str:
    if isinstance(v, float) and not math.isfinite(v):
        return "NaN" if math.isnan(v) else ("Infinity" if v > 0 else "-Infinity")
    if _is_number(v):
        return _shown(v)
    return f"{_shown(v)} ({_type_name(v)})"


def _populated(v: object) -> bool:
    """Only absent, null and ``{}`` are empty; any other value is payload."""
    if v is None or v is _MISSING:
        return False
    if isinstance(v, dict):
        return len(v) > 0
    return True


def _undeclared_step_payload(steps: object) -> Any:
    """The step payload the format does not declare, or ``_MISSING`` when there is none."""
    if steps is None or steps is _MISSING:
        return _MISSING
    if not isinstance(steps, list):
        return steps
    extras: list[dict[str, Any]] = []
    found = False
    for step in steps:
        if isinstance(step, dict):
            extra = {k: v for k, v in step.items() if k not in DECLARED_STEP_KEYS}
            found = found or bool(extra)
            extras.append(extra)
        elif step is not None:
            extras.append({"step": step})
            found = True
        else:
            extras.append({})
    return extras if found else _MISSING


def _declared_steps(steps: object) -> list[dict[str, Any]] | None:
    if not isinstance(steps, list):
        return None
    return [
        {k: v for k, v in step.items() if k in DECLARED_STEP_KEYS}
        for step in steps
        if isinstance(step, dict)
    ]


def _gated_evidence_of(outcome: Mapping[str, Any], steps: object) -> dict[str, Any] | None:
    evidence: dict[str, Any] = {}
    metrics = _get(outcome, "metrics")
    if _populated(metrics):
        evidence["metrics"] = metrics
    verdict = _get(outcome, "verdict")
    if verdict is not None and verdict is not _MISSING:
        evidence["verdict"] = verdict
    extra = _undeclared_step_payload(steps)
    if extra is not _MISSING:
        evidence["steps"] = extra
    return evidence or None


def _check_reward_relationship(outcome: Mapping[str, Any], steps: object) -> list[str]:
    if _get(outcome, "realness_gated") is not True:
        return []
    reward = _get(outcome, "reward")
    reading = _read_reward(reward)
    if reading == "unreadable":
        return [
            f"outcome.reward: {_reward_shown(reward)} with outcome.realness_gated: true — "
            "the gate cannot read it as a number, so it cannot show the reward was cleared; "
            "emit a number ≤ 0 or null"
        ]
    if reading == "positive":
        return [
            f"outcome.reward: {_reward_shown(reward)} with outcome.realness_gated: true — "
            "a run flagged as gamed may not carry a positive reward (0 or null)"
        ]
    return []


def _check_gated_evidence(outcome: Mapping[str, Any], steps: object) -> list[str]:
    if _get(outcome, "realness_gated") is not True:
        return []
    metrics_populated = _populated(_get(outcome, "metrics"))
    verdict = _get(outcome, "verdict")
    if not metrics_populated and (verdict is None or verdict is _MISSING):
        return []
    path = "outcome.metrics" if metrics_populated else "outcome.verdict"
    return [
        f"{path}: populated with outcome.realness_gated: true — a gated line carries its "
        "evidence in provenance.gated_evidence, with metrics {} and verdict null"
    ]


def _check_undeclared_step_payload(outcome: Mapping[str, Any], steps: object) -> list[str]:
    if _get(outcome, "realness_gated") is not True:
        return []
    extra = _undeclared_step_payload(steps)
    if extra is _MISSING:
        return []
    return [
        f"steps: carries fields {ROLLOUT_SCHEMA} does not declare ({_shown(extra)[:120]}) "
        "with outcome.realness_gated: true — move them to provenance.gated_evidence.steps"
    ]


def _check_unscreened_reward(outcome: Mapping[str, Any], steps: object) -> list[str]:
    if _get(outcome, "realness_screened") is not False:
        return []
    reward = _get(outcome, "reward")
    if _read_reward(reward) in ("absent", "cleared"):
        return []
    return [
        f"outcome.reward: {_reward_shown(reward)} with outcome.realness_screened: false — "
        "no authenticity screen ran on this reward; screen it or emit reward null"
    ]


_GATE_CHECKS: Final[Mapping[GateCheckId, Callable[[Mapping[str, Any], object], list[str]]]] = {
    "reward-relationship": _check_reward_relationship,
    "gated-evidence": _check_gated_evidence,
    "undeclared-step-payload": _check_undeclared_step_payload,
    "unscreened-reward": _check_unscreened_reward,
}


def gate_errors(line: Mapping[str, Any], policy: str = "assert_reward_gate") -> list[str]:
    """The messages of every gate check ``policy`` (a ``GATE_POLICIES`` key) enforces."""
    dispositions = GATE_POLICIES[policy]
    outcome = _get(line, "outcome")
    if not isinstance(outcome, dict):
        outcome = {}
    steps = _get(line, "steps")
    errors: list[str] = []
    for check_id in GATE_CHECK_IDS:
        if dispositions[check_id] == "enforce":
            errors.extend(_GATE_CHECKS[check_id](outcome, steps))
    return errors


def _js_spread(value: object) -> dict[str, Any]:
    """The own enumerable properties ``{...value}`` copies (strings and arrays by index)."""
    if isinstance(value, dict):
        return value
    if isinstance(value, str | list):
        return {str(i): v for i, v in enumerate(value)}
    return {}


def gate_gamed_outcome(line: dict[str, Any]) -> dict[str, Any]:
    """Move a gated line's reward-bearing payload to ``provenance.gated_evidence``.

    Only for ``realness_gated: true`` lines with something to move; idempotent. Returns
    a new line (the input is not changed): ``outcome.metrics`` → ``{}``,
    ``outcome.verdict`` → null, steps projected to the declared keys, keys keeping their
    positions and a new ``gated_evidence`` appended last. Moved metrics are merged over
    any earlier evidence the way JS spreads them (a primitive contributes nothing).
    """
    outcome = _get(line, "outcome")
    if not isinstance(outcome, dict) or outcome.get("realness_gated") is not True:
        return line
    steps = _get(line, "steps")
    moved = _gated_evidence_of(outcome, steps)
    if moved is None:
        return line
    provenance = _get(line, "provenance")
    provenance = provenance if isinstance(provenance, dict) else {}
    kept = provenance.get("gated_evidence")
    kept = kept if isinstance(kept, dict) else {}
    evidence: dict[str, Any] = {}
    metrics: dict[str, Any] = {}
    for source in (kept.get("metrics"), moved.get("metrics")):
        metrics.update(_js_spread(source))
    if metrics:
        evidence["metrics"] = metrics
    for key in ("verdict", "steps"):
        if key in moved:
            evidence[key] = moved[key]
        elif kept.get(key, _MISSING) is not _MISSING:
            evidence[key] = kept[key]
    out = dict(line)
    if "steps" in moved:
        declared = _declared_steps(steps)
        if declared is not None:
            out["steps"] = declared
    out["outcome"] = {**outcome, "metrics": {}, "verdict": None}
    new_provenance = dict(provenance)  # an existing key keeps its place, as in JS
    new_provenance["gated_evidence"] = evidence
    out["provenance"] = new_provenance
    return out


# --------------------------------------------------------------------------- validator


def _validate_chat_message(value: object, path: str, errors: list[str]) -> None:
    if not isinstance(value, dict):
        errors.append(f"{path}: not an object")
        return
    role = _get(value, "role")
    if role not in CHAT_ROLES:
        errors.append(f"{path}.role: invalid role {_shown(role)}")
    if not _string_or_null(_get(value, "content")):
        errors.append(f"{path}.content: must be string|null (the key is required)")
    reasoning = _get(value, "reasoning_content")
    if reasoning is not _MISSING and not isinstance(reasoning, str):
        errors.append(f"{path}.reasoning_content: must be string when present")
    call_id = _get(value, "tool_call_id")
    if call_id is not _MISSING and not isinstance(call_id, str):
        errors.append(f"{path}.tool_call_id: must be string when present")
    if role == "tool" and not isinstance(call_id, str):
        errors.append(f'{path}.tool_call_id: required on role "tool"')
    copied = _get(value, "is_copied_context")
    if copied is not _MISSING and not isinstance(copied, bool):
        errors.append(f"{path}.is_copied_context: must be boolean when present")
    calls = _get(value, "tool_calls")
    if calls is _MISSING:
        return
    if not isinstance(calls, list):
        errors.append(f"{path}.tool_calls: must be an array when present")
        return
    for i, call in enumerate(calls):
        if (
            not isinstance(call, dict)
            or not isinstance(_get(call, "id"), str)
            or _get(call, "type") != "function"
        ):
            errors.append(f'{path}.tool_calls[{i}]: must be {{id, type:"function", function}}')
            continue
        fn = _get(call, "function")
        if (
            not isinstance(fn, dict)
            or not isinstance(_get(fn, "name"), str)
            or not isinstance(_get(fn, "arguments"), str)
        ):
            errors.append(
                f"{path}.tool_calls[{i}].function: must be {{name: string, arguments: string}}"
            )


# (key, the exact types that pass at once, the check deciding any other value, what
# the message says is expected). The type set spares a call for the usual values.
_Field = tuple[str, frozenset[type], Callable[[object], bool], str]
_NONE: Final[type] = type(None)
_STRING_OR_NULL: Final[frozenset[type]] = frozenset({str, _NONE})
_NUMBER_OR_NULL: Final[frozenset[type]] = frozenset({int, float, _NONE})
_NOTHING: Final[frozenset[type]] = frozenset()
_INT: Final[frozenset[type]] = frozenset({int})
_BOOL: Final[frozenset[type]] = frozenset({bool})
_DICT: Final[frozenset[type]] = frozenset({dict})
_DICT_OR_NULL: Final[frozenset[type]] = frozenset({dict, _NONE})


def _validate_section(
    value: object, path: str, fields: Iterable[_Field], errors: list[str]
) -> None:
    if not isinstance(value, dict):
        errors.append(f"{path}: not an object")
        return
    get = value.get
    for name, fast, check, expect in fields:
        v = get(name, _MISSING)
        if type(v) not in fast and not check(v):
            errors.append(f"{path}.{name}: expected {expect}")


def _is_boolean(v: object) -> bool:
    return isinstance(v, bool)


@functools.lru_cache(maxsize=256)
def _is_timestamp(v: str) -> bool:
    # Every line of an attempt carries the same captured_at: parsed once.
    return js_date_parse(v) is not None


_TASK_FIELDS: Final[tuple[_Field, ...]] = (
    ("suite", _NOTHING, _non_empty_string, "non-empty string"),
    ("instance_id", _NOTHING, _non_empty_string, "non-empty string"),
    ("split", _NOTHING, lambda v: v in ROLLOUT_SPLITS, "one of " + "|".join(ROLLOUT_SPLITS)),
    ("seed", _NUMBER_OR_NULL, _number_or_null, "number|null"),
    ("rep", _INT, _is_integer, "integer"),
)
_POLICY_FIELDS: Final[tuple[_Field, ...]] = (
    ("harness", _STRING_OR_NULL, _string_or_null, "string|null"),
    ("harness_version", _STRING_OR_NULL, _string_or_null, "string|null"),
    ("model", _STRING_OR_NULL, _string_or_null, "string|null"),
    ("provider", _STRING_OR_NULL, _string_or_null, "string|null"),
    ("profile_commit", _STRING_OR_NULL, _string_or_null, "string|null"),
    ("sampling", _DICT_OR_NULL, lambda v: v is None or _is_record(v), "object|null"),
)
_OUTCOME_FIELDS: Final[tuple[_Field, ...]] = (
    ("reward", _NUMBER_OR_NULL, _number_or_null, "number|null"),
    ("reward_source", _STRING_OR_NULL, _string_or_null, "string|null"),
    ("metrics", _DICT, _is_record, "object"),
    ("is_completed", _BOOL, _is_boolean, "boolean"),
    ("is_truncated", _BOOL, _is_boolean, "boolean"),
    ("error", _STRING_OR_NULL, _string_or_null, "string|null"),
)
_COST_FIELDS: Final[tuple[_Field, ...]] = tuple(
    (name, _NUMBER_OR_NULL, _number_or_null, "number|null")
    for name in (
        "usd",
        "tokens_in",
        "tokens_out",
        "tokens_reasoning",
        "cache_read",
        "cache_write",
        "wall_s",
    )
)
_ARTIFACT_FIELDS: Final[tuple[_Field, ...]] = (
    ("patch_path", _STRING_OR_NULL, _string_or_null, "string|null"),
    ("run_dir", _STRING_OR_NULL, _string_or_null, "string|null"),
    ("transcript_ref", _STRING_OR_NULL, _string_or_null, "string|null"),
)
_PROVENANCE_FIELDS: Final[tuple[_Field, ...]] = (
    (
        "captured_at",
        _NOTHING,
        lambda v: isinstance(v, str) and _is_timestamp(v),
        "ISO-8601 timestamp",
    ),
    (
        "capture",
        _NOTHING,
        lambda v: v in ROLLOUT_CAPTURES,
        "one of " + "|".join(ROLLOUT_CAPTURES),
    ),
)


def _validate_steps(steps: object, errors: list[str]) -> None:
    if not isinstance(steps, list):
        errors.append("steps: expected array when present")
        return
    for i, step in enumerate(steps):
        if (
            not isinstance(step, dict)
            or not isinstance(_get(step, "kind"), str)
            or not isinstance(_get(step, "name"), str)
        ):
            errors.append(f"steps[{i}]: must be {{kind: string, name: string, …}}")
            continue
        count = _get(step, "llm_call_count")
        if count is not _MISSING and not _is_integer(count):
            errors.append(f"steps[{i}].llm_call_count: expected integer when present")
        for key in ("prompt_token_ids", "completion_token_ids"):
            ids = _get(step, key)
            if ids is not _MISSING and not (
                isinstance(ids, list) and all(_is_integer(n) for n in ids)
            ):
                errors.append(f"steps[{i}].{key}: expected integer[] when present")
        logprobs = _get(step, "logprobs")
        if logprobs is not _MISSING and not (
            isinstance(logprobs, list) and all(_is_number(n) and math.isfinite(n) for n in logprobs)
        ):
            errors.append(f"steps[{i}].logprobs: expected number[] when present")


def validate_rollout_line(line: object) -> list[str]:
    """Every defect of ``line`` as ``<dotted.path>: <what>``; ``[]`` when it is valid."""
    if not isinstance(line, dict):
        return ["line: not an object"]
    errors: list[str] = []
    get = line.get
    if get("schema", _MISSING) != ROLLOUT_SCHEMA:
        errors.append(f'schema: expected "{ROLLOUT_SCHEMA}"')
    if not _non_empty_string(get("rollout_id", _MISSING)):
        errors.append("rollout_id: expected non-empty string")
    if not _string_or_null(get("parent_rollout_id", _MISSING)):
        errors.append("parent_rollout_id: expected string|null")
    if not _non_empty_string(get("run_id", _MISSING)):
        errors.append("run_id: expected non-empty string")
    if not _string_or_null(get("experiment_id", _MISSING)):
        errors.append("experiment_id: expected string|null (the key is required)")
    if not _string_or_null(get("candidate_id", _MISSING)):
        errors.append("candidate_id: expected string|null (the key is required)")
    if not _integer_or_null(get("generation", _MISSING)):
        errors.append("generation: expected integer|null")
    if not _integer_or_null(get("candidate_index", _MISSING)):
        errors.append("candidate_index: expected integer|null")
    role = get("role", _MISSING)
    if role not in ROLLOUT_ROLES:
        errors.append(f"role: invalid role {_shown(role)}")

    _validate_section(get("task", _MISSING), "task", _TASK_FIELDS, errors)
    policy = get("policy", _MISSING)
    _validate_section(policy, "policy", _POLICY_FIELDS, errors)
    if isinstance(policy, dict):
        for key in ("prompt_hash", "config_hash", "agent_profile_cell_id"):
            v = _get(policy, key)
            if v is not _MISSING and not _string_or_null(v):
                errors.append(f"policy.{key}: expected string|null when present")

    messages = get("messages", _MISSING)
    if type(messages) is msgspec.Raw:
        pass  # an encoded transcript: vouched for by its reader (arenad.chat)
    elif not isinstance(messages, list):
        errors.append("messages: expected array")
    elif type(messages) is not CheckedChatMessages:
        for i, message in enumerate(messages):
            _validate_chat_message(message, f"messages[{i}]", errors)

    tool_defs = get("tool_defs", _MISSING)
    if not isinstance(tool_defs, list):
        errors.append("tool_defs: expected array")
    else:
        for i, d in enumerate(tool_defs):
            fn = _get(d, "function") if isinstance(d, dict) else None
            if (
                not isinstance(d, dict)
                or _get(d, "type") != "function"
                or not isinstance(fn, dict)
                or not isinstance(_get(fn, "name"), str)
            ):
                errors.append(f'tool_defs[{i}]: must be {{type:"function", function:{{name}}}}')

    steps = get("steps", _MISSING)
    if steps is not _MISSING:
        _validate_steps(steps, errors)

    outcome = get("outcome", _MISSING)
    _validate_section(outcome, "outcome", _OUTCOME_FIELDS, errors)
    if isinstance(outcome, dict):
        if "verdict" not in outcome:
            errors.append("outcome.verdict: field required (may be null)")
        if not isinstance(_get(outcome, "realness_gated"), bool):
            errors.append("outcome.realness_gated: expected boolean")
        screened = _get(outcome, "realness_screened")
        if screened is not _MISSING and not isinstance(screened, bool):
            errors.append("outcome.realness_screened: expected boolean when present")
        if outcome.get("realness_gated") is True:
            # This policy enforces reward-relationship alone, which only a gated line fails.
            errors.extend(gate_errors(line, "validate_rollout_line"))

    cost = get("cost", _MISSING)
    _validate_section(cost, "cost", _COST_FIELDS, errors)
    if isinstance(cost, dict):
        calls = _get(cost, "llm_call_count")
        if calls is not _MISSING and not _integer_or_null(calls):
            errors.append("cost.llm_call_count: expected integer|null when present")

    _validate_section(get("artifacts", _MISSING), "artifacts", _ARTIFACT_FIELDS, errors)

    provenance = get("provenance", _MISSING)
    _validate_section(provenance, "provenance", _PROVENANCE_FIELDS, errors)
    if isinstance(provenance, dict):
        gap = _get(provenance, "gap")
        if gap is not _MISSING and not isinstance(gap, str):
            errors.append("provenance.gap: must be string when present")
        evidence = _get(provenance, "gated_evidence")
        if evidence is not _MISSING:
            if not isinstance(evidence, dict):
                errors.append("provenance.gated_evidence: must be an object when present")
            else:
                metrics = _get(evidence, "metrics")
                if metrics is not _MISSING and not isinstance(metrics, dict):
                    errors.append(
                        "provenance.gated_evidence.metrics: must be an object when present"
                    )
        if (
            isinstance(messages, list)
            and not messages
            and not isinstance(_get(provenance, "gap"), str)
        ):
            errors.append("provenance.gap: required when messages is empty")
    return errors


def assert_rollout_line(line: object, context: str = "rollout line") -> None:
    """Raise ``InvalidRolloutLine`` listing every defect (``validate_rollout_line``)."""
    errors = validate_rollout_line(line)
    if errors:
        raise InvalidRolloutLine(f"invalid {context}:\n  " + "\n  ".join(errors))


def assert_reward_gate(line: Mapping[str, Any], context: str = "rollout line") -> None:
    """The strict backstop: every gate check enforced; raises on the first failure."""
    errors = gate_errors(line, "assert_reward_gate")
    if errors:
        raise InvalidRolloutLine(f"{context}: rollout {line.get('rollout_id')} — {errors[0]}")


def assert_minted(line: object, context: str = "rollout line") -> dict[str, Any]:
    """The mint/read funnel: validate, refuse what cannot be repaired, repair the rest."""
    assert_rollout_line(line, context)
    assert isinstance(line, dict)
    errors = gate_errors(line, "assert_minted")
    if errors:
        raise InvalidRolloutLine(f"{context}: rollout {line.get('rollout_id')} — {errors[0]}")
    return gate_gamed_outcome(line)


# --------------------------------------------------------------------------- bytes and ids


def serialize_rollout_line(line: Mapping[str, Any]) -> str:
    """One ledger line, exactly as JS ``JSON.stringify(line)`` writes it (no newline)."""
    return js_stringify(line)


def serialize_rollout_line_bytes(line: Mapping[str, Any]) -> bytes:
    """``serialize_rollout_line`` as the UTF-8 bytes a ledger file holds."""
    return js_stringify_bytes(line)


def serialize_ledger(lines: Iterable[Mapping[str, Any]]) -> str:
    """A whole ledger: lines joined by ``\\n`` plus a trailing ``\\n`` when there are any."""
    return "".join(serialize_rollout_line(line) + "\n" for line in lines)


def rollout_id(*stable_keys: str | int | None) -> str:
    """A deterministic rollout id: UUIDv5 of the keys under ``ROLLOUT_ID_NAMESPACE``.

    The keys are encoded as one JSON array, so ``("a", "b")`` and ``("a\\x00b",)`` and
    ``(1,)``/``("1",)`` never collide. Give at least one key.
    """
    if not stable_keys:
        raise ValueError("rollout_id needs at least one stable key")
    for key in stable_keys:
        if isinstance(key, bool) or not isinstance(key, str | int | type(None)):
            raise TypeError(f"rollout_id keys are str, int or None, not {type(key).__name__}")
    return _uuid5(js_stringify_bytes(list(stable_keys)))


_NAMESPACE_BYTES: Final = ROLLOUT_ID_NAMESPACE.bytes


def _uuid5(name: bytes) -> str:
    """``str(uuid.uuid5(ROLLOUT_ID_NAMESPACE, name))`` (RFC 4122 §4.3), without the UUID
    object: the stdlib's costs ~20 µs a call, a tenth of a cell's projection."""
    b = bytearray(hashlib.sha1(_NAMESPACE_BYTES + name, usedforsecurity=False).digest()[:16])
    b[6] = (b[6] & 0x0F) | 0x50  # version 5
    b[8] = (b[8] & 0x3F) | 0x80  # the RFC 4122 variant
    h = b.hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"
