"""Stream names: which stream a fact lives on, spelled and parsed in one place.

    cell/<cell_id>                      a cell's lifecycle (events.cell)
    ingest/<cell_id>/<attempt>          lines ingested live from one attempt's run (events.ingest)
    capture/<cell_id>/<attempt>         the agent's own store, captured (events.capture)
    campaign/<name>                     a campaign's submissions and spend cap (events.control)
    control                             operator settings a daemon follows (max-parallel)
    daemon                              daemons starting and stopping
    proposer/shot/<path>                a proposer shot receipt
    proposer/transcript/<slug>/<file>   a proposer's Claude Code transcript

A cell id never contains ``/`` (its parts are path components joined by ``:``), so a
stream name splits unambiguously.
"""

from __future__ import annotations

from typing import Final

CELL: Final = "cell/"
INGEST: Final = "ingest/"
CAPTURE: Final = "capture/"
CAMPAIGN: Final = "campaign/"
CONTROL: Final = "control"
DAEMON: Final = "daemon"
PROPOSER_SHOT: Final = "proposer/shot/"
PROPOSER_TRANSCRIPT: Final = "proposer/transcript/"


def cell_stream(cell_id: str) -> str:
    return CELL + cell_id


def campaign_cells(campaign: str) -> str:
    """The prefix of every cell stream of ``campaign`` (``events.specs.cell_id`` puts the
    campaign first, and ':' never occurs in it, so the prefix selects exactly its cells)."""
    return f"{CELL}{campaign}:"


def is_cell_stream(stream: str) -> bool:
    return stream.startswith(CELL)


def cell_of(stream: str) -> str:
    """The cell id of a cell stream (ValueError for any other stream)."""
    if not stream.startswith(CELL):
        raise ValueError(f"{stream!r} is not a cell stream")
    return stream[len(CELL) :]


def ingest_stream(cell_id: str, attempt: int) -> str:
    return f"{INGEST}{cell_id}/{attempt}"


def capture_stream(cell_id: str, attempt: int) -> str:
    return f"{CAPTURE}{cell_id}/{attempt}"


def attempt_prefixes(cell_id: str) -> tuple[str, str]:
    """Prefixes of a cell's per-attempt streams (ingest and capture), for listing them."""
    return f"{INGEST}{cell_id}/", f"{CAPTURE}{cell_id}/"


def campaign_stream(name: str) -> str:
    return CAMPAIGN + name


def attempt_stream_parts(stream: str) -> tuple[str, str, int] | None:
    """(kind, cell id, attempt) of an ingest or capture stream; None for any other."""
    for kind in (INGEST, CAPTURE):
        if stream.startswith(kind):
            cell_id, _, attempt = stream[len(kind) :].rpartition("/")
            if cell_id and attempt.isdigit():
                return kind.rstrip("/"), cell_id, int(attempt)
    return None
