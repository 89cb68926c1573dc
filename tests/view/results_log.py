"""A bigger log for the campaign page's tests: campaign ``big``, ``CELLS`` cells over two
arms, one of each result in turn, submitted in one transaction (events 1 to ``CELLS``) and
moved on after. One instance id and one failure are hostile markup."""

from __future__ import annotations

from pathlib import Path

from arenad.home import Home, open_store
from arenad.store.base import AppendRequest
from events import cell as ev
from events.base import Event
from events.specs import CellSpec
from events.streams import cell_stream
from tests.events.samples import make_spec, sample
from tests.report.arena_log import Tick

CELLS = 230
XSS_INSTANCE = "i<img src=x onerror=window.__xss=1>"
XSS_ERROR = "</td><script>window.__xss='why'</script> provider down"
RESULT_ORDER = ("resolved", "unresolved", "not_scored", "running", "pending")


def instance(n: int) -> str:
    return XSS_INSTANCE if n == 7 else f"i{n:03d}"


def spec_of(n: int) -> CellSpec:
    return make_spec(campaign="big", instance_id=instance(n), arm="A" if n % 2 else "B")


def outcome(n: int) -> str:
    return RESULT_ORDER[n % 5]


def _events(n: int) -> list[Event]:
    started: list[Event] = [sample(ev.CellMaterialized), sample(ev.RunStarted)]
    match outcome(n):
        case "resolved" | "unresolved":
            passed = outcome(n) == "resolved"
            return [
                *started,
                ev.RunCompleted(attempt=1, rc=0, wall_s=float(n)),
                ev.CellVerified(
                    attempt=1, scored=True, verify_rc=0 if passed else 1, verify_pass=passed
                ),
                ev.CellRecovered(
                    attempt=1,
                    store_available=True,
                    spend=ev.SpendFigures(sessions=1, cost_usd=n / 1000),
                ),
            ]
        case "not_scored":
            return [
                ev.CellFailed(
                    attempt=1, stage="run", error=XSS_ERROR, classification="infrastructure"
                )
            ]
        case "running":
            return started
    return []


def finish(n: int) -> list[AppendRequest]:
    """A running cell ``n`` resolved: what a daemon appends as it ends."""
    events: list[Event] = [
        ev.RunCompleted(attempt=1, rc=0, wall_s=1.0),
        ev.CellVerified(attempt=1, scored=True, verify_rc=0, verify_pass=True),
        ev.CellRecovered(
            attempt=1, store_available=True, spend=ev.SpendFigures(sessions=1, cost_usd=0.5)
        ),
    ]
    return [AppendRequest(cell_stream(spec_of(n).cell_id), 3, events)]


async def build_results_log(home: Path) -> None:
    async with open_store(Home(home), clock=Tick(), create=True) as store:
        await store.append_many(
            [
                AppendRequest(
                    cell_stream(spec_of(n).cell_id), 0, [ev.CellSubmitted(spec=spec_of(n))]
                )
                for n in range(CELLS)
            ]
        )
        moved = [
            AppendRequest(cell_stream(spec_of(n).cell_id), 1, _events(n))
            for n in range(CELLS)
            if _events(n)
        ]
        for i in range(0, len(moved), 50):
            await store.append_many(moved[i : i + 50])
