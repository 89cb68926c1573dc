"""The retry policy is a pure function of (failure, the cell's history, the policy)."""

from __future__ import annotations

import msgspec
from hypothesis import given
from hypothesis import strategies as st

from arenad.cell.machine import CellState, CellStatus, apply
from arenad.cell.retry import RetryPolicy, backoff_s, policy_retry
from events.cell import CellFailed, CellSubmitted
from tests.events.samples import make_spec

NOW = 1_000_000


def _failed_state(infra_failures_before: int, failure: CellFailed) -> CellState:
    state = apply(None, CellSubmitted(spec=make_spec(), attempt=1), 0)
    state = msgspec.structs.replace(state, infra_failures=infra_failures_before)
    return apply(state, failure, NOW)


def _failure(classification: str = "infrastructure", retryable: bool = True) -> CellFailed:
    return CellFailed(
        attempt=1,
        stage="materialize",
        error="boom",
        classification=classification,  # type: ignore[arg-type]
        retryable=retryable,
    )


def test_an_infrastructure_failure_before_the_run_is_retried_with_backoff() -> None:
    failure = _failure()
    retry = policy_retry(_failed_state(0, failure), failure, RetryPolicy(backoff_s=5), NOW)
    assert retry is not None
    assert (retry.attempt, retry.requested_by, retry.not_before_ms) == (2, "policy", NOW + 5000)


def test_agent_operator_and_not_retryable_failures_are_final() -> None:
    policy = RetryPolicy()
    for failure in (
        _failure("agent"),
        _failure("operator"),
        _failure("infrastructure", retryable=False),
    ):
        assert policy_retry(_failed_state(0, failure), failure, policy, NOW) is None


@given(
    before=st.integers(min_value=0, max_value=20),
    limit=st.integers(min_value=0, max_value=10),
    base=st.floats(min_value=0, max_value=100),
)
def test_retries_are_bounded_and_backoff_grows(before: int, limit: int, base: float) -> None:
    policy = RetryPolicy(max_infra_retries=limit, backoff_s=base)
    failure = _failure()
    state = _failed_state(before, failure)
    assert state.status is CellStatus.FAILED
    retry = policy_retry(state, failure, policy, NOW)
    # The n-th infrastructure failure is retried while n - 1 retries stay within the bound.
    assert (retry is not None) == (before + 1 <= limit)
    if retry is not None:
        wait = backoff_s(policy, before + 1)
        assert wait <= policy.max_backoff_s
        assert retry.not_before_ms == (NOW + round(wait * 1000) if round(wait * 1000) else None)
        assert backoff_s(policy, before + 2) >= wait
