"""The SQLite event store, through aiosqlite: WAL, one writer connection, batches.

Every await through aiosqlite crosses threads (~170 µs here), so the write path
costs a fixed handful of awaits per *transaction*, never per event: a batch of
1 000 events is one BEGIN, one read of the head and the streams' versions, one
executemany, the projectors, one head update and one COMMIT.

Every event is encoded, then decoded back before the commit: the row the log keeps
is proved readable (an event built with a wrong-typed field is refused instead of
poisoning every later replay), and projectors fold exactly what a rebuild will fold.

Every append checks the hash chain before it writes (tamper refusal): the head it reads
in its transaction must be the head this store last verified, with no row past it; when
it is not (the first append of a process, or another process appended meanwhile), the
rows since that head, or since the persisted ``chain_checkpoint``, are walked first. A
process's first check also counts the rows (no deletion below the checkpoint) and checks
the checkpoint's own row. The checkpoint advances inside appends every
``CHAIN_CHECKPOINT_ROWS`` rows, so a restart walks at most about that many. A log that
fails is refused (:class:`~arenad.errors.LogTampered`, naming the first bad row): nothing
is built on top of it. An edit to a row below the checkpoint is ``verify-log``'s to find.

WAL checkpoints run on a connection of their own, off the append's path: SQLite's
automatic checkpoint would run inside the COMMIT that crosses its threshold and
make that append wait for the copy into the database file and its fsyncs (measured:
~4 µs per 500-byte event, over a third of the insert's cost). The background one is
C code on aiosqlite's thread, so it overlaps the next batch's Python work; the
writer keeps a 4x higher automatic threshold, to restart the WAL and as a backstop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sqlite3
from collections.abc import AsyncIterable, AsyncIterator, Collection, Sequence
from pathlib import Path
from typing import Any, Literal, Protocol, get_args

import aiosqlite
import msgspec

from arenad.clock import Clock, system_clock, wait_for_event
from arenad.errors import ConcurrencyError, LogTampered, StoreError, StoreUnwritable
from arenad.store.base import AppendRequest, EventStore
from arenad.store.chain import (
    GENESIS,
    ChainReport,
    ChainRow,
    ChainVerifier,
    length_prefixed,
    row_hash_parts,
)
from arenad.store.faults import FAULT_BLOB_LIMIT, FaultPlan
from arenad.store.migrations import Migration, apply_migrations
from arenad.store.rows import StoredRow, decode_rows
from events.base import Event, Recorded
from events.codec import (
    encode_event,
    event_tag_of_type,
)

log = logging.getLogger(__name__)

Synchronous = Literal["NORMAL", "FULL"]

_SELECT = "SELECT seq, stream, version, tag, schema_version, recorded_at_ms, payload FROM events"
_INSERT = (
    "INSERT INTO events (seq, stream, version, tag, schema_version, recorded_at_ms, payload, hash)"
    " VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
)
# An events row: seq, stream, version, tag, schema_version, recorded_at_ms, payload, hash.
_Row = tuple[int, str, int, str, int, int, bytes, bytes]
# SQLite caps host parameters per statement; stream lists are chunked to this.
_CHUNK = 500
# Rows per read: large enough that the ~170 µs await is noise, small enough that
# a replay's memory stays a few MiB whatever the log's size.
READ_BATCH = 5000
# WAL bytes written (estimated: payloads, a row's other columns, and the pages every
# commit rewrites whatever its size: table and index leaves, the head row) after
# which a background checkpoint is asked for: about SQLite's own 1 000 pages.
CHECKPOINT_BYTES = 4 << 20
_ROW_OVERHEAD = 120
_COMMIT_OVERHEAD = 16 << 10
# The writer's own automatic checkpoint, in pages. A PASSIVE checkpoint beside a
# writer that commits hundreds of times a second never catches the WAL's very end,
# so the WAL never restarts from its beginning; the writer's checkpoint does, at
# commit, with only the frames since the last background one left to copy. It is
# also the backstop when the background checkpoint lags or fails. (16 000 pages
# let paced ingestion hit one 60 ms commit; 4 000 keeps its worst commit where it
# was before, and full-speed throughput the same.)
_WRITER_AUTOCHECKPOINT_PAGES = 4_000
# Rows appended between two advances of the persisted chain checkpoint: what a restart's
# first check walks at most (about 50 ms of hashing at 10 000 rows), for one UPDATE per
# that many rows on the append path.
CHAIN_CHECKPOINT_ROWS = 10_000
_CHAIN_ROWS_SQL = (
    "SELECT seq, stream, version, tag, schema_version, recorded_at_ms, payload, hash"
    " FROM events WHERE seq > ? AND seq <= ? ORDER BY seq LIMIT 5000"
)


class Projector(Protocol):
    """A read model kept in the append's own transaction.

    ``apply`` may read and write its tables through ``db``; raising aborts the
    whole append (this is how an illegal cell transition is refused before commit).
    """

    @property
    def name(self) -> str: ...

    @property
    def tables(self) -> tuple[str, ...]: ...

    def wants(self, stream: str) -> bool:
        """Whether ``apply`` needs this stream's events: appends and ``rebuild`` hand it
        only those (and skip it when there are none), so the projector costs nothing
        per event of the streams it ignores."""
        ...

    async def apply(self, db: aiosqlite.Connection, batch: Sequence[Recorded]) -> None: ...


async def _project(
    projector: Projector, db: aiosqlite.Connection, batch: Sequence[Recorded]
) -> None:
    """Hand a projector its streams' events of a batch (it is not called for none)."""
    if batch:
        await projector.apply(db, batch)


_TypeMeta = tuple[str, int, bytes, "msgspec.json.Decoder[Any]"]

# Per event class: (tag, schema version, the tag length-prefixed for the chain, a
# decoder of that class alone).
_TYPE_META: dict[type[Event], _TypeMeta] = {}


def _type_meta(kind: type[Event]) -> _TypeMeta:
    sample_tag = event_tag_of_type(kind)
    # The read-back check decodes with the event's own class: a row just encoded is
    # at its class's current version, where ``decode_event`` would decode the same
    # bytes to the same class through the union and then check that class; this
    # decoder is as fast as the union's (~1 µs for a 500-byte line event) and makes
    # the check, the version lookup and the wrapper's call unnecessary.
    meta = (sample_tag, kind.VERSION, length_prefixed(sample_tag), msgspec.json.Decoder(kind))
    _TYPE_META[kind] = meta
    return meta


def _tags(requests: Sequence[AppendRequest]) -> set[str]:
    return {event_tag_of_type(type(e)) for r in requests for e in r.events}


def _versions_sql(streams: Sequence[str]) -> str:
    """(stream, its highest version or NULL, NULL) for each of ``streams``, bound in order.

    One MAX per stream, not ``MAX(version) ... WHERE stream IN (...) GROUP BY stream``:
    SQLite answers the grouped form by walking every index entry of those streams (26 ms
    for a 200 000-line stream, on every append to it), the per-stream form with one
    descent of the (stream, version) index.
    """
    values = ",".join(["(?)"] * len(streams))
    return (
        "SELECT s.column1, (SELECT MAX(version) FROM events WHERE stream = s.column1), NULL"
        f" FROM (VALUES {values}) AS s"
    )


async def _settle(task: asyncio.Task[None]) -> None:
    """Stop a batch's SQL and wait until it has (the error already raised is the one
    reported; this task's own is retrieved and dropped)."""
    task.cancel()
    await asyncio.wait([task])
    if not task.cancelled():
        task.exception()


def _is_unwritable(exc: sqlite3.Error) -> bool:
    text = str(exc).lower()
    return any(s in text for s in ("disk is full", "readonly", "read-only", "disk i/o error"))


def _is_version_conflict(exc: sqlite3.IntegrityError) -> bool:
    return "events.stream, events.version" in str(exc)


class SqliteEventStore(EventStore):
    def __init__(
        self,
        writer: aiosqlite.Connection,
        reader: aiosqlite.Connection,
        path: Path,
        clock: Clock,
        projectors: Sequence[Projector],
        faults: FaultPlan | None = None,
        checkpointer: aiosqlite.Connection | None = None,
    ) -> None:
        self._db = writer
        self._reader = reader
        self._checkpointer = checkpointer
        self._checkpoint_task: asyncio.Task[None] | None = None
        self._unchecked_bytes = 0
        self.path = path
        self._clock = clock
        self._projectors = list(projectors)
        # One writer connection: appends from many tasks are serialized here.
        self._write_lock = asyncio.Lock()
        self._appended = asyncio.Event()
        self._faults = faults
        # The chain head this store has verified (None: not yet, in this process), and
        # the persisted checkpoint's seq (None: unknown; -1: this store has no table).
        self._verified: tuple[int, bytes] | None = None
        self._checkpoint_seq: int | None = None
        self.checkpoint_rows = CHAIN_CHECKPOINT_ROWS

    @classmethod
    async def open(
        cls,
        path: Path,
        *,
        clock: Clock = system_clock,
        projectors: Sequence[Projector] = (),
        synchronous: Synchronous = "NORMAL",
        busy_timeout_ms: int = 10_000,
        migrate: bool = True,
        migrations: list[Migration] | None = None,
        faults: FaultPlan | None = None,
    ) -> SqliteEventStore:
        if synchronous not in get_args(Synchronous):
            raise ValueError(
                f"synchronous must be one of {get_args(Synchronous)}, not {synchronous!r}"
            )
        path.parent.mkdir(parents=True, exist_ok=True)
        writer = await aiosqlite.connect(path, isolation_level=None)
        reader: aiosqlite.Connection | None = None
        checkpointer: aiosqlite.Connection | None = None
        try:
            await writer.execute(f"PRAGMA busy_timeout = {int(busy_timeout_ms)}")
            await writer.execute("PRAGMA journal_mode = WAL")
            await writer.execute(f"PRAGMA synchronous = {synchronous}")
            if migrate:
                await apply_migrations(writer, migrations)
            reader = await aiosqlite.connect(path, isolation_level=None)
            await reader.execute(f"PRAGMA busy_timeout = {int(busy_timeout_ms)}")
            # Reads never write: the reader refuses to, whatever a caller sends it.
            await reader.execute("PRAGMA query_only = ON")
            # Checkpoints move off the append's path (see the module docstring).
            checkpointer = await aiosqlite.connect(path, isolation_level=None)
            await checkpointer.execute(f"PRAGMA synchronous = {synchronous}")
            await writer.execute(f"PRAGMA wal_autocheckpoint = {_WRITER_AUTOCHECKPOINT_PAGES}")
        except BaseException as exc:
            await writer.close()
            if reader is not None:
                await reader.close()
            if checkpointer is not None:
                await checkpointer.close()
            if isinstance(exc, sqlite3.Error):
                raise StoreError(f"cannot open the event store at {path}: {exc}") from exc
            raise
        return cls(writer, reader, path, clock, projectors, faults, checkpointer)

    @classmethod
    async def open_reader(cls, path: Path, *, busy_timeout_ms: int = 10_000) -> SqliteEventStore:
        """A store that only reads ``path``, on one read-only connection (``mode=ro``:
        SQLite itself refuses every write, and a missing file is an error, not a new
        empty log). For another process reading a log its owner keeps open (a ledger
        worker): nothing is migrated, checkpointed or appended."""
        uri = f"{path.absolute().as_uri()}?mode=ro"
        try:
            reader = await aiosqlite.connect(uri, uri=True, isolation_level=None)
        except sqlite3.Error as exc:
            raise StoreError(f"cannot open the event store at {path}: {exc}") from exc
        try:
            await reader.execute(f"PRAGMA busy_timeout = {int(busy_timeout_ms)}")
            await reader.execute("PRAGMA query_only = ON")
        except BaseException as exc:
            await reader.close()
            if isinstance(exc, sqlite3.Error):
                raise StoreError(f"cannot open the event store at {path}: {exc}") from exc
            raise
        return cls(reader, reader, path, system_clock, ())

    @property
    def connection(self) -> aiosqlite.Connection:
        """The writer connection (for read models' queries and maintenance)."""
        return self._db

    async def close(self) -> None:
        task, self._checkpoint_task = self._checkpoint_task, None
        if task is not None:
            await task
        if self._checkpointer is not None:
            await self._checkpointer.close()
        await self._reader.close()
        if self._db is not self._reader:
            # The last connection to close checkpoints whatever is left.
            await self._db.close()

    def _count_for_checkpoint(self, nbytes: int) -> None:
        """After a commit: ask for a background checkpoint once enough was appended."""
        self._unchecked_bytes += nbytes
        if self._unchecked_bytes < CHECKPOINT_BYTES or self._checkpointer is None:
            return
        if self._checkpoint_task is not None and not self._checkpoint_task.done():
            return  # the running one is asked again after the next commit
        self._unchecked_bytes = 0
        self._checkpoint_task = asyncio.create_task(
            self._checkpoint(self._checkpointer), name="arenad-store-checkpoint"
        )

    async def _checkpoint(self, db: aiosqlite.Connection) -> None:
        # PASSIVE: copies what no reader still needs, never waits for a lock, never
        # blocks the writer. A failure here loses nothing (the WAL still holds every
        # commit); the writer's backstop checkpoint or the next attempt catches up.
        try:
            await db.execute("PRAGMA wal_checkpoint(PASSIVE)")
        except (sqlite3.Error, ValueError) as exc:
            log.warning("background checkpoint of %s failed: %s", self.path, exc)

    # -- writing -----------------------------------------------------------------

    async def append_many(self, requests: Sequence[AppendRequest]) -> list[list[Recorded]]:
        try:
            return await self._append_many_once(requests)
        except StoreUnwritable as exc:
            if not self._room_freed(exc):
                raise
        # The transaction rolled back: the same requests, once more, in the room freed.
        return await self._append_many_once(requests)

    def _room_freed(self, exc: StoreUnwritable) -> bool:
        """On a full disk, whether ``on_disk_full`` freed room for one more try."""
        hook = self.on_disk_full
        text = str(exc).lower()
        if hook is None or not ("disk is full" in text or "no space left" in text):
            return False
        return hook() > 0

    async def _append_many_once(self, requests: Sequence[AppendRequest]) -> list[list[Recorded]]:
        work = [r for r in requests if r.events]
        if not work:
            return [[] for _ in requests]
        async with self._write_lock:
            try:
                await self._db.execute("BEGIN IMMEDIATE")
            except sqlite3.Error as exc:
                raise self._translate(exc) from exc
            faults = self._faults
            tags = _tags(work) if faults is not None else set()
            try:
                done, wal_bytes, head = await self._append_in_transaction(work)
                if faults is not None:
                    faults.before_commit(tags)
                await self._db.execute("COMMIT")
                self._verified = head
                self._count_for_checkpoint(wal_bytes)
                if faults is not None:
                    await self._inject(faults.after_commit(tags))
            except BaseException as exc:
                await self._rollback()
                if isinstance(exc, sqlite3.IntegrityError) and _is_version_conflict(exc):
                    # The (stream, version) key is the backstop of the version check:
                    # name the stream that moved, as the in-transaction check would.
                    raise await self._conflict(work) from exc
                if isinstance(exc, sqlite3.Error):
                    raise self._translate(exc) from exc
                raise
        self._appended.set()
        self._appended = asyncio.Event()
        # One list per request, in the caller's order (an empty request gets []).
        by_request = iter(done)
        return [next(by_request) if r.events else [] for r in requests]

    async def append_batches(self, batches: AsyncIterable[Sequence[AppendRequest]]) -> int:
        """One transaction across every batch: each is encoded, chained, inserted and
        projected as it arrives (the head row carries the chain from one to the next), and
        only then dropped; COMMIT after the last, ROLLBACK if anything fails.

        Pipelined: a batch's SQL (insert, projectors, head row) runs on the writer's thread
        while the next batch is drawn and encoded here, so the caller's work and the
        encoding overlap SQLite's. The head and the versions of the streams this
        transaction wrote are carried in memory from batch to batch; a stream it has not
        written yet is looked up on the reader (the write lock is held: what the reader
        sees committed is what the transaction started from)."""
        async with self._write_lock:
            try:
                await self._db.execute("BEGIN IMMEDIATE")
            except sqlite3.Error as exc:
                raise self._translate(exc) from exc
            faults = self._faults
            tags: set[str] = set()
            count = wal_bytes = 0
            # Each batch's head is the next one's verified start (no walk of what this
            # transaction just wrote); a rollback puts the verified head back.
            verified_before = self._verified
            head: tuple[int, bytes] | None = None
            versions: dict[str, int] = {}
            looked_up: set[str] = set()
            writing: asyncio.Task[None] | None = None
            try:
                async for batch in batches:
                    work = [r for r in batch if r.events]
                    if not work:
                        continue
                    if faults is not None:
                        tags |= _tags(work)
                    streams = {r.stream for r in work}
                    if head is None:
                        seq, prev, versions, last = await self._head_and_versions(streams)
                        if self._verified != (seq, prev) or last != seq:
                            await self._check_chain(seq, prev, last)
                        head = (seq, prev)
                    else:
                        fresh = streams - looked_up
                        if fresh:
                            versions.update(await self._current_versions(self._reader, fresh))
                    looked_up |= streams
                    rows, done, nbytes, head = self._encode(work, *head, versions)
                    self._verified = head
                    count += len(rows)
                    wal_bytes += nbytes
                    if writing is not None:
                        await writing  # in order; its error is raised here
                    writing = asyncio.create_task(self._write(rows, work, done, head))
                if writing is not None:
                    await writing
                if faults is not None:
                    faults.before_commit(tags)
                await self._db.execute("COMMIT")
                self._count_for_checkpoint(wal_bytes)
                if faults is not None:
                    await self._inject(faults.after_commit(tags))
            except BaseException as exc:
                if writing is not None:
                    await _settle(writing)
                await self._rollback()
                self._verified = verified_before
                if isinstance(exc, sqlite3.IntegrityError) and _is_version_conflict(exc):
                    raise ConcurrencyError("(a batch)", None, None) from exc
                if isinstance(exc, sqlite3.Error):
                    error = self._translate(exc)
                    if isinstance(error, StoreUnwritable):
                        # The batches are spent and cannot be tried again; the room is
                        # freed all the same, for what the daemon records next.
                        self._room_freed(error)
                    raise error from exc
                raise
        if count:
            self._appended.set()
            self._appended = asyncio.Event()
        return count

    async def _inject(self, action: str | None) -> None:
        if action == "full-after":
            # A full disk: SQLite refuses to grow the file past its size from now on.
            ((pages,),) = await self._db.execute_fetchall("PRAGMA page_count")
            await self._db.execute(f"PRAGMA max_page_count = {int(pages)}")
        elif action == "readonly-after":
            # A read-only store: every write is refused from now on.
            await self._db.execute("PRAGMA query_only = ON")
        elif action == "blob-limit-after":
            # A row past the limit is refused as SQLite refuses one past 1 GB. setlimit
            # has no PRAGMA: it runs on the connection's own thread.
            conn = self._db._conn
            limit = (sqlite3.SQLITE_LIMIT_LENGTH, FAULT_BLOB_LIMIT)
            await self._db._execute(conn.setlimit, *limit)  # type: ignore[no-untyped-call]

    async def _rollback(self) -> None:
        # A failed COMMIT or a constraint error may have rolled back already.
        with contextlib.suppress(sqlite3.Error):
            await self._db.execute("ROLLBACK")

    async def _conflict(self, requests: Sequence[AppendRequest]) -> ConcurrencyError:
        versions = await self._current_versions(self._reader, {r.stream for r in requests})
        for r in requests:
            actual = versions.get(r.stream, 0)
            if r.expected_version is not None and r.expected_version != actual:
                return ConcurrencyError(r.stream, r.expected_version, actual)
        return ConcurrencyError(requests[0].stream, requests[0].expected_version, None)

    def _translate(self, exc: sqlite3.Error) -> StoreError:
        if _is_unwritable(exc):
            return StoreUnwritable(f"the event store at {self.path} cannot be written: {exc}")
        return StoreError(f"event store error at {self.path}: {exc}")

    async def _append_in_transaction(
        self, requests: Sequence[AppendRequest]
    ) -> tuple[list[list[Recorded]], int, tuple[int, bytes]]:
        """The appended events per request, the WAL bytes the commit will write (an
        estimate, for the background checkpoint), and the new chain head."""
        seq, prev, versions, last = await self._head_and_versions({r.stream for r in requests})
        if self._verified != (seq, prev) or last != seq:
            await self._check_chain(seq, prev, last)
        rows, result, nbytes, head = self._encode(requests, seq, prev, versions)
        await self._write(rows, requests, result, head)
        return result, nbytes, head

    def _encode(
        self,
        requests: Sequence[AppendRequest],
        seq: int,
        prev: bytes,
        versions: dict[str, int],
    ) -> tuple[list[_Row], list[list[Recorded]], int, tuple[int, bytes]]:
        """The rows to insert after the head (``seq``, ``prev``), checked against the
        streams' ``versions`` (updated to what the rows leave), the appended events per
        request, the WAL bytes estimate and the new head: CPU only, no SQL."""
        now = int(self._clock())
        rows: list[_Row] = []
        result: list[list[Recorded]] = []
        add = rows.append
        encode = encode_event
        nbytes = 0
        # One pass per event: encode, chain, read back (see the module docstring).
        for request in requests:
            stream = request.stream
            current = versions.get(stream, 0)
            if request.expected_version is not None and request.expected_version != current:
                raise ConcurrencyError(stream, request.expected_version, current)
            stream_part = length_prefixed(stream)
            recorded: list[Recorded] = []
            keep = recorded.append
            for event in request.events:
                seq += 1
                current += 1
                kind = type(event)
                tag, schema_version, tag_part, decoder = _TYPE_META.get(kind) or _type_meta(kind)
                payload = encode(event)
                try:
                    stored = decoder.decode(payload)
                except msgspec.DecodeError as exc:
                    # Nothing is written: a row that cannot be read back would break every
                    # later replay (typically a field given a value of the wrong type).
                    raise StoreError(
                        f"refused to append: event #{seq} ({tag!r} v{schema_version}) on"
                        f" {stream!r} cannot be read: {exc}"
                    ) from exc
                prev = row_hash_parts(
                    prev, seq, current, schema_version, now, stream_part, tag_part, payload
                )
                add((seq, stream, current, tag, schema_version, now, payload, prev))
                nbytes += len(payload)
                keep(Recorded(seq, stream, current, tag, schema_version, now, stored))
            versions[stream] = current
            result.append(recorded)
        return rows, result, nbytes + _ROW_OVERHEAD * len(rows) + _COMMIT_OVERHEAD, (seq, prev)

    async def _write(
        self,
        rows: list[_Row],
        requests: Sequence[AppendRequest],
        result: list[list[Recorded]],
        head: tuple[int, bytes],
    ) -> None:
        """Insert encoded rows, run the projectors over them and move the head row."""
        await self._db.executemany(_INSERT, rows)
        for projector in self._projectors:
            wants = projector.wants
            await _project(
                projector,
                self._db,
                [
                    r
                    for request, done in zip(requests, result, strict=True)
                    if wants(request.stream)
                    for r in done
                ],
            )
        seq, prev = head
        await self._db.execute("UPDATE log_head SET seq = ?, hash = ? WHERE id = 1", (seq, prev))
        await self._advance_checkpoint(seq, prev)

    async def _head_and_versions(self, streams: set[str]) -> tuple[int, bytes, dict[str, int], int]:
        """The chain's head, the streams' versions and the highest seq of any row (past
        the head only if a row was inserted behind the log's back), in one round trip
        for most batches."""
        names = sorted(streams)
        first, rest = names[:_CHUNK], names[_CHUNK:]
        rows = await self._db.execute_fetchall(
            "SELECT NULL, seq, hash FROM log_head WHERE id = 1"
            " UNION ALL SELECT NULL, (SELECT MAX(seq) FROM events), 'last'"
            f" UNION ALL {_versions_sql(first)}",
            first,
        )
        seq, prev, last = -1, b"", 0
        versions: dict[str, int] = {}
        for stream, number, digest in rows:
            if stream is None and digest == "last":
                last = int(number) if number is not None else 0
            elif stream is None:
                seq, prev = int(number), bytes(digest)
            elif number is not None:
                versions[str(stream)] = int(number)
        if seq < 0:
            raise StoreError(f"the event store at {self.path} has no log head row")
        if rest:
            versions.update(await self._current_versions(self._db, set(rest)))
        return seq, prev, versions, last

    # -- tamper refusal ----------------------------------------------------------

    async def _check_chain(self, head_seq: int, head_hash: bytes, last: int) -> None:
        """Refuse (LogTampered) unless the chain up to the head holds (see the module
        docstring); on success the head is this store's verified head."""
        db = self._db
        if last > head_seq:
            ((beyond,),) = await db.execute_fetchall(
                "SELECT MIN(seq) FROM events WHERE seq > ?", (head_seq,)
            )
            raise LogTampered(
                self.path,
                int(beyond),
                f"row {beyond} lies past the log's head (row {head_seq});"
                " it was not written by an append",
            )
        first = self._verified is None
        after_seq, after_hash = self._verified or await self._read_checkpoint()
        if after_seq > head_seq:
            raise LogTampered(
                self.path,
                head_seq + 1,
                f"the log ends at row {head_seq} but was verified up to row {after_seq}"
                " (rows were deleted from the end and the head rewritten)",
            )
        repair = False
        if (
            first
            and after_seq > 0
            and not await self._below_checkpoint_intact(after_seq, after_hash)
        ):
            # Something up to the checkpoint changed: only a walk from the first row can say
            # what (or find that only the checkpoint itself was edited, and repair it).
            after_seq, after_hash, repair = 0, GENESIS, True
        verifier = ChainVerifier(after_seq, after_hash)
        position = after_seq
        while position < head_seq:
            batch = await db.execute_fetchall(_CHAIN_ROWS_SQL, (position, head_seq))
            rows = [ChainRow(*r) for r in batch]
            if not rows or not all(verifier.feed(row) for row in rows):
                break
            position = rows[-1].seq
        report = verifier.finish(head_seq, head_hash)
        if not report.ok:
            raise LogTampered(self.path, report.first_bad_seq, report.problem or "")
        self._verified = (head_seq, head_hash)
        if repair or head_seq - after_seq >= self.checkpoint_rows:
            await self._write_checkpoint(head_seq, head_hash)

    async def _below_checkpoint_intact(self, seq: int, digest: bytes) -> bool:
        """The cheap part of the check that the walk skips: the checkpoint's row still has
        the hash it had, and no row up to it is missing (a count of the smallest index,
        not a read of the rows)."""
        ((stored, count, lowest, highest),) = await self._db.execute_fetchall(
            "SELECT (SELECT hash FROM events WHERE seq = ?), (SELECT COUNT(*) FROM events),"
            " (SELECT MIN(seq) FROM events), (SELECT MAX(seq) FROM events)",
            (seq,),
        )
        # Gap-free from row 1: seqs are unique, so count == highest means no hole.
        holes = lowest != 1 or count != highest
        return not holes and isinstance(stored, bytes) and stored == digest

    async def _read_checkpoint(self) -> tuple[int, bytes]:
        try:
            rows = await self._db.execute_fetchall(
                "SELECT seq, hash FROM chain_checkpoint WHERE id = 1"
            )
        except sqlite3.OperationalError:
            self._checkpoint_seq = -1  # a store migrated before the checkpoint existed
            return 0, GENESIS
        for seq, digest in rows:
            if isinstance(seq, int) and isinstance(digest, bytes) and len(digest) == 32:
                self._checkpoint_seq = seq
                return seq, digest
        self._checkpoint_seq = 0
        return 0, GENESIS

    async def _advance_checkpoint(self, seq: int, digest: bytes) -> None:
        persisted = self._checkpoint_seq
        if persisted is not None and persisted >= 0 and seq - persisted >= self.checkpoint_rows:
            await self._write_checkpoint(seq, digest)

    async def _write_checkpoint(self, seq: int, digest: bytes) -> None:
        if self._checkpoint_seq == -1:
            return
        await self._db.execute(
            "UPDATE chain_checkpoint SET seq = ?, hash = ? WHERE id = 1", (seq, digest)
        )
        # In this transaction: if it rolls back, the next check walks a little further.
        self._checkpoint_seq = seq

    @staticmethod
    async def _current_versions(db: aiosqlite.Connection, streams: set[str]) -> dict[str, int]:
        found: dict[str, int] = {}
        names = sorted(streams)
        for i in range(0, len(names), _CHUNK):
            chunk = names[i : i + _CHUNK]
            for stream, version, _ in await db.execute_fetchall(_versions_sql(chunk), chunk):
                if version is not None:
                    found[str(stream)] = int(version)
        return found

    # -- reading -----------------------------------------------------------------

    async def read_stream(self, stream: str, after_version: int = 0) -> list[Recorded]:
        rows = await self._reader.execute_fetchall(
            f"{_SELECT} WHERE stream = ? AND version > ? ORDER BY version",
            (stream, after_version),
        )
        return decode_rows(rows)

    async def read_all(
        self,
        after_seq: int = 0,
        batch_size: int = READ_BATCH,
        tags: Collection[str] | None = None,
    ) -> AsyncIterator[Recorded]:
        async for batch in self.read_batches(after_seq, batch_size, tags):
            for recorded in batch:
                yield recorded

    async def read_batches(
        self,
        after_seq: int = 0,
        batch_size: int = READ_BATCH,
        tags: Collection[str] | None = None,
    ) -> AsyncIterator[list[Recorded]]:
        """read_all a batch at a time (one yield per batch, for replays)."""
        # Keyset pagination: bounded memory and no read transaction held across
        # batches, so a long replay never blocks checkpoints. (Fetching the next batch
        # while this one decodes was measured: no gain, both need the GIL.)
        wanted = sorted(tags) if tags is not None else None
        where = "seq > ?"
        if wanted is not None:
            where += f" AND tag IN ({','.join('?' * len(wanted))})"
        sql = f"{_SELECT} WHERE {where} ORDER BY seq LIMIT ?"
        position = after_seq
        while True:
            rows = await self._reader.execute_fetchall(sql, (position, *(wanted or ()), batch_size))
            batch = decode_rows(rows)
            del rows
            if not batch:
                return
            yield batch
            if len(batch) < batch_size:
                return
            position = batch[-1].seq

    async def read_streams(self, streams: Sequence[str]) -> list[Recorded]:
        """Several streams' events in global order (bounded by those streams' size)."""
        out: list[Recorded] = []
        for i in range(0, len(streams), _CHUNK):
            chunk = list(streams[i : i + _CHUNK])
            marks = ",".join("?" * len(chunk))
            rows = await self._reader.execute_fetchall(
                f"{_SELECT} WHERE stream IN ({marks}) ORDER BY seq", chunk
            )
            out.extend(decode_rows(rows))
        out.sort(key=lambda r: r.seq)
        return out

    async def read_stream_groups(self, streams: Sequence[str]) -> dict[str, list[Recorded]]:
        groups = await self.read_stream_rows(streams)
        return {stream: decode_rows(rows) for stream, rows in groups.items()}

    async def read_stream_rows(self, streams: Sequence[str]) -> dict[str, list[StoredRow]]:
        """One query per ``_CHUNK`` streams, ``ORDER BY stream, version``: the (stream,
        version) index's own order, so SQLite walks it with no sorter (a query in log
        order would copy every row, big captures included, into a temporary b-tree)."""
        groups: dict[str, list[StoredRow]] = {stream: [] for stream in streams}
        names = list(groups)
        for i in range(0, len(names), _CHUNK):
            chunk = names[i : i + _CHUNK]
            marks = ",".join("?" * len(chunk))
            rows = await self._reader.execute_fetchall(
                f"{_SELECT} WHERE stream IN ({marks}) ORDER BY stream, version", chunk
            )
            current = ""
            group: list[StoredRow] = []
            row: Any
            for row in rows:
                if row[1] != current:
                    current = row[1]
                    group = groups[current]
                group.append(row)
        return groups

    async def stream_versions(self, streams: Sequence[str]) -> dict[str, int]:
        return await self._current_versions(self._reader, set(streams))

    async def stream_version(self, stream: str) -> int:
        rows = await self._reader.execute_fetchall(
            "SELECT MAX(version) FROM events WHERE stream = ?", (stream,)
        )
        value = next(iter(rows))[0]
        return int(value) if value is not None else 0

    async def last_seq(self) -> int:
        rows = await self._reader.execute_fetchall("SELECT seq FROM log_head WHERE id = 1")
        return int(next(iter(rows))[0])

    async def streams(self, prefix: str) -> list[str]:
        # A range scan of the (stream, version) index; no stream sorts after
        # prefix + U+10FFFF while still starting with prefix.
        upper = prefix + "\U0010ffff"
        rows = await self._reader.execute_fetchall(
            "SELECT DISTINCT stream FROM events WHERE stream >= ? AND stream < ? ORDER BY stream",
            (prefix, upper),
        )
        return [str(r[0]) for r in rows]

    async def wait_for_new(self, after_seq: int, timeout_s: float) -> None:
        # In-process appends wake waiters at once; other processes' appends are
        # seen by the poll (a cheap indexed read of the head row).
        if await self.last_seq() > after_seq:
            return
        await wait_for_event(self._appended, timeout_s)

    # -- maintenance -------------------------------------------------------------

    async def verify_chain(self) -> ChainReport:
        """Walk the hash chain from the first row; name the first bad sequence number.

        The walk stops at the head read first, so events appended while it runs (a
        live daemon) are neither missed nor mistaken for damage.
        """
        head = list(
            await self._reader.execute_fetchall("SELECT seq, hash FROM log_head WHERE id = 1")
        )
        if not head or not isinstance(head[0][0], int):
            return ChainReport(
                ok=False, rows=0, first_bad_seq=1, problem="the log's head row is missing"
            )
        head_seq, head_hash = head[0]
        verifier = ChainVerifier()
        position = 0
        while True:
            batch = await self._reader.execute_fetchall(
                "SELECT seq, stream, version, tag, schema_version, recorded_at_ms, payload,"
                " hash FROM events WHERE seq > ? AND seq <= ? ORDER BY seq LIMIT 5000",
                (position, head_seq),
            )
            rows = [ChainRow(*r) for r in batch]
            if not rows:
                break
            if not all(verifier.feed(row) for row in rows):
                break
            position = rows[-1].seq
        if verifier.failure is None and position == head_seq:
            # Rows past the head cannot come from an append (it moves the head in the
            # same transaction): unless the head moved meanwhile, they were inserted
            # behind the log's back. One statement, so one snapshot of both.
            ((beyond, now_head),) = await self._reader.execute_fetchall(
                "SELECT (SELECT MIN(seq) FROM events WHERE seq > ?),"
                " (SELECT seq FROM log_head WHERE id = 1)",
                (head_seq,),
            )
            if beyond is not None and now_head == head_seq:
                return ChainReport(
                    ok=False,
                    rows=verifier.rows,
                    first_bad_seq=int(beyond),
                    problem=f"row {beyond} lies past the log's head (row {head_seq});"
                    " it was not written by an append",
                )
        return verifier.finish(int(head_seq), head_hash)

    async def hash_at(self, seq: int) -> bytes | None:
        """The chain hash stored with row ``seq`` (None if there is no such row)."""
        rows = await self._reader.execute_fetchall("SELECT hash FROM events WHERE seq = ?", (seq,))
        for (digest,) in rows:
            return bytes(digest) if isinstance(digest, bytes) else None
        return None

    async def rebuild(self, batch_size: int = READ_BATCH) -> int:
        """Recreate every read model from the log in one transaction."""
        async with self._write_lock:
            await self._db.execute("BEGIN IMMEDIATE")
            try:
                for projector in self._projectors:
                    for table in projector.tables:
                        await self._db.execute(f"DELETE FROM {table}")
                count = 0
                position = 0
                while True:
                    rows = await self._db.execute_fetchall(
                        f"{_SELECT} WHERE seq > ? ORDER BY seq LIMIT ?", (position, batch_size)
                    )
                    batch = decode_rows(rows)
                    if not batch:
                        break
                    for projector in self._projectors:
                        wants = projector.wants
                        await _project(projector, self._db, [r for r in batch if wants(r.stream)])
                    count += len(batch)
                    position = batch[-1].seq
                await self._db.execute("COMMIT")
            except BaseException:
                await self._rollback()
                raise
        return count


__all__ = ["READ_BATCH", "Projector", "SqliteEventStore", "Synchronous"]
