"""The gateway's records of an attempt's calls, folded for reconciliation with the agent's
own store. Pure: the ledger (``cost.gateway`` / ``cost.mismatch``), the report (spend per
source) and the view (the calls of a cell) read the same figures.

A call refused at a cap or failed upstream spent nothing; an answered call without usage
(or without a price) makes a sum unknown (None), never a smaller number. Two sources
disagree on a field when both know it and they differ beyond rounding: tokens must be
equal, dollars within ``USD_TOLERANCE``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from typing import Any

from events.base import Recorded
from events.ingest import LineIngested

__all__ = [
    "TOKEN_BUCKETS",
    "USD_TOLERANCE",
    "answered",
    "gateway_calls",
    "gateway_figures",
    "mismatch",
]

# The gateway's usage bucket for each token field of a ledger line's ``cost``.
TOKEN_BUCKETS: tuple[tuple[str, str], ...] = (
    ("tokens_in", "input"),
    ("tokens_out", "output"),
    ("tokens_reasoning", "reasoning"),
    ("cache_read", "cache_read"),
    ("cache_write", "cache_write"),
)
# Both sources are float sums of the same prices over the same tokens, so only their
# rounding can differ: a micro-dollar is far above that and far below a cent.
USD_TOLERANCE = 1e-6

Number = int | float


def _object(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _figure(v: object) -> Number | None:
    if isinstance(v, bool) or not isinstance(v, int | float):
        return None
    return v if math.isfinite(v) and v >= 0 else None


def gateway_calls(records: Iterable[Recorded]) -> list[dict[str, Any]]:
    """The gateway's records of model calls among ``records`` (an attempt's ingest stream),
    in the given order; an unreadable line is left out (the ingest labeled it already)."""
    calls: list[dict[str, Any]] = []
    for rec in records:
        e = rec.event
        if not (isinstance(e, LineIngested) and e.source == "gateway" and e.kind == "gateway.call"):
            continue
        try:
            call = json.loads(e.raw)
        except (ValueError, RecursionError):
            continue
        if isinstance(call, dict):
            calls.append(call)
    return calls


def answered(call: Mapping[str, Any]) -> bool:
    """The upstream answered the call whole: not refused at a cap, no error status, and no
    ``upstream.error`` beside a success status (a 200 whose stream carried the provider's
    error event, timed out, was cut or ended before its end event failed mid-answer).

    The one rule: the failure classification (``arenad.arms.evidence.gateway_cause``) and
    these sums (ledger, report, view) both ask it, so a call the classification calls failed
    is never counted here as answered, nor its partial usage as spent."""
    upstream = _object(call.get("upstream"))
    status = upstream.get("status")
    return (
        not call.get("refused")
        and isinstance(status, int)
        and not isinstance(status, bool)
        and status < 400
        and not upstream.get("error")
    )


def gateway_figures(calls: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """``usd`` and the token buckets as the gateway recorded them, with the count of calls
    (``calls``, ``answered``, ``refused`` at a cap, ``failed`` upstream)."""
    sums: dict[str, Number | None] = {"usd": 0.0, **{k: 0 for k, _ in TOKEN_BUCKETS}}
    total = done = refused = 0
    for call in calls:
        total += 1
        if call.get("refused"):
            refused += 1
            continue
        if not answered(call):
            continue
        done += 1
        usage = call.get("usage")
        for key, bucket in TOKEN_BUCKETS:
            v = _figure(usage.get(bucket)) if isinstance(usage, dict) else None
            acc = sums[key]
            sums[key] = None if v is None or acc is None else acc + v
        usd, acc_usd = _figure(call.get("cost_usd")), sums["usd"]
        sums["usd"] = None if usd is None or acc_usd is None else acc_usd + usd
    return {
        **sums,
        "calls": total,
        "answered": done,
        "refused": refused,
        "failed": total - done - refused,
    }


def mismatch(agent: Mapping[str, Any], gateway: Mapping[str, Any]) -> list[str]:
    """The fields (``usd`` and the token fields) where ``agent`` and ``gateway`` both know
    a figure and differ beyond rounding. A figure only one side knows is no disagreement:
    the caller shows both."""
    out: list[str] = []
    for key in ("usd", *(k for k, _ in TOKEN_BUCKETS)):
        mine, theirs = _figure(agent.get(key)), _figure(gateway.get(key))
        if mine is None or theirs is None:
            continue
        if abs(mine - theirs) > (USD_TOLERANCE if key == "usd" else 0):
            out.append(key)
    return out
