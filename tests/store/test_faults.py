"""ARENAD_FAULT parsing and triggering (the crash itself is exercised by the daemon tests:
tests/daemon/test_restart.py and test_crash_matrix.py kill real daemons this way)."""

from __future__ import annotations

import pytest

from arenad.errors import UserError
from arenad.store.faults import FaultPlan, fault_from_env, parse_fault


def test_unset_arms_nothing() -> None:
    assert fault_from_env({}) is None
    assert fault_from_env({"ARENAD_FAULT": "  "}) is None


def test_a_spec_names_action_tag_and_occurrence() -> None:
    assert parse_fault("crash-after:run.started") == FaultPlan(
        action="crash-after", tag="run.started"
    )
    assert parse_fault("full-after:ingest.line:3").nth == 3


@pytest.mark.parametrize(
    "spec",
    [
        "crash:run.started",
        "crash-after",
        "crash-after:",
        "crash-after:run.started:0",
        "a:b:c:d",
        # A tag no event has: the fault would never fire (issue 14, finding 10).
        "crash-after:run.startd",
        "full-after:x:2",
    ],
)
def test_a_bad_spec_is_a_user_error(spec: str) -> None:
    with pytest.raises(UserError, match="ARENAD_FAULT"):
        parse_fault(spec)


def test_full_after_fires_on_the_nth_matching_commit_only() -> None:
    plan = parse_fault("full-after:ingest.line:2")
    plan.before_commit({"ingest.line"})  # not a crash-before plan: nothing happens
    assert plan.after_commit({"cell.materialized"}) is None
    assert plan.after_commit({"ingest.line"}) is None
    assert plan.after_commit({"ingest.line", "run.started"}) == "full-after"
    assert plan.after_commit({"ingest.line"}) is None
