"""What one run of a cell cost, by its arm's rule. Pure.

For solo arms it is the ``spend.cost_usd`` of the attempt's CellRecovered (the captured
opencode sessions); for a supervisor, its own whole-tree total (``spend.spent_usd``, else
the SupervisorOutcome's ``spent_usd``), because the captured sessions are only its workers
and would undercount it against a solo arm. A command arm's cost is unknown: its store is
the agent's own (``arenad.recovery.capture``), whatever an older arenad recorded of it.
None is unknown, never 0. The report and the live progress (daemon line, view) both count
spend with it, so they agree.

Every figure is checked as it is read (:func:`arenad.cell.bounds.attempt_usd`): a value
an older arenad recorded from a forged store (negative, 1e300) is unknown here, so no
fold adds it or overflows on it.
"""

from __future__ import annotations

from arenad.cell.bounds import attempt_tokens, attempt_usd
from arenad.cell.kinds import kind_of
from events import cell as ev

__all__ = ["run_cost", "run_tokens"]


def run_cost(
    kind: str, recovered: ev.CellRecovered | None, supervisor: ev.SupervisorOutcome | None
) -> float | None:
    """The run's cost in USD (``kind``: the arm spec's tag), or None when unknown."""
    spend = recovered.spend if recovered is not None else None
    source = kind_of(kind).cost_of_record
    if source == "driver":
        if spend is not None and spend.spent_usd is not None:
            return attempt_usd(spend.spent_usd)
        return attempt_usd(supervisor.spent_usd) if supervisor is not None else None
    if source == "none":
        return None
    return attempt_usd(spend.cost_usd) if spend is not None else None


def run_tokens(recovered: ev.CellRecovered | None) -> tuple[int | None, int | None]:
    """The run's recovered (input, output) tokens, each None when unknown or out of bounds."""
    if recovered is None:
        return None, None
    spend = recovered.spend
    return attempt_tokens(spend.tokens_in), attempt_tokens(spend.tokens_out)
