"""The reference's parseOcUsage as a pure fold over opencode ``--format json`` stream objects.

Every object whose ``part`` is an object and whose ``part.tokens`` is an object counts as a
step: input/output/reasoning/cache.write/cache.read are summed, ``max_ctx`` is the largest
``tokens.total``, ``part.cost`` is summed and rounded as JS ``Number(x.toFixed(6))``, and
``total_io`` = in + out + reasoning. Non-numbers count as 0 (as the reference's ``num``).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Sequence
from fractions import Fraction
from typing import Any

from arenad.js import js_parse
from arenad.recovery.bounds import (
    MAX_REJECTED_KEPT,
    MAX_SESSION_TOKENS,
    MAX_SESSION_USD,
    out_of_bounds,
    rejected,
)
from events.base import Event, Recorded
from events.cell import RejectedFigure, SoloUsage
from events.ingest import LineIngested


def _num(value: Any) -> float | int:
    """JS ``typeof v === 'number' ? v : 0``; bools are not numbers; NaN/inf count as 0."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return 0
    if isinstance(value, float) and not math.isfinite(value):
        return 0
    return value


def _is_object(value: Any) -> bool:
    """JS ``typeof v === 'object' && v !== null``: dicts and arrays."""
    return isinstance(value, dict | list)


def _get(obj: Any, key: str) -> Any:
    return obj.get(key) if isinstance(obj, dict) else None


def js_to_fixed_number(x: float, digits: int = 6) -> float:
    """``Number(x.toFixed(digits))``: the integer n nearest x·10^d (ties: the larger n), /10^d.

    Exact on the binary value, like JS; Python's ``f"{x:.6f}"`` rounds ties to even instead
    (0.0078125 gives 0.007812 there, 0.007813 in JS).
    """
    if not math.isfinite(x):
        return x
    scale = 10**digits
    n = math.floor(Fraction(x) * scale + Fraction(1, 2))
    return float(Fraction(n, scale))


def _as_int(x: float | int) -> int:
    return x if isinstance(x, int) else round(x)


def fold_oc_usage(objects: Iterable[Any]) -> SoloUsage:
    """Sum the token parts of already-parsed stream objects into SoloUsage."""
    steps = 0
    inp: float | int = 0
    out: float | int = 0
    rea: float | int = 0
    cw: float | int = 0
    cr: float | int = 0
    max_tot: float | int = 0
    cost: float | int = 0
    for o in objects:
        part = _get(o, "part")
        if not _is_object(part):
            continue
        tokens = _get(part, "tokens")
        if not _is_object(tokens):
            continue
        steps += 1
        inp += _num(_get(tokens, "input"))
        out += _num(_get(tokens, "output"))
        rea += _num(_get(tokens, "reasoning"))
        cache = _get(tokens, "cache")
        cw += _num(_get(cache, "write"))
        cr += _num(_get(cache, "read"))
        max_tot = max(max_tot, _num(_get(tokens, "total")))
        cost += _num(_get(part, "cost"))
    return SoloUsage(
        steps=steps,
        tokens_in=_as_int(inp),
        tokens_out=_as_int(out),
        reasoning=_as_int(rea),
        cache_w=_as_int(cw),
        cache_r=_as_int(cr),
        max_ctx=_as_int(max_tot),
        oc_cost=js_to_fixed_number(float(cost)),
        total_io=_as_int(inp + out + rea),
    )


def _reject_constant(name: str) -> Any:
    # JSON.parse rejects NaN / Infinity; so does the reference's line filter.
    raise ValueError(f"not JSON: {name}")


def parse_jsonl_objects(text: str | bytes) -> list[Any]:
    """The reference's line handling: trimmed lines starting with ``{`` that parse as JSON."""
    if isinstance(text, bytes):
        text = text.decode("utf-8", errors="replace")
    objects: list[Any] = []
    for raw in text.split("\n"):
        line = raw.strip()
        if not line.startswith("{"):
            continue
        try:
            objects.append(json.loads(line, parse_constant=_reject_constant))
        except ValueError:
            continue
    return objects


def parse_oc_usage(jsonl: str | bytes) -> SoloUsage:
    """parseOcUsage on a whole ``oc.jsonl`` text."""
    return fold_oc_usage(parse_jsonl_objects(jsonl))


def stdout_objects(events: Iterable[Event | Recorded]) -> list[dict[str, Any]]:
    """The JSON objects of an ingested stdout stream, in order (a pure fold)."""
    out: list[dict[str, Any]] = []
    for item in events:
        e = item.event if isinstance(item, Recorded) else item
        if isinstance(e, LineIngested) and e.source == "stdout" and e.encoding == "utf-8":
            try:
                # JSON.parse's reading (a NaN / Infinity literal is not JSON), as the reference's.
                obj = js_parse(e.raw)
            except ValueError:
                continue
            if isinstance(obj, dict):
                out.append(obj)
    return out


def usage_from_events(events: Sequence[Event | Recorded]) -> SoloUsage | None:
    """The reference's usage figures from an attempt's ingested events (None: no stdout, or a
    figure out of bounds: see :func:`checked_usage`)."""
    return checked_usage(events)[0]


# A step's figures and their bounds (arenad.recovery.bounds): (path under part, ceiling).
_STEP_FIGURES: tuple[tuple[tuple[str, ...], float], ...] = (
    (("tokens", "input"), MAX_SESSION_TOKENS),
    (("tokens", "output"), MAX_SESSION_TOKENS),
    (("tokens", "reasoning"), MAX_SESSION_TOKENS),
    (("tokens", "cache", "write"), MAX_SESSION_TOKENS),
    (("tokens", "cache", "read"), MAX_SESSION_TOKENS),
    (("tokens", "total"), MAX_SESSION_TOKENS),
    (("cost",), MAX_SESSION_USD),
)


def stream_rejections(objects: Iterable[Any]) -> list[RejectedFigure]:
    """The figures of the steps ``fold_oc_usage`` would count that are out of bounds (not
    finite, negative, past a step's ceiling): a stream can be the agent's own (a command
    arm's stdout), so a sum over it is not taken on trust."""
    found: list[RejectedFigure] = []
    step = 0
    for o in objects:
        part = _get(o, "part")
        if not _is_object(part) or not _is_object(_get(part, "tokens")):
            continue
        step += 1
        for path, ceiling in _STEP_FIGURES:
            value: Any = part
            for key in path:
                value = _get(value, key)
            if isinstance(value, bool) or not isinstance(value, int | float):
                continue
            reason = out_of_bounds(value, ceiling)
            if reason is not None:
                found.append(rejected(f"step {step}", ".".join(path), value, reason, "stream"))
    return found


def checked_usage(
    events: Sequence[Event | Recorded],
) -> tuple[SoloUsage | None, list[RejectedFigure]]:
    """The reference's usage figures from an attempt's ingested events, when every step's
    figures are within bounds; else None and the figures that are not (evidence). None
    with nothing rejected: the run had no stdout."""
    lines = [item.event if isinstance(item, Recorded) else item for item in events]
    if not any(isinstance(e, LineIngested) and e.source == "stdout" for e in lines):
        return None, []
    objects = stdout_objects(lines)
    found = stream_rejections(objects)
    if found:
        return None, found[:MAX_REJECTED_KEPT]
    return fold_oc_usage(objects), []
