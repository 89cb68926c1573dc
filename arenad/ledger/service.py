"""The ledger's I/O edge: open the store, have the cells projected a batch at a time
(``arenad.ledger.batch``, here or also on worker processes: ``arenad.ledger.workers``),
add the proposer lines, write the ledger atomically; record a verdict.

Run ids. A line's ``run_id`` is ``--run-id`` when given; else it is derived from the
log alone and never changes once the log has begun:

- a cell line: ``arenad:<home id>:<campaign>``, so it depends on the cell's campaign and
  the home, never on which other campaigns the home holds (submitting one changes no
  other campaign's ids);
- a proposer line: ``arenad:<home id>`` (a shot belongs to the home's improvement loop,
  not to one campaign);
- the home id: the first 16 hex digits of the hash of the log's first row (the chain
  hash ``arenad.store.chain`` keeps for every row: fixed once written, and the chain
  proves it unchanged). No home-id event is needed; a log without rows has no lines.

Rollout ids are UUIDv5s over (run_id, cell, attempt, role, session), so they are stable
exactly as long as the run id is: for ever by default.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import os
import stat
import tempfile
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from arenad.cell.machine import next_status
from arenad.cell.writer import CellWriter
from arenad.errors import UserError
from arenad.home import Home, open_store
from arenad.ledger.batch import BatchLines, project_batch
from arenad.ledger.lines import LedgerStats, add_stats, new_stats
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
from arenad.ledger.workers import LedgerWorkers
from arenad.proposer.layout import SHOT_PREFIX, TRANSCRIPT_PREFIX, claude_project_slug
from arenad.store.base import EventStore
from arenad.store.chain import GENESIS, row_hash
from arenad.store.sqlite import SqliteEventStore
from arenad.verdict.judge import VerdictError, parse_verdict
from events.base import Recorded
from events.capture import ProposerShotCaptured
from events.cell import JudgeVerdictRecorded
from events.codec import encode_event, event_tag_of_type
from events.specs import CellId, campaign_of
from events.streams import CELL, campaign_cells, cell_of, cell_stream

__all__ = [
    "cell_order",
    "default_run_id",
    "home_id",
    "project_ledger",
    "project_store",
    "record_verdict",
    "write_ledger_atomically",
]

# Cells read per query: one round trip per batch instead of two per cell, while memory
# stays bounded by a batch, whatever the log's size. The next batch is not read while
# this one is projected: the reader thread and this one then fight for the GIL at every
# row SQLite steps (19 000 futex calls for 3 000 cells on bench.ledger, where one at a
# time makes 2 400), which cost more CPU than the overlap saved.
READ_BATCH_CELLS = 32
# Bytes of lines written to the ledger file per system call.
_WRITE_BUFFER = 1 << 20
# Below this many cells a projection takes about half a second on one core, and a
# worker process costs about what it saves (its start, ~0.1 s, and its lines sent back:
# measured on bench.ledger, 1 000 cells were no faster on two cores, 3 000 1.6x faster).
PARALLEL_MIN_CELLS = 2000
# More processes than this are a typo, not a machine.
MAX_JOBS = 64


def _usable_cores() -> int:
    """The cores this process may use: its CPU affinity, within its cgroup's CPU quota
    (a container limited to two CPUs on a big host must not start a process per core)."""
    cores = len(os.sched_getaffinity(0))
    try:
        quota, period = Path("/sys/fs/cgroup/cpu.max").read_text().split()
    except (OSError, ValueError):
        return cores
    if quota == "max":
        return cores
    return max(1, min(cores, -(-int(quota) // int(period))))


def processes_for(cells: int, batches: int, jobs: int | None) -> int:
    """How many processes (this one and its workers) project ``cells`` cells in
    ``batches`` batches: ``jobs`` when given; by default one per usable core, once the
    ledger is big enough to gain from them (``PARALLEL_MIN_CELLS``). Never more than
    there are batches: a process with nothing to project is only a cost."""
    if jobs is not None:
        if not 1 <= jobs <= MAX_JOBS:
            raise UserError(f"--jobs must be 1 to {MAX_JOBS}, not {jobs}")
        wanted = jobs
    else:
        wanted = _usable_cores() if cells >= PARALLEL_MIN_CELLS else 1
    return max(1, min(wanted, batches))


def default_run_id(home_id: str, campaign: str | None = None) -> str:
    """The default ``run_id`` of a campaign's lines, or of the proposer lines (None)."""
    return f"arenad:{home_id}" if campaign is None else f"arenad:{home_id}:{campaign}"


async def home_id(store: EventStore) -> str:
    """The home's id (see the module docstring); ``empty`` for a log with no row yet."""
    if isinstance(store, SqliteEventStore):
        rows = list(
            await store.connection.execute_fetchall("SELECT hash FROM events ORDER BY seq LIMIT 1")
        )
        return bytes(rows[0][0]).hex()[:16] if rows else "empty"
    # A store that keeps no hashes (the in-memory one): the hash the chain would give it.
    rows_after = store.read_all(0, batch_size=1)
    try:
        first = await anext(rows_after, None)
    finally:
        aclose = getattr(rows_after, "aclose", None)
        if aclose is not None:
            await aclose()
    if first is not None:
        digest = row_hash(
            GENESIS,
            first.seq,
            first.stream,
            first.version,
            first.tag,
            first.schema_version,
            first.recorded_at_ms,
            encode_event(first.event),
        )
        return digest.hex()[:16]
    return "empty"


def _cell_order(cell_id: str) -> tuple[str, str, str, int, str]:
    """Ledger order: campaign, instance, arm, then rep as a number (rep 2 before rep 10).

    A cell id is ``campaign:instance:arm:rep`` (``events.specs.cell_id``); an id of any
    other shape sorts by itself, first in its campaign."""
    parsed = CellId.parse(cell_id)
    if parsed is not None:
        return (*parsed, "")
    return (campaign_of(cell_id), "", "", -1, cell_id)


# The ledger's order of cells, for a projection that follows it (``arenad.export``).
cell_order = _cell_order


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
        # A line (a whole transcript) is usually longer than the default 8 KiB buffer,
        # which would write it, and then its newline, by a system call each.
        self.out = os.fdopen(fd, "wb", buffering=_WRITE_BUFFER)
        self.count = 0

    def write(self, line: Mapping[str, Any]) -> None:
        self.write_serialized((serialize_rollout_line_bytes(line),))

    def write_serialized(self, lines: Iterable[bytes]) -> None:
        """Lines already serialized (without their newlines)."""
        for line in lines:
            self.out.write(line)
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


async def _project_shared(
    store: EventStore,
    batches: int,
    batch: Callable[[int], list[tuple[str, str]]],
    workers: LedgerWorkers,
    write: Callable[[BatchLines], None],
) -> None:
    """Project ``batches`` batches (``batch(i)``) here and on ``workers``, in order.

    This process takes every ``workers.count + 1``-th batch and the workers the others,
    each sent up to two batches ahead: while this process projects its batch, they
    project the next ones, and their lines are ready when it comes to write them."""
    slots = workers.count + 1
    ahead = 0
    for i in range(batches):
        while ahead < batches and workers.pending < 2 * workers.count:
            if ahead % slots:
                await workers.submit(batch(ahead))
            ahead += 1
        if i % slots:
            write(await workers.result())  # the oldest sent: batch i
        else:
            write(await project_batch(store, batch(i)))


async def project_store(
    store: EventStore,
    out: Path,
    cells: Sequence[str] = (),
    run_id: str | None = None,
    campaign: str | None = None,
    jobs: int | None = 1,
) -> LedgerStats:
    """Project ``store`` into ``out``: every cell's lines, then (without a ``cells`` or
    ``campaign`` filter) one proposer line per captured shot receipt.

    ``campaign`` projects that campaign's cells alone, reading no other campaign's
    streams; its lines are byte for byte those the whole ledger holds for it.

    ``jobs`` processes project the cells (``processes_for``; None: one per core for a big
    ledger): this one and worker processes that read the store's file themselves (a
    SQLite store's: another store is projected here alone). The ledger is the same bytes
    whatever their number (``arenad.ledger.workers``).

    Memory is bounded by a few batches of cells (and one supervisor cell's ingested lines
    per process, or one worktree's transcripts), never the log: cells are read
    ``READ_BATCH_CELLS`` at a time (two batches per worker at most), and lines go to the
    file as they are made.
    """
    prefix = campaign_cells(campaign) if campaign is not None else CELL
    all_cells = [cell_of(s) for s in await store.streams(prefix)]
    if campaign is not None and not all_cells:
        raise UserError(f"no such campaign: {campaign}")
    known = set(all_cells)
    unknown = sorted(c for c in set(cells) if c not in known)
    if unknown:
        where = f" in campaign {campaign}" if campaign is not None else ""
        raise UserError(f"no such cell{where}: {unknown[0]}")
    chosen = sorted(set(cells) if cells else known, key=_cell_order)
    batches = -(-len(chosen) // READ_BATCH_CELLS)
    processes = processes_for(len(chosen), batches, jobs)
    # Worker processes read a SQLite store's file; any other store is projected here.
    db = store.path if isinstance(store, SqliteEventStore) else None
    home = await home_id(store) if not run_id else ""
    run_ids: dict[str, str] = {}

    def run_id_of(cell_id: str) -> str:
        if run_id:
            return run_id
        c = campaign_of(cell_id)
        return run_ids.get(c) or run_ids.setdefault(c, default_run_id(home, c))

    with_proposers = not cells and campaign is None
    stats = new_stats()
    candidates = CandidateTally()
    ledger = _LedgerFile(out)

    def write(batch: BatchLines) -> None:
        ledger.write_serialized(batch.lines)
        add_stats(stats, batch.stats)
        if with_proposers:
            for resolution in batch.resolutions:
                candidates.add(resolution)

    def batch(i: int) -> list[tuple[str, str]]:
        """The ``i``-th batch of cells with their run ids (made when it is sent)."""
        cells = chosen[i * READ_BATCH_CELLS : (i + 1) * READ_BATCH_CELLS]
        return [(c, run_id_of(c)) for c in cells]

    try:
        with _no_cycle_collection():
            if processes > 1 and db is not None:
                async with LedgerWorkers(processes - 1, db) as workers:
                    await _project_shared(store, batches, batch, workers, write)
            else:
                for i in range(batches):
                    write(await project_batch(store, batch(i)))
            if with_proposers:
                await _proposer_lines(
                    store, ledger, candidates, run_id or default_run_id(home), stats
                )
        # Every line was validated as it was made (naming its cell or shot): not twice.
        await asyncio.to_thread(ledger.commit)
    except BaseException:
        ledger.discard()
        raise
    return stats


async def _proposer_lines(
    store: EventStore,
    ledger: _LedgerFile,
    candidates: CandidateTally,
    run_id: str,
    stats: LedgerStats,
) -> None:
    """Proposer lines last, by receipt path; the shots of one worktree are adjacent, so
    its parsed transcripts are kept for the next shot and then dropped."""
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
        ledger.write(project_shot(shot, transcripts, candidate, run_id, stats))


async def project_ledger(
    home: Home,
    out: Path,
    cells: Sequence[str] = (),
    run_id: str | None = None,
    campaign: str | None = None,
    jobs: int | None = None,
) -> LedgerStats:
    async with open_store(home) as store:
        return await project_store(store, out, cells, run_id, campaign, jobs)


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
