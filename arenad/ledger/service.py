"""The ledger's I/O edge: open the store, read one cell's streams at a time, call the pure
projection (``arenad.ledger.project``), write the ledger atomically; record a verdict."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import stat
import tempfile
from collections.abc import Coroutine, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

from arenad.cell.machine import next_status
from arenad.cell.writer import CellWriter
from arenad.errors import UserError
from arenad.home import Home, open_store
from arenad.ledger.project import LedgerStats, cell_resolution, new_stats, project_cell
from arenad.ledger.proposer import (
    CandidateTally,
    CapturedTranscript,
    captured_transcript,
    project_shot,
)
from arenad.ledger.rollout import assert_rollout_line, serialize_rollout_line
from arenad.proposer.layout import SHOT_PREFIX, TRANSCRIPT_PREFIX, claude_project_slug
from arenad.store.base import EventStore
from arenad.verdict.judge import VerdictError, parse_verdict
from events.base import Recorded
from events.capture import ProposerShotCaptured
from events.cell import JudgeVerdictRecorded
from events.codec import event_tag_of_type
from events.streams import CELL, attempt_prefixes, cell_of, cell_stream

__all__ = [
    "default_run_id",
    "project_ledger",
    "project_store",
    "record_verdict",
    "write_ledger_atomically",
]


T = TypeVar("T")


def default_run_id(cell_ids: Sequence[str]) -> str:
    """``arenad:<campaign>[+<campaign>…]`` over every cell in the log (sorted, deduplicated)."""
    campaigns = sorted({c.split(":", 1)[0] for c in cell_ids})
    return "arenad:" + "+".join(campaigns) if campaigns else "arenad:empty"


async def _cell_records(store: EventStore, cell_id: str) -> list[Recorded]:
    streams = [cell_stream(cell_id), *await store.streams(attempt_prefixes(cell_id)[1])]
    return await store.read_streams(streams)


async def _latest(store: EventStore, stream: str) -> Recorded:
    """A stream's last event only: a transcript stream holds many snapshots."""
    version = await store.stream_version(stream)
    return (await store.read_stream(stream, version - 1))[-1]


async def _project_transcripts(store: EventStore, slug: str) -> list[CapturedTranscript]:
    streams = await store.streams(f"{TRANSCRIPT_PREFIX}{slug}/")
    return [captured_transcript(await _latest(store, s)) for s in streams]


async def project_store(
    store: EventStore, out: Path, cells: Sequence[str] = (), run_id: str | None = None
) -> LedgerStats:
    """Project ``store`` into ``out``: every cell's lines, then (without a ``cells``
    filter) one proposer line per captured shot receipt.

    Memory is bounded by one cell (or one worktree's transcripts), never the log: cells
    are read one at a time and lines stream to the file as they are made.
    """
    all_cells = sorted(cell_of(s) for s in await store.streams(CELL))
    chosen = sorted(set(cells)) if cells else all_cells
    unknown = [c for c in chosen if c not in set(all_cells)]
    if unknown:
        raise UserError(f"no such cell: {unknown[0]}")
    rid = run_id if run_id else default_run_id(all_cells)
    with_proposers = not cells
    stats = new_stats()
    loop = asyncio.get_running_loop()

    def wait(coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, loop).result()

    def lines() -> Iterator[dict[str, Any]]:
        candidates = CandidateTally()
        for cid in chosen:
            records = wait(_cell_records(store, cid))
            yield from project_cell(cid, records, rid, stats)
            if with_proposers and candidates.wants(cid):
                resolution = cell_resolution(records)
                if resolution is not None:
                    candidates.add(resolution)
        if not with_proposers:
            return
        # Proposer lines last, by receipt path; the shots of one worktree are adjacent,
        # so its parsed transcripts are kept for the next shot and then dropped.
        slug: str | None = None
        transcripts: list[CapturedTranscript] = []
        for stream in wait(store.streams(SHOT_PREFIX)):
            shot = wait(_latest(store, stream))
            event = shot.event
            assert isinstance(event, ProposerShotCaptured)
            wanted = claude_project_slug(event.worktree) if event.worktree is not None else None
            if wanted != slug:
                slug = wanted
                transcripts = wait(_project_transcripts(store, slug)) if slug is not None else []
            candidate = candidates.outcome(event.generation, event.candidate_index)
            yield project_shot(shot, transcripts, candidate, rid, stats)

    # Every line was validated as it was made (naming its cell or shot): not twice.
    await asyncio.to_thread(
        functools.partial(write_ledger_atomically, validate=False), out, lines()
    )
    return stats


async def project_ledger(
    home: Home, out: Path, cells: Sequence[str] = (), run_id: str | None = None
) -> LedgerStats:
    async with open_store(home) as store:
        return await project_store(store, out, cells, run_id)


def _read_verdict(path: Path) -> str:
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise UserError(f"cannot read {path}: {exc.strerror}") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise UserError(f"{path}:{line}: not UTF-8 ({exc.reason})") from None


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
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    count = 0
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as out:
            # mkstemp makes the file 0600; a ledger keeps the mode it had, else 0644.
            try:
                mode = stat.S_IMODE(target.stat().st_mode)
            except FileNotFoundError:
                mode = 0o644
            os.fchmod(out.fileno(), mode)
            for line in lines:
                if validate:
                    assert_rollout_line(line, f"rollout line [{count}]")
                out.write(serialize_rollout_line(line))
                out.write("\n")
                count += 1
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp_name, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp_name)
        raise
    dir_fd = os.open(target.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
    return count
