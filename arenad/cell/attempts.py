"""A cell's attempts: what each attempt came to, folded once from its events. Pure.

``attempts(records)`` turns the recorded events of ONE cell (its ``cell/<id>`` stream and
any of its ``capture/<id>/<n>`` and ``ingest/<id>/<n>`` streams) into one frozen
:class:`Attempt` per attempt, in attempt order. The ledger, the report, the export, the
view's cell page and the run-dir documents (:mod:`arenad.arms.documents`) read it, so
"what attempt n's run, verdict and spend were" is decided in one place; the machine's
fold (:mod:`arenad.cell.machine`) stays the cell's *current* state.

The rules, the same for every reader:

- **Which attempt a record is of** (:func:`attempt_of`): its event's ``attempt``, else the
  number that ends its ingest or capture stream's name (ingested lines name none). The
  cell's submission opens attempt 1; a record of no attempt opens nothing.
- **The latest fact wins** for each slot (a reverify's ``CellVerified`` replaces the
  run's, the newest judge verdict is the attempt's), except captured sessions (the first
  capture of a session id is kept), unmatched worker cwds (each once, first seen first)
  and ``verdicts`` (every judge verdict, in log order: the history a reverify leaves).
- **Times** are the events' recorded times: ``captured_at_ms`` (the recovery, else a
  failure after the run started: when the ledger's lines were settled) and
  ``settled_at_ms`` (the latest of the recovery and a failure after the start: when the
  report's spend point lands; they differ when an interrupted run's spend was recovered
  before its failure was recorded).
- ``ingested`` is None when nothing was ingested for the attempt (its figures are
  unknown, never empty-as-zero).

No file, store, clock or random source is read: records are sorted by ``seq``, so the same
records give the same attempts in any order.
"""

from __future__ import annotations

from collections.abc import Iterable
from operator import attrgetter

import msgspec

from events import capture as cap
from events import cell as ev
from events.base import Event, Recorded
from events.streams import INGEST, attempt_stream_parts, cell_of, is_cell_stream

__all__ = ["Attempt", "RunEnded", "attempt_key", "attempt_of", "attempts"]

RunEnded = ev.RunCompleted | ev.RunTimedOut | ev.RunAborted

_INGEST_KIND = INGEST.rstrip("/")
_BY_SEQ = attrgetter("seq")


class Attempt(msgspec.Struct, frozen=True, kw_only=True):
    """One attempt of a cell, as its events recorded it (None: not recorded)."""

    n: int
    # The first and last log position of a record of the attempt (any of its streams).
    first_seq: int
    last_seq: int
    materialized: ev.CellMaterialized | None = None
    started: ev.RunStarted | None = None
    started_at_ms: int | None = None
    ended: RunEnded | None = None
    ended_at_ms: int | None = None
    verified: ev.CellVerified | None = None
    patch: ev.PatchCaptured | None = None
    verify_log: ev.VerifyLogCaptured | None = None
    verdict: ev.JudgeVerdictRecorded | None = None
    # Every judge verdict of the attempt, in log order (``verdict`` is the last).
    verdicts: tuple[ev.JudgeVerdictRecorded, ...] = ()
    supervisor: ev.SupervisorOutcome | None = None
    provenance: ev.ProvenanceRecorded | None = None
    recovered: ev.CellRecovered | None = None
    recovered_at_ms: int | None = None
    failed: ev.CellFailed | None = None
    failed_at_ms: int | None = None
    settled_at_ms: int | None = None
    # Captured agent sessions, the first capture of each id, in log order.
    sessions: tuple[cap.AgentSessionCaptured, ...] = ()
    unavailable: cap.AgentStoreUnavailable | None = None
    unmatched: tuple[str, ...] = ()
    # The attempt's ingested records in log order; None: nothing was ingested.
    ingested: tuple[Recorded, ...] | None = None

    @property
    def spend(self) -> ev.SpendFigures | None:
        return self.recovered.spend if self.recovered is not None else None

    @property
    def run_dir(self) -> str | None:
        return self.materialized.run_dir if self.materialized is not None else None

    @property
    def profile_commit(self) -> str | None:
        return self.provenance.commit if self.provenance is not None else None

    @property
    def error(self) -> str | None:
        return self.failed.error if self.failed is not None else None

    @property
    def scored(self) -> bool:
        """Whether the attempt's result counts (verified as scored)."""
        return self.verified is not None and self.verified.scored

    @property
    def wall_s(self) -> float | None:
        return self.ended.wall_s if self.ended is not None else None

    @property
    def captured_at_ms(self) -> int | None:
        """When the attempt was settled for the ledger: its recovery, else its failure
        after a start; None while it has not ended."""
        if self.recovered_at_ms is not None:
            return self.recovered_at_ms
        return self.failed_at_ms if self.started is not None else None


def attempt_of(stream: str, event: Event) -> int | None:
    """The attempt a record belongs to: its event's ``attempt``, else the number that ends
    its ingest or capture stream's name; None for neither."""
    attempt = getattr(event, "attempt", None)
    if type(attempt) is int:
        return attempt
    parts = attempt_stream_parts(stream)
    return parts[2] if parts is not None else None


def attempt_key(stream: str, event: Event) -> tuple[str, int] | None:
    """(cell id, attempt) of a record of any stream, for a fold over many cells: a cell
    stream's event that names its attempt, or an event of an ingest or capture stream
    (the attempt in its name); None for any other record."""
    if is_cell_stream(stream):
        attempt = getattr(event, "attempt", None)
        return (cell_of(stream), attempt) if type(attempt) is int else None
    parts = attempt_stream_parts(stream)
    return (parts[1], parts[2]) if parts is not None else None


class _Open:
    """An attempt while its records are folded (then frozen into an :class:`Attempt`)."""

    __slots__ = (
        "ended",
        "ended_at_ms",
        "failed",
        "failed_at_ms",
        "first_seq",
        "ingested",
        "last_seq",
        "materialized",
        "n",
        "patch",
        "provenance",
        "recovered",
        "recovered_at_ms",
        "sessions",
        "settled_at_ms",
        "started",
        "started_at_ms",
        "supervisor",
        "unavailable",
        "unmatched",
        "verdict",
        "verdicts",
        "verified",
        "verify_log",
    )

    def __init__(self, n: int, seq: int) -> None:
        self.n = n
        self.first_seq = self.last_seq = seq
        self.materialized: ev.CellMaterialized | None = None
        self.started: ev.RunStarted | None = None
        self.started_at_ms: int | None = None
        self.ended: RunEnded | None = None
        self.ended_at_ms: int | None = None
        self.verified: ev.CellVerified | None = None
        self.patch: ev.PatchCaptured | None = None
        self.verify_log: ev.VerifyLogCaptured | None = None
        self.verdict: ev.JudgeVerdictRecorded | None = None
        self.verdicts: list[ev.JudgeVerdictRecorded] = []
        self.supervisor: ev.SupervisorOutcome | None = None
        self.provenance: ev.ProvenanceRecorded | None = None
        self.recovered: ev.CellRecovered | None = None
        self.recovered_at_ms: int | None = None
        self.failed: ev.CellFailed | None = None
        self.failed_at_ms: int | None = None
        self.settled_at_ms: int | None = None
        self.sessions: dict[str, cap.AgentSessionCaptured] = {}
        self.unavailable: cap.AgentStoreUnavailable | None = None
        self.unmatched: list[str] = []
        self.ingested: list[Recorded] | None = None

    def apply(self, rec: Recorded) -> None:
        e = rec.event
        at = rec.recorded_at_ms
        self.last_seq = rec.seq
        match e:
            case ev.CellMaterialized():
                self.materialized = e
            case ev.RunStarted():
                self.started, self.started_at_ms = e, at
            case ev.RunCompleted() | ev.RunTimedOut() | ev.RunAborted():
                self.ended, self.ended_at_ms = e, at
            case ev.CellVerified():
                self.verified = e
            case ev.PatchCaptured():
                self.patch = e
            case ev.VerifyLogCaptured():
                self.verify_log = e
            case ev.CellRecovered():
                self.recovered, self.recovered_at_ms, self.settled_at_ms = e, at, at
            case ev.CellFailed():
                self.failed, self.failed_at_ms = e, at
                if self.started is not None:  # a failure before the run settles no spend
                    self.settled_at_ms = at
            case ev.JudgeVerdictRecorded():
                self.verdict = e
                self.verdicts.append(e)
            case ev.SupervisorOutcome():
                self.supervisor = e
            case ev.ProvenanceRecorded():
                self.provenance = e
            case cap.AgentSessionCaptured():
                self.sessions.setdefault(e.session_id, e)
            case cap.AgentStoreUnavailable():
                self.unavailable = e
            case cap.WorkerCwdUnmatched():
                if e.cwd not in self.unmatched:
                    self.unmatched.append(e.cwd)
            case _:
                parts = attempt_stream_parts(rec.stream)
                if parts is not None and parts[0] == _INGEST_KIND:
                    if self.ingested is None:
                        self.ingested = []
                    self.ingested.append(rec)

    def freeze(self) -> Attempt:
        return Attempt(
            n=self.n,
            first_seq=self.first_seq,
            last_seq=self.last_seq,
            materialized=self.materialized,
            started=self.started,
            started_at_ms=self.started_at_ms,
            ended=self.ended,
            ended_at_ms=self.ended_at_ms,
            verified=self.verified,
            patch=self.patch,
            verify_log=self.verify_log,
            verdict=self.verdict,
            verdicts=tuple(self.verdicts),
            supervisor=self.supervisor,
            provenance=self.provenance,
            recovered=self.recovered,
            recovered_at_ms=self.recovered_at_ms,
            failed=self.failed,
            failed_at_ms=self.failed_at_ms,
            settled_at_ms=self.settled_at_ms,
            sessions=tuple(self.sessions.values()),
            unavailable=self.unavailable,
            unmatched=tuple(self.unmatched),
            ingested=tuple(self.ingested) if self.ingested is not None else None,
        )


def attempts(records: Iterable[Recorded]) -> tuple[Attempt, ...]:
    """One cell's attempts, in attempt order (see the module's docstring)."""
    opened: dict[int, _Open] = {}
    for rec in sorted(records, key=_BY_SEQ):
        n = attempt_of(rec.stream, rec.event)
        if n is None:
            continue
        a = opened.get(n)
        if a is None:
            a = opened[n] = _Open(n, rec.seq)
        a.apply(rec)
    return tuple(opened[n].freeze() for n in sorted(opened))
