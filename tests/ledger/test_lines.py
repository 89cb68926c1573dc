"""The ledger's counts summed over its parts (the batches of a projection)."""

from __future__ import annotations

from arenad.ledger.lines import add_stats, new_stats


def test_counts_add_up_roles_keep_their_first_order_and_a_gap_anywhere_stays() -> None:
    first, second = new_stats(), new_stats()
    first.update(lines=2, gapLines=1, byRole={"agent": 2})
    second.update(lines=3, rewardLabeled=1, byRole={"supervisor": 1, "agent": 1, "worker": 1})
    second["opencodeDbAvailable"] = False
    total = new_stats()
    for part in (first, second, new_stats()):
        add_stats(total, part)
    assert total["lines"] == 5 and total["gapLines"] == 1 and total["rewardLabeled"] == 1
    assert list(total["byRole"].items()) == [("agent", 3), ("supervisor", 1), ("worker", 1)]
    assert total["opencodeDbAvailable"] is False  # once unavailable, for the whole ledger
