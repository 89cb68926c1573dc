"""Daemon, campaign and control events (streams ``daemon``, ``campaign/<name>``, ``control``)."""

from __future__ import annotations

from typing import Literal

import msgspec

from events.base import Event


class InstanceSelection(msgspec.Struct, frozen=True, kw_only=True):
    """Which rows of the campaign's instances a submission ran (the keys as given, applied
    in this order), and how many rows there were and were kept."""

    instance_ids: list[str] | None = None
    instance_filter: str | None = None
    limit: int | None = None
    rows: int = 0
    selected: int = 0


class CampaignSubmitted(Event, tag="campaign.submitted", frozen=True, kw_only=True):
    name: str
    source_path: str
    spec_sha256: str
    cell_ids: list[str]
    max_parallel: int | None = None
    # The campaign's spend cap ([budget]); None: none. The first submission's cap is the
    # campaign's until a BudgetSet changes it.
    budget_usd: float | None = None
    abort_running: bool = False
    selection: InstanceSelection | None = None
    # Arm name -> kind ("solo", "supervisor", "command"): whether an arm can report cost.
    arm_kinds: dict[str, str] = msgspec.field(default_factory=dict)
    # The circuit breaker: this many consecutive infrastructure failures with the same
    # cause pause the campaign (0: never); None: the default (recorded before it was kept).
    breaker_after: int | None = None
    # [budget] expected_usd_per_attempt: what an attempt of each arm is expected to cost
    # until one of it ended with a known cost (the budget reservations' prior); None: none.
    expected_usd_per_attempt: float | None = None


class BreakerTripped(Event, tag="campaign.breaker-tripped", frozen=True, kw_only=True):
    """``failures`` consecutive infrastructure failures of the campaign's cells had the same
    cause (their CellFailed stage): the daemon paused the campaign's unfinished cells (their
    CellPaused in the same transaction). ``arenad resume --campaign`` lets them go on."""

    cause: str
    failures: int
    # The last failure's error (its end), and the cells that failed, in order.
    last_error: str
    cells: list[str] = msgspec.field(default_factory=list)
    paused: int = 0


class BudgetSet(Event, tag="campaign.budget-set", frozen=True, kw_only=True):
    """An operator changed the campaign's spend cap (``arenad set-budget``)."""

    max_usd: float
    abort_running: bool | None = None  # None: as it was


class BudgetReached(Event, tag="campaign.budget-reached", frozen=True, kw_only=True):
    """The campaign's spend reached its cap: the daemon starts no new cell of it (and, with
    ``action = "abort"``, aborted the running ones). Recorded once per cap."""

    max_usd: float
    spent_usd: float
    # Attempts whose cost is unknown (a command arm, ...): the spend is at least this much.
    unknown_attempts: int = 0
    running: int = 0
    # Whose cap it was: the campaign's own, or the daemon's --max-usd.
    source: Literal["campaign", "daemon"] = "campaign"
    action: Literal["hold", "abort"] = "hold"


class DaemonStarted(Event, tag="daemon.started", frozen=True, kw_only=True):
    pid: int
    hostname: str
    max_parallel: int
    version: str
    # --max-usd: a spend cap on every campaign this daemon runs.
    max_usd: float | None = None


class RunDirSize(msgspec.Struct, frozen=True, kw_only=True):
    """How much a cell attempt's run dir (workspace, private home, output) held."""

    cell_id: str
    attempt: int
    bytes: int


class DiskFull(Event, tag="daemon.disk-full", frozen=True, kw_only=True):
    """The disk under the store filled (arenad.daemon.diskfull): recorded in the room the
    store's reserve gave back, just before the daemon stops. ``largest``: the home's
    largest run dirs, largest first; ``ended``: the cell whose run was ended for it
    (None: none of this daemon's)."""

    pid: int
    error: str
    reserve_released_bytes: int
    largest: list[RunDirSize] = msgspec.field(default_factory=list)
    ended: str | None = None


class DaemonStopped(Event, tag="daemon.stopped", frozen=True, kw_only=True):
    pid: int
    reason: str


class MaxParallelChanged(Event, tag="control.max-parallel", frozen=True, kw_only=True):
    max_parallel: int
