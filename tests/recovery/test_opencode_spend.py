from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from arenad.recovery.opencode_spend import (
    Spend,
    SpendSource,
    SupSpend,
    session_spend,
    sup_spend,
    tree_spend,
)
from arenad.recovery.opencode_store import capture_session_tree, capture_sessions_by_directory
from events.capture import AgentSessionCaptured, MessageRow, PartRow
from tests.recovery.opencode_fixture import StoreWriter, assistant_data, step_finish, user_data


def _cap(
    sid: str,
    *,
    row: dict[str, Any] | None = None,
    parent: str | None = None,
    directory: str = "/w",
    parts: list[Any] | None = None,
) -> AgentSessionCaptured:
    part_rows = [
        PartRow(id=f"p{i}", message_id="m", data=p if isinstance(p, str) else json.dumps(p))
        for i, p in enumerate(parts or [])
    ]
    return AgentSessionCaptured(
        attempt=1,
        purpose="solo",
        store_path="/s",
        session_id=sid,
        parent_id=parent,
        directory=directory,
        row={"id": sid, **(row or {})},
        messages=[MessageRow(id="m", time_created=1, data="{}")],
        parts=part_rows,
    )


def _columns(cost: float, i: int, o: int, r: int, cr: int, cw: int) -> dict[str, Any]:
    return {
        "cost": cost,
        "tokens_input": i,
        "tokens_output": o,
        "tokens_reasoning": r,
        "tokens_cache_read": cr,
        "tokens_cache_write": cw,
    }


def test_the_columns_win_when_present() -> None:
    cap = _cap("s", row=_columns(0.25, 100, 20, 5, 7, 1), parts=[step_finish(9, 9, 9, 9, 9, 9)])
    assert session_spend(cap) == Spend(0.25, 100, 20, 5, 7, 1, "columns")


def test_null_columns_count_zero() -> None:
    row = _columns(0.25, 100, 20, 5, 7, 1) | {"tokens_cache_write": None, "cost": None}
    assert session_spend(_cap("s", row=row)) == Spend(0.0, 100, 20, 5, 7, 0, "columns")


def test_without_columns_the_step_finish_parts_are_summed() -> None:
    parts: list[Any] = [
        {"type": "step-start"},
        step_finish(0.5, 800, 43, 7, 200, 0),
        {"type": "text", "text": "x", "tokens": {"input": 1000}, "cost": 5},
        step_finish(0.25, 10, 1, 0, 0, 3),
        {"type": "step-finish", "cost": "1", "tokens": {"input": "9", "cache": None}},
        "{not json",
        "[1, 2]",
    ]
    spend = session_spend(_cap("s", row={"version": "1.14.41"}, parts=parts))
    assert spend == Spend(0.75, 810, 44, 7, 200, 3, "step-finish")


def test_a_partial_column_set_falls_back() -> None:
    row = _columns(1.0, 1, 1, 1, 1, 1)
    del row["tokens_cache_write"]
    spend = session_spend(_cap("s", row=row, parts=[step_finish(0.5, 2, 2, 2, 2, 2)]))
    assert spend.source == "step-finish" and spend.tokens_input == 2


def test_tree_spend_adds_every_descendant_once() -> None:
    caps = [
        _cap("root", row=_columns(0.5, 100, 10, 1, 0, 0)),
        _cap("child", parent="root", parts=[step_finish(0.25, 50, 5, 0, 2, 0)]),
        _cap("grandchild", parent="child", row=_columns(0.25, 1, 1, 1, 1, 1)),
        _cap("stranger", row=_columns(9, 9, 9, 9, 9, 9)),
    ]
    assert tree_spend(caps, "root") == Spend(1.0, 151, 16, 2, 3, 1, "mixed")
    assert tree_spend(caps, "child").tokens_input == 51
    assert tree_spend(caps, "nope") == Spend(0.0, 0, 0, 0, 0, 0, "none")


def test_sup_spend_counts_sessions_in_the_worker_cwds() -> None:
    caps = [
        _cap("w1", directory="/c1", row=_columns(0, 100, 10, 5, 0, 0)),
        # A subagent shares its parent's directory: the reference's SQL counts it.
        _cap("w1_sub", directory="/c1", parent="w1", row=_columns(0, 50, 5, 0, 0, 0)),
        # A child elsewhere is captured for the tree but not counted by the reference.
        _cap("w1_far", directory="/x", parent="w1", row=_columns(0, 1000, 1000, 0, 0, 0)),
        _cap("w2", directory="/c2", row=_columns(0, 1, 2, 3, 0, 0)),
    ]
    assert sup_spend(caps, ["/c1", "/c2", "/c1", "/c3"]) == SupSpend(
        worker_cwds=["/c1", "/c2", "/c3"],
        worker_sessions=3,
        worker_tok_in=151,
        worker_tok_out=25,
        worker_tok_sqlite=176,
    )


def test_sup_spend_of_an_unavailable_store_is_null_not_zero() -> None:
    assert sup_spend(None, ["/c1"]) == SupSpend(["/c1"], None, None, None, None)


@pytest.mark.parametrize("old", [False, True])
def test_spend_from_a_real_store_agrees_across_store_versions(tmp_path: Path, old: bool) -> None:
    w = StoreWriter(tmp_path / "opencode.db", old=old)
    try:
        w.session("root", "/clone", time_created=1, usage=(0.75, 810, 44, 7, 200, 3))
        w.session("sub", "/clone", parent_id="root", time_created=2, usage=(0.5, 5, 5, 0, 0, 0))
        w.message("root", "m1", 1, user_data())
        w.message("root", "m2", 2, assistant_data())
        w.part("root", "m2", "p1", step_finish(0.5, 800, 43, 7, 200, 0))
        w.part("root", "m2", "p2", step_finish(0.25, 10, 1, 0, 0, 3))
        w.message("sub", "m3", 3, assistant_data())
        w.part("sub", "m3", "p3", step_finish(0.5, 5, 5, 0, 0, 0))
        tree = capture_session_tree(w.path, ["root"], 1)
        workers = capture_sessions_by_directory(w.path, ["/clone"], 1)
    finally:
        w.close()
    assert isinstance(tree, list) and isinstance(workers, tuple)
    source: SpendSource = "step-finish" if old else "columns"
    assert session_spend(tree[0]) == Spend(0.75, 810, 44, 7, 200, 3, source)
    assert tree_spend(tree, "root") == Spend(1.25, 815, 49, 7, 200, 3, source)
    assert sup_spend(workers[0], ["/clone"]) == SupSpend(["/clone"], 2, 815, 56, 871)


def test_sup_spend_without_worker_cwds_is_zero_as_the_reference() -> None:
    """The reference's recoverSupSpend: no worker cwds → zeros, the store never opened
    (issue 29, finding 9); so an unavailable store does not make them unknown."""
    assert sup_spend(None, []) == SupSpend([], 0, 0, 0, 0)
    assert sup_spend([], []) == SupSpend([], 0, 0, 0, 0)
