"""The ``cells`` table: one row per cell, the machine's fold of its stream.

Runs inside the append transaction: an event the machine refuses raises here and
the whole append rolls back, so an illegal transition is never written.
"""

from __future__ import annotations

from collections.abc import Sequence

import aiosqlite
import msgspec

from arenad.cell.kinds import kind_of
from arenad.cell.machine import CellState, apply
from arenad.cell.spend import run_tokens
from arenad.errors import IllegalTransition
from arenad.readmodels import tallies
from arenad.recovery.bounds import attempt_tokens, attempt_usd
from events.base import Recorded
from events.streams import cell_of, is_cell_stream

_state_encoder = msgspec.json.Encoder()
_state_decoder = msgspec.json.Decoder(CellState)

COLUMNS = (
    "cell_id",
    "campaign",
    "instance_id",
    "arm",
    "arm_kind",
    "rep",
    "attempt",
    "state",
    "paused",
    "abort_requested",
    "submitted_at_ms",
    "updated_at_ms",
    "started_at_ms",
    "ended_at_ms",
    "wall_s",
    "run_rc",
    "scored",
    "verify_pass",
    "patch_lines",
    "tokens_in",
    "tokens_out",
    "cost_usd",
    "stream_version",
    "last_seq",
    "state_json",
)

# The status columns: every column but the table's bookkeeping.
STATUS_COLUMNS = COLUMNS[:-3]

_UPSERT = (
    f"INSERT OR REPLACE INTO cells ({', '.join(COLUMNS)}) VALUES ({', '.join('?' * len(COLUMNS))})"
)


def row_of(state: CellState, last_seq: int) -> tuple[object, ...]:
    """The table row for a state: pure, so replay and the live path agree."""
    spend = state.recovered.spend if state.recovered is not None else None
    verified = state.verified

    def flag(value: bool | None) -> int | None:
        return None if value is None else int(value)

    return (
        state.cell_id,
        state.spec.campaign,
        state.spec.instance.instance_id,
        state.spec.arm.name,
        type(state.spec.arm).__struct_config__.tag,
        state.spec.rep,
        state.attempt,
        str(state.status),
        int(state.paused),
        int(state.abort_requested),
        state.submitted_at_ms,
        state.updated_at_ms,
        state.run.started_at_ms if state.run is not None else None,
        state.ended_at_ms,
        state.wall_s,
        state.run_rc,
        flag(verified.scored) if verified is not None else None,
        flag(verified.verify_pass) if verified is not None else None,
        verified.patch_lines if verified is not None else None,
        # Checked as read: a value out of bounds (an older arenad's record of a forged
        # store) is unknown here, and never overflows SQLite's INTEGER.
        *run_tokens(state.recovered),
        attempt_usd(spend.cost_usd) if spend is not None else None,
        state.version,
        last_seq,
        _state_encoder.encode(state),
    )


# The JSON paths of a state the status rows' spend extras are read from (the SQL view
# extracts them from state_json; a fold reads the same fields).
EXTRA_PATHS: tuple[str, ...] = (
    "$.recovered.spend.cache_read",
    "$.recovered.spend.cache_write",
    "$.recovered.spend.spent_usd",
    "$.supervisor.spent_usd",
    # A solo run's usage figures, as the reference's result.json has them (finding 9).
    "$.recovered.usage.steps",
    "$.recovered.usage.max_ctx",
    "$.recovered.usage.oc_cost",
    "$.recovered.usage.total_io",
)


def spend_extras(
    arm_kind: str,
    cost_usd: float | None,
    cache_read: object,
    cache_write: object,
    spend_spent_usd: object,
    supervisor_spent_usd: object,
    steps: object = None,
    max_ctx: object = None,
    oc_cost: object = None,
    total_io: object = None,
) -> dict[str, object]:
    """The status row's cache tokens and a supervisor cell's two costs, each under its own
    name (finding 9: one status showed the workers' sessions in the cell column and the
    driver's receipt on the campaign line): ``driver_usd`` is the whole tree's own total,
    the cost of record (the report's and the cap's, arenad.cell.spend); ``workers_usd``
    the captured worker sessions (the row's ``cost_usd``). A solo run's ``usage``: its
    steps, largest context, opencode's own cost figure and total tokens (None: no usage
    recovered). Checked as read: out of bounds is unknown. Pure, so the SQL view and a
    fold agree."""
    extras: dict[str, object] = {
        "cache_read": attempt_tokens(cache_read),
        "cache_write": attempt_tokens(cache_write),
    }
    kind = kind_of(arm_kind)
    if kind.driver_figures:
        own = supervisor_spent_usd if supervisor_spent_usd is not None else spend_spent_usd
        extras["driver_usd"] = attempt_usd(own)
        extras["workers_usd"] = cost_usd
    if kind.usage_figures:
        figures = (steps, max_ctx, oc_cost, total_io)
        extras["usage"] = (
            None
            if all(f is None for f in figures)
            else {
                "steps": attempt_tokens(steps),
                "max_ctx": attempt_tokens(max_ctx),
                "oc_cost": attempt_usd(oc_cost),
                "total_io": attempt_tokens(total_io),
            }
        )
    return extras


def state_extras(state: CellState) -> dict[str, object]:
    """:func:`spend_extras` of a folded state."""
    spend = state.recovered.spend if state.recovered is not None else None
    return spend_extras(
        str(type(state.spec.arm).__struct_config__.tag),
        attempt_usd(spend.cost_usd) if spend is not None else None,
        spend.cache_read if spend is not None else None,
        spend.cache_write if spend is not None else None,
        spend.spent_usd if spend is not None else None,
        state.supervisor.spent_usd if state.supervisor is not None else None,
        *(
            (usage.steps, usage.max_ctx, usage.oc_cost, usage.total_io)
            if state.recovered is not None and (usage := state.recovered.usage) is not None
            else ()
        ),
    )


REASON_CHARS = 300


def _one_line(text: str) -> str:
    line = " ".join(text.strip().splitlines()[0].split()) if text.strip() else ""
    return line if len(line) <= REASON_CHARS else line[: REASON_CHARS - 1] + "…"


def status_reason(
    attempt: int,
    failed_error: str | None,
    not_scored_reason: str | None,
    previous_failure: str | None,
) -> str | None:
    """Why a cell is where it is, in one line (None: nothing to explain): its failure, why
    its result does not count, or why its attempt is a retry. Pure, from the state's own
    fields, so the SQL read model and a fold agree."""
    if failed_error:
        return _one_line(failed_error)
    if not_scored_reason:
        return _one_line(not_scored_reason)
    if previous_failure:
        return f"attempt {attempt - 1} failed: {_one_line(previous_failure)}"
    return None


def state_reason(state: CellState) -> str | None:
    """:func:`status_reason` of a folded state."""
    return status_reason(
        state.attempt,
        state.failed.error if state.failed is not None else None,
        state.verified.not_scored_reason if state.verified is not None else None,
        state.previous_failure,
    )


def decode_state(blob: bytes) -> CellState:
    return _state_decoder.decode(blob)


class CellsProjector:
    name: str = "cells"
    # The tallies are kept from the same fold step, so they never disagree with the rows.
    tables: tuple[str, ...] = ("cells", "arm_tallies", "instance_tallies")

    def wants(self, stream: str) -> bool:
        return is_cell_stream(stream)

    async def apply(self, db: aiosqlite.Connection, batch: Sequence[Recorded]) -> None:
        # The store hands over only cell streams' events (``wants``), never none.
        # A cell whose first event here is its stream's first has no row yet (the row is
        # the fold of the stream): only the others are looked up (a submit's are all new).
        first: dict[str, int] = {}
        for r in batch:
            first.setdefault(cell_of(r.stream), r.version)
        ids = sorted(first)
        states: dict[str, CellState | None] = dict.fromkeys(ids)
        ids = [cell for cell in ids if first[cell] != 1]
        for i in range(0, len(ids), 500):
            chunk = ids[i : i + 500]
            marks = ",".join("?" * len(chunk))
            for cell_id, blob in await db.execute_fetchall(
                f"SELECT cell_id, state_json FROM cells WHERE cell_id IN ({marks})", chunk
            ):
                states[str(cell_id)] = decode_state(blob)
        before = dict(states)
        last: dict[str, int] = {}
        for r in batch:
            cell_id = cell_of(r.stream)
            state = apply(states[cell_id], r.event, r.recorded_at_ms)
            if state.cell_id != cell_id:
                # The row is keyed by the spec's identity: a spec submitted on another
                # cell's stream would overwrite that cell's row.
                raise IllegalTransition(
                    None, f"{r.tag} (a spec of cell {state.cell_id!r})", r.stream
                )
            states[cell_id] = state
            last[cell_id] = r.seq
        await db.executemany(
            _UPSERT,
            [row_of(s, last[cid]) for cid, s in states.items() if s is not None and cid in last],
        )
        moved = tallies.deltas(before, states)
        await db.executemany(tallies.ARM_UPSERT, tallies.arm_rows(moved))
        await db.executemany(tallies.INSTANCE_UPSERT, tallies.instance_rows(moved))
