"""Live progress: a fold of the log into per-campaign counts by state and spend so far.

What ``arenad view``'s overview shows and ``arenad daemon``'s live line prints. It is
fed events in log order (only those tagged one of ``PROGRESS_TAGS``: the bulk of the
log, ingested lines and captures, is never read) and answers from memory, so a follower
keeps it current by applying what was appended since. Pure: no store, no file, no clock
(times come from ``recorded_at_ms``; the ETA takes "now" as an argument).

Spend follows :func:`arenad.cell.spend.run_cost`, as the report does: every attempt that
started a run counts (retried ones too); a run counts once it settled (recovered, or
failed after it started); a settled run whose cost is unknown adds nothing and is counted
apart (``cost_unknown_runs``), never as 0. Runs still going are ``running``.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable

import msgspec

from arenad.cell.machine import TERMINAL, CellStatus, next_status
from arenad.cell.spend import run_cost
from events import cell as ev
from events.base import Event, Recorded
from events.control import DaemonStarted, DaemonStopped, MaxParallelChanged
from events.streams import cell_of, is_cell_stream

__all__ = [
    "PROGRESS_TAGS",
    "STATES",
    "CampaignLine",
    "CellLine",
    "DaemonLine",
    "Progress",
    "ProgressFold",
    "eta_s",
]

# Every state, in the machine's order (a table's columns).
STATES: tuple[str, ...] = tuple(str(s) for s in CellStatus)

# What moves a cell or its spend, and the daemon's comings and goings. Side events that
# move nothing (hangs, verdicts, captures) are not read.
PROGRESS_TAGS: frozenset[str] = frozenset(
    {
        "cell.submitted",
        "cell.materialized",
        "run.started",
        "run.completed",
        "run.timed_out",
        "run.aborted",
        "cell.verified",
        "cell.recovered",
        "cell.failed",
        "cell.retried",
        "cell.paused",
        "cell.resumed",
        "cell.supervisor-outcome",
        "daemon.started",
        "daemon.stopped",
        "control.max-parallel",
    }
)


class CellLine(msgspec.Struct, frozen=True, kw_only=True):
    cell_id: str
    campaign: str
    instance_id: str
    arm: str
    rep: int
    attempt: int
    state: str
    paused: bool
    runs: int
    cost_usd: float
    cost_unknown_runs: int
    updated_at_ms: int


class CampaignLine(msgspec.Struct, frozen=True, kw_only=True):
    """One campaign's figures (or, named "", every campaign's)."""

    name: str
    cells: int
    # Every state of STATES, 0 included.
    states: dict[str, int]
    paused: int
    runs: int
    running: int
    cost_usd: float
    cost_unknown_runs: int


class DaemonLine(msgspec.Struct, frozen=True, kw_only=True):
    """The latest daemon to start; ``stopped_at_ms`` None: no stop recorded (it runs, or
    died without recording one)."""

    pid: int
    hostname: str
    max_parallel: int
    started_at_ms: int
    stopped_at_ms: int | None
    stop_reason: str | None


class Progress(msgspec.Struct, frozen=True, kw_only=True):
    last_seq: int
    campaigns: list[CampaignLine]
    total: CampaignLine
    daemon: DaemonLine | None


class _Run:
    __slots__ = ("recovered", "settled", "supervisor")

    def __init__(self) -> None:
        self.recovered: ev.CellRecovered | None = None
        self.supervisor: ev.SupervisorOutcome | None = None
        self.settled = False


class _Cell:
    __slots__ = ("attempt", "kind", "paused", "runs", "spec", "status", "updated_at_ms")

    def __init__(self, submitted: ev.CellSubmitted, at_ms: int) -> None:
        self.spec = submitted.spec
        kind = type(submitted.spec.arm).__struct_config__.tag
        self.kind = kind if isinstance(kind, str) else ""
        self.status: CellStatus = CellStatus.SUBMITTED
        self.attempt = submitted.attempt
        self.paused = False
        self.runs: dict[int, _Run] = {}
        self.updated_at_ms = at_ms

    def cost(self) -> tuple[list[float], int, int]:
        """(known costs of the settled runs, settled runs of unknown cost, runs)."""
        known: list[float] = []
        unknown = 0
        for run in self.runs.values():
            if not run.settled:
                continue
            cost = run_cost(self.kind, run.recovered, run.supervisor)
            if cost is None:
                unknown += 1
            else:
                known.append(cost)
        return known, unknown, len(self.runs)


class ProgressFold:
    """Apply events in log order; ask for a ``snapshot`` (or a campaign's cells) any time."""

    def __init__(self) -> None:
        self._cells: dict[str, _Cell] = {}
        self._daemon: DaemonLine | None = None
        self.last_seq = 0
        # When cells became terminal (recorded times, in log order): for an ETA.
        self._terminal_at_ms: list[int] = []

    def seen(self, seq: int) -> None:
        """The log was read up to ``seq`` (events it does not read included)."""
        self.last_seq = max(self.last_seq, seq)

    def apply_all(self, records: Iterable[Recorded]) -> None:
        for r in records:
            self.apply(r)

    def apply(self, r: Recorded) -> None:
        self.last_seq = max(self.last_seq, r.seq)
        e = r.event
        if isinstance(e, DaemonStarted):
            self._daemon = DaemonLine(
                pid=e.pid,
                hostname=e.hostname,
                max_parallel=e.max_parallel,
                started_at_ms=r.recorded_at_ms,
                stopped_at_ms=None,
                stop_reason=None,
            )
            return
        if isinstance(e, DaemonStopped):
            if self._daemon is not None and self._daemon.pid == e.pid:
                self._daemon = msgspec.structs.replace(
                    self._daemon, stopped_at_ms=r.recorded_at_ms, stop_reason=e.reason
                )
            return
        if isinstance(e, MaxParallelChanged):
            if self._daemon is not None and self._daemon.stopped_at_ms is None:
                self._daemon = msgspec.structs.replace(self._daemon, max_parallel=e.max_parallel)
            return
        if isinstance(e, ev.CellSubmitted):
            if e.spec.cell_id not in self._cells:
                self._cells[e.spec.cell_id] = _Cell(e, r.recorded_at_ms)
            return
        cell = self._cells.get(cell_of(r.stream)) if is_cell_stream(r.stream) else None
        if cell is None:
            return
        self._apply_to(cell, e, r)

    def _apply_to(self, cell: _Cell, e: Event, r: Recorded) -> None:
        cell.updated_at_ms = r.recorded_at_ms
        after = next_status(cell.status, r.tag)
        if after is not None:
            if after in TERMINAL and cell.status not in TERMINAL:
                self._terminal_at_ms.append(r.recorded_at_ms)
            cell.status = after
        match e:
            case ev.CellRetried():
                cell.attempt = e.attempt
            case ev.CellPaused():
                cell.paused = True
            case ev.CellResumed():
                cell.paused = False
            case ev.RunStarted():
                cell.runs[e.attempt] = _Run()
            case ev.CellRecovered() if e.attempt in cell.runs:
                cell.runs[e.attempt].recovered = e
                cell.runs[e.attempt].settled = True
            case ev.CellFailed() if e.attempt in cell.runs:
                cell.runs[e.attempt].settled = True
            case ev.SupervisorOutcome() if e.attempt in cell.runs:
                cell.runs[e.attempt].supervisor = e

    # -- answers ---------------------------------------------------------------------

    def snapshot(self) -> Progress:
        by_campaign: dict[str, list[_Cell]] = defaultdict(list)
        for cell in self._cells.values():
            by_campaign[cell.spec.campaign].append(cell)
        lines = [_line(name, by_campaign[name]) for name in sorted(by_campaign)]
        return Progress(
            last_seq=self.last_seq,
            campaigns=lines,
            total=_line("", list(self._cells.values())),
            daemon=self._daemon,
        )

    def cells(self, campaign: str) -> list[CellLine]:
        """A campaign's cells, by instance, arm and rep ([] for an unknown campaign)."""
        chosen = [c for c in self._cells.values() if c.spec.campaign == campaign]
        chosen.sort(key=lambda c: (c.spec.instance.instance_id, c.spec.arm.name, c.spec.rep))
        out = []
        for c in chosen:
            cost, unknown, runs = c.cost()
            out.append(
                CellLine(
                    cell_id=c.spec.cell_id,
                    campaign=campaign,
                    instance_id=c.spec.instance.instance_id,
                    arm=c.spec.arm.name,
                    rep=c.spec.rep,
                    attempt=c.attempt,
                    state=str(c.status),
                    paused=c.paused,
                    runs=runs,
                    cost_usd=math.fsum(cost),
                    cost_unknown_runs=unknown,
                    updated_at_ms=c.updated_at_ms,
                )
            )
        return out

    def finished_since(self, since_ms: int) -> int:
        """Cells that became terminal at or after ``since_ms``."""
        return sum(1 for t in self._terminal_at_ms if t >= since_ms)


def _line(name: str, cells: list[_Cell]) -> CampaignLine:
    states = dict.fromkeys(STATES, 0)
    costs: list[float] = []
    unknown = runs = 0
    for c in cells:
        states[str(c.status)] += 1
        cost, u, r = c.cost()
        costs += cost
        unknown += u
        runs += r
    return CampaignLine(
        name=name,
        cells=len(cells),
        states=states,
        paused=sum(c.paused for c in cells),
        runs=runs,
        running=states[str(CellStatus.RUNNING)],
        cost_usd=math.fsum(costs),
        cost_unknown_runs=unknown,
    )


def eta_s(remaining: int, finished: int, elapsed_s: float) -> float | None:
    """Seconds until ``remaining`` cells finish at the pace of the ``finished`` ones over
    ``elapsed_s`` (None before the first one finished: no pace yet)."""
    if remaining == 0:
        return 0.0
    if finished == 0 or elapsed_s <= 0:
        return None
    return remaining * elapsed_s / finished
