"""The circuit breaker (issue 29, finding 6): one systematic cause must not burn through
every cell of a campaign.

A pure fold over the cell events this daemon appends, per campaign: an infrastructure
``CellFailed`` with the same cause (its stage: ``clone-fail``, ``create-fail``, ``launch``
...) as the one before adds one to the run of failures, another cause starts a new run;
anything that shows the infrastructure worked (a verdict, an agent's failure, a run's end)
ends it. When the run reaches the campaign's ``breaker_after`` (the campaign file's,
default :data:`arenad.campaign.load.DEFAULT_BREAKER_AFTER`; 0: never), :meth:`apply`
returns the trip; the daemon then pauses the campaign's unfinished cells with one
``campaign.breaker-tripped`` (arenad.daemon.daemon), and the run starts again from 0.

Only this daemon's own appends are folded (a restarted daemon starts from 0): what it
trips on is what it just caused, and a trip is in the log for anyone after.
"""

from __future__ import annotations

from collections.abc import Sequence

import msgspec

from events import cell as ev
from events.base import Event
from events.specs import campaign_of


class Trip(msgspec.Struct, frozen=True, kw_only=True):
    campaign: str
    cause: str
    failures: int
    last_error: str
    cells: list[str]


class _Run(msgspec.Struct, kw_only=True):
    cause: str
    cells: list[str]
    last_error: str


class Breaker:
    def __init__(self, default_after: int) -> None:
        self.default_after = default_after
        self.after: dict[str, int] = {}
        self._runs: dict[str, _Run] = {}

    def threshold(self, campaign: str) -> int:
        return self.after.get(campaign, self.default_after)

    def apply(self, cell_id: str, events: Sequence[Event]) -> Trip | None:
        """Fold one append of a cell; the trip when it completes a run of failures."""
        campaign = campaign_of(cell_id)
        trip: Trip | None = None
        for e in events:
            if isinstance(e, ev.CellFailed):
                if e.classification != "infrastructure":
                    self._runs.pop(campaign, None)
                    continue
                run = self._runs.get(campaign)
                if run is None or run.cause != e.stage:
                    run = self._runs[campaign] = _Run(cause=e.stage, cells=[], last_error="")
                run.cells.append(cell_id)
                run.last_error = e.error[-500:]
                after = self.threshold(campaign)
                if after > 0 and len(run.cells) >= after:
                    trip = Trip(
                        campaign=campaign,
                        cause=run.cause,
                        failures=len(run.cells),
                        last_error=run.last_error,
                        cells=list(run.cells),
                    )
                    del self._runs[campaign]
            elif isinstance(e, ev.RunCompleted | ev.RunTimedOut | ev.CellVerified):
                # The infrastructure carried a run to its end: the run of failures is over.
                self._runs.pop(campaign, None)
        return trip
