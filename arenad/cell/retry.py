"""The retry policy: a pure function of (the failure, the cell's history, the policy).

Only infrastructure failures that happened *before the agent ran* are retried on their
own (materialize, launch, an agent that was never released, and a run the model provider
failed before any model step completed; the runner marks those ``retryable``): a new
attempt there costs nothing. A failure after the agent ran is not retried automatically — a
new attempt would pay for the agent again — and agent failures never are; `arenad retry
CELL` is the deliberate way to spend that money.
"""

from __future__ import annotations

import msgspec

from arenad.cell.machine import CellState
from events.cell import CellFailed, CellRetried


class RetryPolicy(msgspec.Struct, frozen=True, kw_only=True):
    # Automatic new attempts after infrastructure failures, per cell.
    max_infra_retries: int = 2
    # The first retry waits this long; each later one waits ``backoff_factor`` times more.
    backoff_s: float = 5.0
    backoff_factor: float = 2.0
    max_backoff_s: float = 300.0


def backoff_s(policy: RetryPolicy, retry_number: int) -> float:
    """The wait before the ``retry_number``-th automatic retry (1-based)."""
    wait = policy.backoff_s * policy.backoff_factor ** max(0, retry_number - 1)
    return min(wait, policy.max_backoff_s)


def policy_retry(
    failed_state: CellState, failure: CellFailed, policy: RetryPolicy, now_ms: int
) -> CellRetried | None:
    """The CellRetried the policy asks for after ``failure`` (already folded into
    ``failed_state``), or None when the failure stays final."""
    if failure.classification != "infrastructure" or not failure.retryable:
        return None
    # infra_failures counts this failure too; retries so far = failures - 1.
    retry_number = failed_state.infra_failures
    if retry_number > policy.max_infra_retries:
        return None
    wait_ms = round(backoff_s(policy, retry_number) * 1000)
    return CellRetried(
        attempt=failed_state.attempt + 1,
        reason=(
            f"infrastructure failure at {failure.stage} ({_first_line(failure.error)});"
            f" automatic retry {retry_number} of {policy.max_infra_retries}"
        ),
        requested_by="policy",
        not_before_ms=now_ms + wait_ms if wait_ms > 0 else None,
    )


def _first_line(text: str, limit: int = 200) -> str:
    line = text.strip().splitlines()[0] if text.strip() else "no detail"
    return line if len(line) <= limit else line[: limit - 1] + "…"
