"""The reconciliation's sums and the failure classification read a call the same way: one
rule (``reconcile.answered``) says whether the upstream answered it (issue 31)."""

from __future__ import annotations

from typing import Any

from arenad.arms.evidence import gateway_cause
from arenad.gateway.reconcile import answered, gateway_figures

USAGE = {"input": 100, "output": 10, "reasoning": 0, "cache_read": 0, "cache_write": 0}


def _call(status: int | None, error: str | None = None, **extra: Any) -> dict[str, Any]:
    call = {"type": "gateway.call", "upstream": {"status": status, "error": error}}
    return {**call, "usage": USAGE, "cost_usd": 0.001, **extra}


# Every shape the gateway journals (arenad.gateway.server), and whether it was answered.
SHAPES: list[tuple[dict[str, Any], bool]] = [
    (_call(200), True),
    (_call(200, client_gone=True), True),
    (_call(200, "upstream error in its stream: overloaded_error: Overloaded"), False),
    (_call(200, "timeout mid-answer"), False),
    (_call(200, "cut mid-answer: ConnectionResetError"), False),
    (_call(200, "stream ended before its end event"), False),
    (_call(429, "upstream 429"), False),
    (_call(503, "upstream 503"), False),
    (_call(401, "upstream 401"), False),
    (_call(400, "upstream 400"), False),
    (_call(None, "timeout", usage=None, cost_usd=None), False),
    (_call(None, "refused: ConnectionRefusedError", usage=None, cost_usd=None), False),
    (_call(None, refused="budget", usage=None, cost_usd=None), False),
]


def test_a_200_that_failed_mid_stream_is_failed_in_the_sums_too() -> None:
    # It may carry the usage of what streamed before the failure: that is not counted as
    # spend the agent's store would show for an answered call.
    figures = gateway_figures([_call(200), _call(200, "timeout mid-answer")])
    assert (figures["calls"], figures["answered"], figures["failed"]) == (2, 1, 1)
    assert figures["tokens_in"] == 100 and figures["usd"] == 0.001


def test_the_sums_and_the_classification_agree_on_every_shape() -> None:
    for call, whole in SHAPES:
        assert answered(call) is whole, call
        figures = gateway_figures([call])
        assert figures["answered"] == int(whole), call
        # The classification names an upstream cause only for a call the sums call failed,
        # and never one for an answered call.
        cause = gateway_cause([call])
        if whole:
            assert cause is None, call
        elif cause is not None:
            assert figures["failed"] == 1, call
    # The calls the provider failed (not the request's own 4xx, not a refusal at a cap) are
    # exactly the unanswered ones the classification blames on the infrastructure.
    blamed = [c for c, _ in SHAPES if gateway_cause([c]) is not None]
    own = [c for c, whole in SHAPES if not whole and c not in blamed]
    assert len(blamed) == 9
    assert [c.get("refused") or c["upstream"]["status"] for c in own] == [400, "budget"]
