"""The spend read model: each campaign's recovered attempts' cost, kept in the append's
transaction (migrations/0008_campaign_spend.sql), so `arenad campaigns` reads a few rows
per campaign instead of folding every run's events.

An attempt's share of its campaign's spend is final once it is recovered (the cost of
record, :func:`arenad.cell.spend.run_cost`); until then it is the live figure its ingested
lines give. So :class:`SpendProjector` follows only the cell and campaign streams: it keeps
each attempt's started / ended / recovered marks and, at its recovery, adds its final
share to ``campaign_spend``. The attempts still open are few (running, or ended without a
recovery); :func:`read_spend` folds them with :class:`arenad.budget.spend.SpendFold` from
their own events and ingest streams, and adds the two. The same fold over the whole log
(:func:`arenad.readmodels.campaigns.load_spend`) is the contract: tests compare the two.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import aiosqlite
import msgspec

from arenad.budget.spend import SPEND_TAGS, units
from arenad.cell.spend import run_cost
from arenad.store.rows import decode_rows
from events import cell as ev
from events.base import Recorded
from events.control import CampaignSubmitted
from events.specs import arm_of, campaign_of
from events.streams import CAMPAIGN, cell_of, is_cell_stream

_supervisor_decoder = msgspec.json.Decoder(ev.SupervisorOutcome)
_encoder = msgspec.json.Encoder()
_CHUNK = 500

# The events that make the fold know an attempt (the others of an unknown attempt cost
# nothing: the end of an attempt that never started).
_OPENING = (ev.RunStarted, ev.CellRecovered, ev.SupervisorOutcome)
_ENDING = (ev.RunCompleted, ev.RunTimedOut, ev.RunAborted, ev.CellFailed)
_READ = (*_OPENING, *_ENDING)
# Their tags: a string lookup per event, cheaper than isinstance on the append path.
_READ_TAGS = frozenset(str(t.__struct_config__.tag) for t in _READ)
_SUBMITTED = str(CampaignSubmitted.__struct_config__.tag)


@dataclass(slots=True)
class _Attempt:
    started: bool = False
    ended: bool = False
    recovered: bool = False
    supervisor: bytes | None = None
    changed: bool = False


class _Final(msgspec.Struct):
    """A campaign's recovered attempts that started: count, known cost, unknown count."""

    attempts: int = 0
    cost_units: int = 0
    unknown: int = 0


_ATTEMPT_UPSERT = (
    "INSERT OR REPLACE INTO spend_attempts (cell_id, attempt, started, ended, recovered,"
    " supervisor) VALUES (?, ?, ?, ?, ?, ?)"
)
_CAMPAIGN_UPSERT = (
    "INSERT INTO campaign_spend (campaign, attempts, cost_units, unknown) VALUES (?, ?, ?, ?)"
    " ON CONFLICT (campaign) DO UPDATE SET attempts = attempts + excluded.attempts,"
    " cost_units = cost_units + excluded.cost_units, unknown = unknown + excluded.unknown"
)


class SpendProjector:
    name: str = "spend"
    tables: tuple[str, ...] = ("spend_arms", "spend_attempts", "campaign_spend", "spend_incomplete")

    def wants(self, stream: str) -> bool:
        return is_cell_stream(stream) or stream.startswith(CAMPAIGN)

    async def apply(self, db: aiosqlite.Connection, batch: Sequence[Recorded]) -> None:
        # Only the cells with an event the fold reads (a submission's batch reads nothing).
        ids = sorted({cell_of(r.stream) for r in batch if r.tag in _READ_TAGS})
        attempts: dict[tuple[str, int], _Attempt] = {}
        for i in range(0, len(ids), _CHUNK):
            chunk = ids[i : i + _CHUNK]
            rows = await db.execute_fetchall(
                "SELECT cell_id, attempt, started, ended, recovered, supervisor"
                f" FROM spend_attempts WHERE cell_id IN ({','.join('?' * len(chunk))})",
                chunk,
            )
            for cell_id, attempt, started, ended, recovered, supervisor in rows:
                attempts[(str(cell_id), int(attempt))] = _Attempt(
                    bool(started), bool(ended), bool(recovered), supervisor
                )
        kinds: dict[tuple[str, str], str | None] = {}
        added: dict[str, _Final] = {}
        for r in batch:
            if r.tag not in _READ_TAGS and r.tag != _SUBMITTED:
                continue
            event = r.event
            if isinstance(event, CampaignSubmitted):
                for arm, kind in event.arm_kinds.items():
                    kinds[(event.name, arm)] = kind
                    await db.execute(
                        "INSERT OR REPLACE INTO spend_arms (campaign, arm, kind) VALUES (?, ?, ?)",
                        (event.name, arm, kind),
                    )
                continue
            if not isinstance(event, _READ) or not is_cell_stream(r.stream):
                continue
            cell_id = cell_of(r.stream)
            key = (cell_id, event.attempt)
            a = attempts.get(key)
            if a is None:
                if not isinstance(event, _OPENING):
                    continue
                a = attempts[key] = _Attempt()
            if a.recovered:
                continue  # its share is final
            a.changed = True
            if isinstance(event, ev.RunStarted):
                a.started = True
            elif isinstance(event, _ENDING):
                a.ended = True
            elif isinstance(event, ev.SupervisorOutcome):
                a.supervisor = _encoder.encode(event)
            elif isinstance(event, ev.CellRecovered):
                a.recovered = a.ended = True
                if a.started:
                    await self._count(db, cell_id, event, a, kinds, added)
                a.supervisor = None
        await db.executemany(
            _ATTEMPT_UPSERT,
            [
                (cell_id, n, int(a.started), int(a.ended), int(a.recovered), a.supervisor)
                for (cell_id, n), a in sorted(attempts.items())
                if a.changed
            ],
        )
        await db.executemany(
            _CAMPAIGN_UPSERT,
            [(c, f.attempts, f.cost_units, f.unknown) for c, f in sorted(added.items())],
        )

    async def _count(
        self,
        db: aiosqlite.Connection,
        cell_id: str,
        event: ev.CellRecovered,
        a: _Attempt,
        kinds: dict[tuple[str, str], str | None],
        added: dict[str, _Final],
    ) -> None:
        """Add a recovered attempt's final share to its campaign's (the fold's rule)."""
        campaign, arm = campaign_of(cell_id), arm_of(cell_id)
        if (campaign, arm) not in kinds:
            rows = await db.execute_fetchall(
                "SELECT kind FROM spend_arms WHERE campaign = ? AND arm = ?", (campaign, arm)
            )
            kinds[(campaign, arm)] = next((str(k) for (k,) in rows), None)
        kind = kinds[(campaign, arm)]
        if kind is None:  # a campaign recorded before its arms' kinds were
            kind = "supervisor" if event.spend.worker_cwds is not None else "solo"
        supervisor = _supervisor_decoder.decode(a.supervisor) if a.supervisor else None
        figure = run_cost(kind, event, supervisor)
        final = added.setdefault(campaign, _Final())
        final.attempts += 1
        if figure is None:
            final.unknown += 1
        else:
            final.cost_units += units(figure)


async def is_complete(db: aiosqlite.Connection) -> bool:
    """Whether the tables hold the whole log's past (a home from before them: not until
    `arenad rebuild`)."""
    rows = await db.execute_fetchall("SELECT 1 FROM spend_incomplete")
    return not rows


class CampaignFinal(msgspec.Struct, frozen=True, kw_only=True):
    """A campaign's recovered attempts that started a run: how many, their known cost in
    pico-USD, how many of unknown cost."""

    attempts: int
    cost_units: int
    unknown: int


async def finals(db: aiosqlite.Connection) -> dict[str, CampaignFinal]:
    rows = await db.execute_fetchall(
        "SELECT campaign, attempts, cost_units, unknown FROM campaign_spend ORDER BY 1"
    )
    return {
        str(c): CampaignFinal(attempts=int(n), cost_units=int(u), unknown=int(k))
        for c, n, u, k in rows
    }


_OPEN = "SELECT cell_id, attempt FROM spend_attempts WHERE started = 1 AND recovered = 0"
_ROW = "e.seq, e.stream, e.version, e.tag, e.schema_version, e.recorded_at_ms, e.payload"
# The ingest events that can carry a cost (SpendFold reads no other).
_INGEST_TAGS = ("ingest.line", "ingest.snapshot")


async def open_attempts(db: aiosqlite.Connection) -> list[tuple[str, int]]:
    """(cell id, attempt) of the attempts that started and are not recovered yet."""
    rows = await db.execute_fetchall(f"{_OPEN} ORDER BY 1, 2")
    return [(str(c), int(n)) for c, n in rows]


async def open_events(db: aiosqlite.Connection) -> tuple[list[Recorded], list[Recorded]]:
    """The spend fold's events of the open attempts' cells (every attempt's: the caller
    keeps the open ones') and of their ingest streams, each in log order. Two joins
    through the events' (stream, version) index, not a query per attempt: at 100 000
    cells the open ones were 6 000."""
    tags = sorted(SPEND_TAGS)
    cells = await db.execute_fetchall(
        f"SELECT {_ROW} FROM (SELECT DISTINCT cell_id FROM ({_OPEN})) AS o"
        " JOIN events AS e ON e.stream = 'cell/' || o.cell_id"
        f" WHERE e.tag IN ({','.join('?' * len(tags))}) ORDER BY e.seq",
        tags,
    )
    lines = await db.execute_fetchall(
        f"SELECT {_ROW} FROM ({_OPEN}) AS o"
        " JOIN events AS e ON e.stream = 'ingest/' || o.cell_id || '/' || o.attempt"
        f" WHERE e.tag IN ({','.join('?' * len(_INGEST_TAGS))}) ORDER BY e.seq",
        _INGEST_TAGS,
    )
    return decode_rows(cells), decode_rows(lines)
