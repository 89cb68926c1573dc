"""The ledger's I/O edge: open the store, read one cell's streams at a time, call the pure
projection (``arenad.ledger.project``), write the ledger atomically; record a verdict."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Coroutine, Iterator, Sequence
from pathlib import Path
from typing import Any, TypeVar

from arenad.cell.machine import cell_stream
from arenad.daemon.cell_writer import CellWriter
from arenad.errors import UserError
from arenad.home import Home, open_store
from arenad.ledger.project import LedgerStats, cell_resolution, new_stats, project_cell
from arenad.ledger.proposer import (
    CandidateTally,
    CapturedTranscript,
    captured_transcript,
    project_shot,
)
from arenad.ledger.rollout import write_ledger_atomically
from arenad.proposer.layout import SHOT_PREFIX, TRANSCRIPT_PREFIX, claude_project_slug
from arenad.store.base import EventStore
from events.base import Recorded
from events.capture import ProposerShotCaptured
from events.cell import JudgeVerdictRecorded

__all__ = ["default_run_id", "project_ledger", "project_store", "record_verdict"]

CELL_PREFIX = "cell/"

T = TypeVar("T")


def default_run_id(cell_ids: Sequence[str]) -> str:
    """``arenad:<campaign>[+<campaign>…]`` over every cell in the log (sorted, deduplicated)."""
    campaigns = sorted({c.split(":", 1)[0] for c in cell_ids})
    return "arenad:" + "+".join(campaigns) if campaigns else "arenad:empty"


async def _cell_records(store: EventStore, cell_id: str) -> list[Recorded]:
    streams = [cell_stream(cell_id), *await store.streams(f"capture/{cell_id}/")]
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
    all_cells = sorted(s[len(CELL_PREFIX) :] for s in await store.streams(CELL_PREFIX))
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

    await asyncio.to_thread(write_ledger_atomically, out, lines())
    return stats


async def project_ledger(
    home: Home, out: Path, cells: Sequence[str] = (), run_id: str | None = None
) -> LedgerStats:
    async with open_store(home) as store:
        return await project_store(store, out, cells, run_id)


def _parse_verdict(path: Path) -> tuple[str, dict[str, Any]]:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise UserError(f"cannot read {path}: {exc.strerror}") from None
    try:
        doc = json.loads(text)
    except ValueError as exc:
        raise UserError(f"{path}: not JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise UserError(f"{path}: the verdict must be a JSON object")
    return text, doc


async def record_verdict(home: Home, cell_id: str, path: Path) -> JudgeVerdictRecorded:
    """Append an operator verdict (``judge.json``) to the cell's current attempt.

    Fields read: ``resolved`` (bool), ``score`` (number; else ``composite``), ``judge``
    (string, default ``swe-arena-official-judge``); the document is kept verbatim.
    """
    text, doc = _parse_verdict(path)
    resolved = doc.get("resolved")
    if resolved is not None and not isinstance(resolved, bool):
        raise UserError(f"{path}: 'resolved' must be true, false or null")
    score: Any = doc.get("score", doc.get("composite"))
    if score is not None and (isinstance(score, bool) or not isinstance(score, int | float)):
        raise UserError(f"{path}: 'score' must be a number or null")
    judge = doc.get("judge", "swe-arena-official-judge")
    if not isinstance(judge, str) or not judge:
        raise UserError(f"{path}: 'judge' must be a non-empty string")
    async with open_store(home) as store:
        if not await store.stream_version(cell_stream(cell_id)):
            raise UserError(f"no such cell: {cell_id}")
        writer = CellWriter(store, cell_id)
        state = await writer.load()
        event = JudgeVerdictRecorded(
            attempt=state.attempt,
            judge=judge,
            verdict_json=text,
            resolved=resolved,
            score=None if score is None else float(score),
            source="operator",
        )
        await writer.append([event])
        return event
