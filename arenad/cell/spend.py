"""What one run of a cell cost, by its arm's rule. Pure.

For solo and command arms it is the ``spend.cost_usd`` of the attempt's CellRecovered
(the captured opencode sessions); for a supervisor, its own whole-tree total
(``spend.spent_usd``, else the SupervisorOutcome's ``spent_usd``), because the captured
sessions are only its workers and would undercount it against a solo arm. None is
unknown, never 0. The report and the live progress (daemon line, view) both count spend
with it, so they agree.
"""

from __future__ import annotations

from events import cell as ev

__all__ = ["run_cost"]


def run_cost(
    kind: str, recovered: ev.CellRecovered | None, supervisor: ev.SupervisorOutcome | None
) -> float | None:
    """The run's cost in USD (``kind``: the arm spec's tag), or None when unknown."""
    spend = recovered.spend if recovered is not None else None
    if kind == "supervisor":
        if spend is not None and spend.spent_usd is not None:
            return spend.spent_usd
        return supervisor.spent_usd if supervisor is not None else None
    return spend.cost_usd if spend is not None else None
