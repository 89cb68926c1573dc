"""Failure classification from the provider's evidence: the shapes opencode 1.18 really
prints (recorded on this machine against the scripted model and a stand-in provider), and
never the agent's own words (issue 27, finding 6)."""

from __future__ import annotations

from typing import Any

from arenad.arms.evidence import infra_cause

URL = "http://127.0.0.1:37681/v1/chat/completions"


def api_error(message: str, status: int | None = None, **data: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"message": message, "metadata": {"url": URL}, **data}
    if status is not None:
        body["statusCode"] = status
    return {"type": "error", "sessionID": "ses_x", "error": {"name": "APIError", "data": body}}


STEP = {"type": "step_finish", "part": {"tokens": {"input": 10, "output": 2}}}
UNREACHABLE = "Cannot connect to API: Unable to connect. Is the computer able to access the url?"


def test_an_unreachable_endpoint_is_named_with_its_url() -> None:
    found = infra_cause([api_error(UNREACHABLE, isRetryable=True)])
    assert found is not None
    assert found.cause == f"provider unreachable ({URL}): {UNREACHABLE}"


def test_auth_rate_limit_and_5xx_are_the_providers() -> None:
    cases = {
        401: "provider refused the credentials (HTTP 401): bad key",
        403: "provider refused the credentials (HTTP 403): bad key",
        429: "provider rate limit (HTTP 429): bad key",
        503: "provider error (HTTP 503): bad key",
    }
    for status, cause in cases.items():
        found = infra_cause([api_error("bad key", status)])
        assert found is not None and found.cause == cause
    auth = {"type": "error", "error": {"name": "ProviderAuthError", "data": {"message": "no"}}}
    found = infra_cause([auth])
    assert found is not None and found.cause == "provider refused the credentials: no"


def test_a_completed_model_step_makes_it_the_agents_failure() -> None:
    stream = [{"type": "step_start"}, STEP, api_error(UNREACHABLE)]
    assert infra_cause(stream) is None


def test_other_errors_and_plain_failures_stay_the_agents() -> None:
    assert infra_cause([api_error("bad request", 400)]) is None
    assert infra_cause([]) is None


def test_words_are_no_evidence_only_structured_error_events_are() -> None:
    # What an agent prints, to stdout or anywhere, as text: never the provider's failure.
    for said in (
        "Error: connect ECONNREFUSED 127.0.0.1:443",
        "HTTP 502 Bad Gateway",
        "401 Unauthorized: invalid api key",
    ):
        assert infra_cause([said]) is None
        assert infra_cause([{"type": "step_start"}, said]) is None
        assert infra_cause([{"type": "log", "message": said}]) is None


def test_the_cause_is_one_bounded_line() -> None:
    found = infra_cause([api_error("line one\nline two " + "x" * 1000, 500)])
    assert found is not None
    assert "\n" not in found.cause and len(found.cause) <= 300
    assert found.cause.startswith("provider error (HTTP 500): line one line two")


def _call(status: int | None, error: str | None = None, **extra: object) -> dict[str, object]:
    return {"type": "gateway.call", "upstream": {"status": status, "error": error}, **extra}


def test_gateway_records_every_call_failed_upstream_is_the_infrastructures() -> None:
    from arenad.arms.evidence import gateway_cause

    body = '{"error": {"message": "slow down", "type": "rate_limit_error"}}'
    calls = [_call(429, "upstream 429", upstream_body=body)] * 3
    cause = gateway_cause(calls)
    assert cause is not None and cause.cause == "provider rate limit (HTTP 429): slow down"
    five = gateway_cause([_call(503, "upstream 503")])
    assert five is not None and five.cause.startswith("provider error (HTTP 503)")
    down = gateway_cause(
        [_call(None, "refused: ConnectionRefusedError", upstream_url="http://u/v1")]
    )
    assert down is not None and down.cause.startswith("provider unreachable (http://u/v1)")
    # One answered call: the agent had its turn.
    assert gateway_cause([_call(429, "upstream 429"), _call(200)]) is None
    # A refusal at the attempt's own cap, or the request's own 400: never the provider's.
    assert gateway_cause([_call(None, refused="budget")]) is None
    assert gateway_cause([_call(400, "upstream 400")]) is None
    # No calls, or lines that are not gateway records: no evidence.
    assert gateway_cause([]) is None
    assert gateway_cause([{"type": "error", "upstream": {"status": 500}}]) is None


def test_a_200_that_failed_mid_answer_is_the_infrastructures() -> None:
    """The status alone is no evidence: a 200 whose stream carried the provider's error
    event, timed out or ended before its end is a call the provider failed (issue 31)."""
    from arenad.arms.evidence import gateway_cause

    for error in (
        "upstream error in its stream: overloaded_error: Overloaded",
        "timeout mid-answer",
        "cut mid-answer: ConnectionResetError",
        "stream ended before its end event",
    ):
        cause = gateway_cause([_call(200, error)] * 2)
        assert cause is not None
        assert cause.cause == f"provider failed mid-answer (HTTP 200): {error}"
    # Mixed with other upstream failures: still every call failed; the last one names it.
    mixed = gateway_cause([_call(200, "timeout mid-answer"), _call(None, "timeout")])
    assert mixed is not None and mixed.cause == "provider timeout"
    # One call answered whole: the agent had its turn, whatever failed before.
    assert gateway_cause([_call(200, "stream ended before its end event"), _call(200)]) is None


def test_a_run_stopped_at_a_spend_cap_is_named_from_the_gateways_record() -> None:
    from arenad.arms.evidence import budget_stop

    why = "the attempt's max_usd 0.5 is reached (spent 0.510000)"
    calls = [_call(200), _call(None, refused="budget", reason=why), _call(None, refused="budget")]
    assert budget_stop(calls) == f"budget: {why} at the gateway"
    assert budget_stop([_call(200), _call(429, "upstream 429")]) is None
    # Only a call record counts (the gateway's journal line, type gateway.call).
    assert budget_stop([{"type": "error", "refused": "budget", "reason": why}]) is None
    assert budget_stop([_call(None, refused="budget")]) == (
        "budget: a spend cap is reached at the gateway"
    )
