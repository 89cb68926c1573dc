"""The report's I/O edge: open the store, read the selected campaigns' cells' facts (from
the report-facts read model where the store keeps a complete one, else folded from their
cell streams a batch of cells at a time; ``as_of`` always folds the log's prefix), build
the figures (``arenad.report.project``), and write the HTML page."""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

import msgspec
from rich.console import Console

from arenad.cell.attempts import attempts
from arenad.errors import UserError
from arenad.home import Home, open_store
from arenad.readmodels import report_facts
from arenad.report.project import CellFacts, Report, build_report, cell_facts, pool_conflicts
from arenad.report.render import html_page, terminal
from arenad.store.base import EventStore
from arenad.store.sqlite import SqliteEventStore
from events import cell as ev
from events.base import Recorded
from events.specs import campaign_of
from events.streams import CELL as CELL_PREFIX
from events.streams import campaign_cells, cell_of, ingest_stream

__all__ = ["print_terminal", "report", "report_store", "write_html"]


BATCH = 2000


def _campaign_of(stream: str) -> str:
    return campaign_of(cell_of(stream))


async def report_store(
    store: EventStore,
    campaigns: Sequence[str] = (),
    *,
    pool: bool = False,
    as_of: int | None = None,
) -> Report:
    """The report over ``campaigns`` (every campaign in the log when empty), each
    campaign's arms apart unless ``pool``; with ``as_of``, of the log as it stood after
    that event (the same fold over the log's prefix: events after it are not read into
    any cell, and cells submitted after it are not there). A named campaign without a
    cell, or pooling same-named arms whose specs differ, is the user's mistake
    (UserError), not a report."""
    if as_of is not None:
        head = await store.last_seq()
        if not 1 <= as_of <= head:
            raise UserError(f"--as-of {as_of}: the log's events are numbered 1 to {head}")
    if (
        as_of is None
        and isinstance(store, SqliteEventStore)
        and await report_facts.is_complete(store.connection)
    ):
        chosen, facts = await _from_model(store, campaigns)
        return _report(facts, chosen, campaigns, pool=pool, as_of=None)
    chosen = sorted(set(campaigns))
    streams: list[str] = []
    if chosen:
        for name in chosen:
            found = await store.streams(campaign_cells(name))
            if not found:
                raise UserError(f"no such campaign: {name} (see `arenad status`)")
            streams += found
    else:
        streams = await store.streams(CELL_PREFIX)
        chosen = sorted({_campaign_of(s) for s in streams})
    return _report(await _fold(store, streams, as_of), chosen, campaigns, pool=pool, as_of=as_of)


async def _from_model(
    store: SqliteEventStore, campaigns: Sequence[str]
) -> tuple[list[str], list[CellFacts]]:
    """The chosen campaigns and their cells' facts, from the report-facts read model (the
    cells whose runs went through the gateway folded from the log, as :func:`_fold`
    folds them)."""
    chosen = sorted(set(campaigns))
    for name in await report_facts.missing(store.connection, chosen):
        raise UserError(f"no such campaign: {name} (see `arenad status`)")
    facts, refold = await report_facts.read(store.connection, chosen)
    if not chosen:
        ids = [f.cell_id for f in facts] + [cell_of(s) for s in refold]
        chosen = sorted({campaign_of(i) for i in ids})
    return chosen, facts + await _fold(store, refold, None)


async def _fold(store: EventStore, streams: list[str], as_of: int | None) -> list[CellFacts]:
    """The facts of the cells of ``streams``, folded from the log (up to ``as_of``)."""
    facts: list[CellFacts] = []
    # A batch of streams per read (one query per 500 in SQLite, in its index order), not a
    # query per cell: at 100 000 cells those queries were a fifth of the report's time.
    # Batches bound the memory to BATCH cells' events.
    for i in range(0, len(streams), BATCH):
        groups = await store.read_stream_groups(streams[i : i + BATCH])
        for records in groups.values():
            if as_of is not None:
                records = [r for r in records if r.seq <= as_of]
            calls = await _gateway_ingest(store, records, as_of)
            one = cell_facts(records, calls)
            if one is not None:
                facts.append(one)
        del groups
    return facts


def _report(
    facts: list[CellFacts],
    chosen: list[str],
    campaigns: Sequence[str],
    *,
    pool: bool,
    as_of: int | None,
) -> Report:
    """The report of the facts (``chosen``: the campaigns they are of, ``campaigns``: as
    the user named them)."""
    if pool and (conflicts := pool_conflicts(facts)):
        raise UserError(f"--pool refused: {conflicts[0]} (report them apart, without --pool)")
    if as_of is not None:
        there = {f.campaign for f in facts}
        if campaigns and not there & set(chosen):
            raise UserError(f"no cell of {', '.join(chosen)} at event {as_of}")
        if not campaigns:
            # Every campaign that had a cell then, not those submitted since.
            chosen = sorted(there)
    report = build_report(facts, chosen, pool=pool)
    return report if as_of is None else msgspec.structs.replace(report, as_of_seq=as_of)


async def _gateway_ingest(
    store: EventStore, records: Sequence[Recorded], as_of: int | None
) -> dict[int, Sequence[Recorded]]:
    """The ingest streams of a cell's runs, by attempt, when its model calls went through
    the gateway (they hold its records of the calls); none read for any other cell."""
    spec = next((r.event.spec for r in records if isinstance(r.event, ev.CellSubmitted)), None)
    if spec is None or spec.gateway.kind != "gateway":
        return {}
    out: dict[int, Sequence[Recorded]] = {}
    for a in attempts(records):
        if a.started is not None:
            ingested = await store.read_stream(ingest_stream(spec.cell_id, a.n))
            out[a.n] = [i for i in ingested if as_of is None or i.seq <= as_of]
    return out


def write_html(path: Path, page: bytes) -> None:
    """Replace ``path`` with ``page`` (a temporary file renamed over it, so a reader never
    sees half a page); an unwritable path is the user's mistake."""
    target = path.expanduser()
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    except OSError as exc:
        raise UserError(f"cannot write {path}: {exc.strerror}") from None
    try:
        with os.fdopen(fd, "wb") as out:
            os.fchmod(out.fileno(), 0o644)
            out.write(page)
        os.replace(tmp, target)
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise UserError(f"cannot write {path}: {exc.strerror}") from None


async def report(
    home: Home,
    campaigns: Sequence[str] = (),
    html: Path | None = None,
    *,
    pool: bool = False,
    as_of: int | None = None,
) -> Report:
    """The report of ``home``'s log (as it stood after event ``as_of`` if given); with
    ``html``, also written there as one page."""
    async with open_store(home) as store:
        result = await report_store(store, campaigns, pool=pool, as_of=as_of)
    if html is not None:
        write_html(html, html_page(result))
    return result


def print_terminal(result: Report) -> None:
    # A terminal's width, or COLUMNS (rich reads it); a pipe without COLUMNS gets the
    # tables whole (up to 200 columns) rather than squeezed into rich's default 80.
    wide = sys.stdout.isatty() or os.environ.get("COLUMNS", "").isdigit()
    console = Console(width=None if wide else 200)
    console.print(terminal(result, console.width))
