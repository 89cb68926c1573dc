"""The ledger's I/O edge: open the store, read one cell's streams at a time, call the pure
projection (``arenad.ledger.project``), write the ledger atomically; record a verdict."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import os
import stat
import tempfile
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from arenad.cell.machine import cell_stream, next_status
from arenad.cell_writer import CellWriter
from arenad.errors import UserError
from arenad.home import Home, open_store
from arenad.judge import VerdictError, parse_verdict
from arenad.ledger.project import LedgerStats, cell_resolution, new_stats, project_cell
from arenad.ledger.proposer import (
    CandidateTally,
    CapturedTranscript,
    captured_transcript,
    project_shot,
)
from arenad.ledger.rollout import (
    assert_rollout_line,
    serialize_rollout_line_bytes,
)
from arenad.proposer.layout import SHOT_PREFIX, TRANSCRIPT_PREFIX, claude_project_slug
from arenad.store.base import EventStore
from events.base import Recorded
from events.capture import ProposerShotCaptured
from events.cell import JudgeVerdictRecorded
from events.codec import event_tag_of_type

__all__ = [
    "default_run_id",
    "project_ledger",
    "project_store",
    "record_verdict",
    "write_ledger_atomically",
]

CELL_PREFIX = "cell/"
CAPTURE_PREFIX = "capture/"
# Cells read per query: one round trip per batch instead of two per cell, while memory
# stays bounded by a batch (two, with the one read ahead), whatever the log's size.
READ_BATCH_CELLS = 32


def default_run_id(cell_ids: Sequence[str]) -> str:
    """``arenad:<campaign>[+<campaign>…]`` over every cell in the log (sorted, deduplicated)."""
    campaigns = sorted({c.split(":", 1)[0] for c in cell_ids})
    return "arenad:" + "+".join(campaigns) if campaigns else "arenad:empty"


def _cell_order(cell_id: str) -> tuple[str, str, str, int, str]:
    """Ledger order: campaign, instance, arm, then rep as a number (rep 2 before rep 10).

    A cell id is ``campaign:instance:arm:rep`` (``events.specs.cell_id``); an id of any
    other shape sorts by itself, first in its campaign."""
    parts = cell_id.split(":")
    if len(parts) == 4 and parts[3].isascii() and parts[3].isdigit():
        return (parts[0], parts[1], parts[2], int(parts[3]), "")
    return (parts[0], "", "", -1, cell_id)


def _captures_by_cell(streams: Iterable[str]) -> dict[str, list[str]]:
    """``capture/<cell>/<attempt>`` streams grouped by cell."""
    out: dict[str, list[str]] = {}
    for stream in streams:
        cell_id = stream[len(CAPTURE_PREFIX) :].rpartition("/")[0]
        out.setdefault(cell_id, []).append(stream)
    return out


async def _latest(store: EventStore, stream: str) -> Recorded:
    """A stream's last event only: a transcript stream holds many snapshots."""
    version = await store.stream_version(stream)
    return (await store.read_stream(stream, version - 1))[-1]


async def _project_transcripts(store: EventStore, slug: str) -> list[CapturedTranscript]:
    streams = await store.streams(f"{TRANSCRIPT_PREFIX}{slug}/")
    return [captured_transcript(await _latest(store, s)) for s in streams]


class _LedgerFile:
    """The ledger's lines streamed to a temporary file beside it, renamed over it at the
    end (``write_ledger_atomically``'s contract, for a producer that writes as it goes)."""

    def __init__(self, path: Path) -> None:
        self.target = path
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, self.tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        self.out = os.fdopen(fd, "wb")
        self.count = 0

    def write(self, line: Mapping[str, Any]) -> None:
        self.out.write(serialize_rollout_line_bytes(line))
        self.out.write(b"\n")
        self.count += 1

    def commit(self) -> int:
        out = self.out
        # mkstemp makes the file 0600; a ledger keeps the mode it had, else 0644.
        try:
            mode = stat.S_IMODE(self.target.stat().st_mode)
        except FileNotFoundError:
            mode = 0o644
        os.fchmod(out.fileno(), mode)
        out.flush()
        os.fsync(out.fileno())
        out.close()
        os.replace(self.tmp, self.target)
        dir_fd = os.open(self.target.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
        return self.count

    def discard(self) -> None:
        self.out.close()
        with contextlib.suppress(OSError):
            os.unlink(self.tmp)


@contextlib.contextmanager
def _no_cycle_collection() -> Iterator[None]:
    """The cycle collector off while a projection runs.

    A projection allocates millions of small acyclic objects (decoded events, parsed
    parts, messages) that reference counting frees batch by batch; the collector would
    only keep re-scanning them, and cost a sixth of the projection (measured on
    ``bench.ledger``). Whatever cycle is made meanwhile is collected once it is back on.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


async def _read_cells(
    store: EventStore, cell_ids: Sequence[str], captures: Mapping[str, list[str]]
) -> dict[str, list[Recorded]]:
    """The records of a batch of cells (their cell and capture streams), by cell.

    The cell streams (small events) in one query; each capture stream on its own, all
    asked at once: a capture stream is read in its index order, where a query over
    several streams in log order would have SQLite sort (copy) every big capture."""
    capture_streams = [s for c in cell_ids for s in captures.get(c, ())]
    cell_records, *capture_records = await asyncio.gather(
        store.read_streams([cell_stream(c) for c in cell_ids]),
        *(store.read_stream(s) for s in capture_streams),
    )
    by_cell: dict[str, list[Recorded]] = {c: [] for c in cell_ids}
    for rec in cell_records:
        by_cell[rec.stream[len(CELL_PREFIX) :]].append(rec)
    for stream, records in zip(capture_streams, capture_records, strict=True):
        by_cell[stream[len(CAPTURE_PREFIX) :].rpartition("/")[0]].extend(records)
    return by_cell


async def project_store(
    store: EventStore, out: Path, cells: Sequence[str] = (), run_id: str | None = None
) -> LedgerStats:
    """Project ``store`` into ``out``: every cell's lines, then (without a ``cells``
    filter) one proposer line per captured shot receipt.

    Memory is bounded by a batch of cells (or one worktree's transcripts), never the
    log: cells are read ``READ_BATCH_CELLS`` at a time, the next batch while this one is
    projected, and lines go to the file as they are made.
    """
    all_cells = [s[len(CELL_PREFIX) :] for s in await store.streams(CELL_PREFIX)]
    known = set(all_cells)
    unknown = sorted(c for c in set(cells) if c not in known)
    if unknown:
        raise UserError(f"no such cell: {unknown[0]}")
    chosen = sorted(set(cells) if cells else known, key=_cell_order)
    captures = _captures_by_cell(await store.streams(CAPTURE_PREFIX))
    rid = run_id if run_id else default_run_id(all_cells)
    with_proposers = not cells
    stats = new_stats()
    ledger = _LedgerFile(out)
    try:
        with _no_cycle_collection():
            candidates = CandidateTally()
            batches = [
                chosen[i : i + READ_BATCH_CELLS] for i in range(0, len(chosen), READ_BATCH_CELLS)
            ]
            ahead = (
                asyncio.ensure_future(_read_cells(store, batches[0], captures)) if batches else None
            )
            for i, batch in enumerate(batches):
                assert ahead is not None
                records = await ahead
                ahead = (
                    asyncio.ensure_future(_read_cells(store, batches[i + 1], captures))
                    if i + 1 < len(batches)
                    else None
                )
                for cid in batch:
                    for line in project_cell(cid, records[cid], rid, stats):
                        ledger.write(line)
                    if with_proposers and candidates.wants(cid):
                        resolution = cell_resolution(records[cid])
                        if resolution is not None:
                            candidates.add(resolution)
            if with_proposers:
                # Proposer lines last, by receipt path; the shots of one worktree are adjacent,
                # so its parsed transcripts are kept for the next shot and then dropped.
                slug: str | None = None
                transcripts: list[CapturedTranscript] = []
                for stream in await store.streams(SHOT_PREFIX):
                    shot = await _latest(store, stream)
                    event = shot.event
                    assert isinstance(event, ProposerShotCaptured)
                    wanted = claude_project_slug(event.worktree) if event.worktree else None
                    if wanted != slug:
                        slug = wanted
                        transcripts = await _project_transcripts(store, slug) if slug else []
                    candidate = candidates.outcome(event.generation, event.candidate_index)
                    ledger.write(project_shot(shot, transcripts, candidate, rid, stats))
        # Every line was validated as it was made (naming its cell or shot): not twice.
        await asyncio.to_thread(ledger.commit)
    except BaseException:
        ledger.discard()
        raise
    return stats


async def project_ledger(
    home: Home, out: Path, cells: Sequence[str] = (), run_id: str | None = None
) -> LedgerStats:
    async with open_store(home) as store:
        return await project_store(store, out, cells, run_id)


def _read_verdict(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except OSError as exc:
        raise UserError(f"cannot read {path}: {exc.strerror}") from None


async def record_verdict(home: Home, cell_id: str, path: Path) -> JudgeVerdictRecorded:
    """Append an operator verdict (``judge.json``) to the cell's current attempt.

    The document is read as ``arenad.judge.parse_verdict`` reads a judge's (``resolved``,
    ``score`` else ``composite``, ``judge`` default ``swe-arena-official-judge``) and
    kept verbatim.
    """
    text = _read_verdict(path)
    try:
        parse_verdict(text, attempt=1)  # refuse a bad document before opening the store
    except VerdictError as exc:
        raise UserError(f"{path}: {exc}") from None
    async with open_store(home) as store:
        if not await store.stream_version(cell_stream(cell_id)):
            raise UserError(f"no such cell: {cell_id}")
        writer = CellWriter(store, cell_id)
        state = await writer.load()
        if next_status(state.status, event_tag_of_type(JudgeVerdictRecorded)) is None:
            raise UserError(
                f"{cell_id} is {state.status} (attempt {state.attempt}): a verdict is"
                " recorded once the attempt is verified"
            )
        event = parse_verdict(text, attempt=state.attempt, source="operator")
        await writer.append([event])
        return event


def write_ledger_atomically(
    path: str | os.PathLike[str], lines: Iterable[Mapping[str, Any]], *, validate: bool = True
) -> int:
    """Replace the ledger at ``path`` with ``lines``; return how many were written.

    Each line is validated (``assert_rollout_line``; ``validate=False`` for a producer
    that already validated every line, naming its source) and streamed to a temporary file in
    the same directory (created if missing), which is fsynced and renamed over ``path``;
    the directory is fsynced too. The file keeps the mode of the ledger it replaces
    (0644 for a new one). On any error the temporary file is removed and an
    existing ledger is left untouched. Framing is agent-eval's: one line per row, a
    trailing newline when there is at least one row, an empty file for none.
    """
    ledger = _LedgerFile(Path(path))
    try:
        for line in lines:
            if validate:
                assert_rollout_line(line, f"rollout line [{ledger.count}]")
            ledger.write(line)
        return ledger.commit()
    except BaseException:
        ledger.discard()
        raise
