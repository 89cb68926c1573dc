"""The SQLite event store, through aiosqlite: WAL, one writer connection, batches.

Every await through aiosqlite crosses threads (~170 µs here), so the write path
costs a fixed handful of awaits per *transaction*, never per event: a batch of
1 000 events is one BEGIN, one version check, one executemany, the projectors,
one head update and one COMMIT.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Literal, Protocol

import aiosqlite

from arenad.clock import Clock, system_clock
from arenad.errors import ConcurrencyError, StoreError, StoreUnwritable
from arenad.store.base import AppendRequest, EventStore
from arenad.store.chain import ChainReport, ChainRow, ChainVerifier, row_hash
from arenad.store.migrations import apply_migrations
from events.base import Recorded
from events.codec import decode_event, encode_event, event_tag, event_version

Synchronous = Literal["NORMAL", "FULL"]

_SELECT = (
    "SELECT seq, stream, version, tag, schema_version, recorded_at_ms, payload FROM events"
)


class Projector(Protocol):
    """A read model kept in the append's own transaction.

    ``apply`` may read and write its tables through ``db``; raising aborts the
    whole append (this is how an illegal cell transition is refused before commit).
    """

    name: str
    tables: tuple[str, ...]

    async def apply(self, db: aiosqlite.Connection, batch: Sequence[Recorded]) -> None: ...


def _to_recorded(row: sqlite3.Row | tuple[object, ...]) -> Recorded:
    seq, stream, version, tag, schema_version, recorded_at_ms, payload = row
    return Recorded(
        seq=seq,  # type: ignore[arg-type]
        stream=stream,  # type: ignore[arg-type]
        version=version,  # type: ignore[arg-type]
        tag=tag,  # type: ignore[arg-type]
        schema_version=schema_version,  # type: ignore[arg-type]
        recorded_at_ms=recorded_at_ms,  # type: ignore[arg-type]
        event=decode_event(payload, tag, schema_version),  # type: ignore[arg-type]
    )


def _is_unwritable(exc: sqlite3.Error) -> bool:
    text = str(exc).lower()
    return any(s in text for s in ("disk is full", "readonly", "read-only", "disk i/o error"))


class SqliteEventStore(EventStore):
    def __init__(
        self,
        writer: aiosqlite.Connection,
        reader: aiosqlite.Connection,
        path: Path,
        clock: Clock,
        projectors: Sequence[Projector],
    ) -> None:
        self._db = writer
        self._reader = reader
        self.path = path
        self._clock = clock
        self._projectors = list(projectors)
        # One writer connection: appends from many tasks are serialized here.
        self._write_lock = asyncio.Lock()
        self._appended = asyncio.Event()

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
    ) -> SqliteEventStore:
        path.parent.mkdir(parents=True, exist_ok=True)
        writer = await aiosqlite.connect(path, isolation_level=None)
        reader: aiosqlite.Connection | None = None
        try:
            await writer.execute(f"PRAGMA busy_timeout = {int(busy_timeout_ms)}")
            await writer.execute("PRAGMA journal_mode = WAL")
            await writer.execute(f"PRAGMA synchronous = {synchronous}")
            if migrate:
                await apply_migrations(writer)
            reader = await aiosqlite.connect(path, isolation_level=None)
            await reader.execute(f"PRAGMA busy_timeout = {int(busy_timeout_ms)}")
        except BaseException:
            await writer.close()
            if reader is not None:
                await reader.close()
            raise
        return cls(writer, reader, path, clock, projectors)

    @property
    def connection(self) -> aiosqlite.Connection:
        """The writer connection (for read models' queries and maintenance)."""
        return self._db

    async def close(self) -> None:
        await self._reader.close()
        await self._db.close()

    # -- writing -----------------------------------------------------------------

    async def append_many(self, requests: Sequence[AppendRequest]) -> list[list[Recorded]]:
        requests = [r for r in requests if r.events]
        if not requests:
            return []
        async with self._write_lock:
            try:
                await self._db.execute("BEGIN IMMEDIATE")
            except sqlite3.Error as exc:
                raise self._translate(exc) from exc
            try:
                result = await self._append_in_transaction(requests)
                await self._db.execute("COMMIT")
            except BaseException as exc:
                await self._rollback()
                if isinstance(exc, sqlite3.IntegrityError):
                    # The (stream, version) key is the backstop of the version check.
                    raise ConcurrencyError(
                        requests[0].stream, requests[0].expected_version, None
                    ) from exc
                if isinstance(exc, sqlite3.Error):
                    raise self._translate(exc) from exc
                raise
        self._appended.set()
        self._appended = asyncio.Event()
        return result

    async def _rollback(self) -> None:
        try:
            await self._db.execute("ROLLBACK")
        except sqlite3.Error:
            pass  # the transaction was already rolled back by SQLite itself

    def _translate(self, exc: sqlite3.Error) -> StoreError:
        if _is_unwritable(exc):
            return StoreUnwritable(f"the event store at {self.path} cannot be written: {exc}")
        return StoreError(f"event store error at {self.path}: {exc}")

    async def _append_in_transaction(
        self, requests: Sequence[AppendRequest]
    ) -> list[list[Recorded]]:
        head = await self._db.execute_fetchall("SELECT seq, hash FROM log_head WHERE id = 1")
        seq, prev = next(iter(head))
        versions = await self._current_versions({r.stream for r in requests})
        now = self._clock()
        rows: list[tuple[object, ...]] = []
        result: list[list[Recorded]] = []
        for request in requests:
            current = versions.get(request.stream, 0)
            if request.expected_version is not None and request.expected_version != current:
                raise ConcurrencyError(request.stream, request.expected_version, current)
            recorded_here: list[Recorded] = []
            for event in request.events:
                seq += 1
                current += 1
                tag = event_tag(event)
                schema_version = event_version(event)
                payload = encode_event(event)
                prev = row_hash(
                    prev, seq, request.stream, current, tag, schema_version, now, payload
                )
                rows.append(
                    (seq, request.stream, current, tag, schema_version, now, payload, prev)
                )
                recorded_here.append(
                    Recorded(
                        seq=seq,
                        stream=request.stream,
                        version=current,
                        tag=tag,
                        schema_version=schema_version,
                        recorded_at_ms=now,
                        event=event,
                    )
                )
            versions[request.stream] = current
            result.append(recorded_here)
        await self._db.executemany(
            "INSERT INTO events (seq, stream, version, tag, schema_version, recorded_at_ms,"
            " payload, hash) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            rows,
        )
        batch = [r for recorded in result for r in recorded]
        for projector in self._projectors:
            await projector.apply(self._db, batch)
        await self._db.execute("UPDATE log_head SET seq = ?, hash = ? WHERE id = 1", (seq, prev))
        return result

    async def _current_versions(self, streams: set[str]) -> dict[str, int]:
        found: dict[str, int] = {}
        names = sorted(streams)
        # Chunked: SQLite caps host parameters per statement.
        for i in range(0, len(names), 500):
            chunk = names[i : i + 500]
            marks = ",".join("?" * len(chunk))
            for stream, version in await self._db.execute_fetchall(
                f"SELECT stream, MAX(version) FROM events WHERE stream IN ({marks}) GROUP BY stream",
                chunk,
            ):
                found[str(stream)] = int(version)
        return found

    # -- reading -----------------------------------------------------------------

    async def read_stream(self, stream: str, after_version: int = 0) -> list[Recorded]:
        rows = await self._reader.execute_fetchall(
            f"{_SELECT} WHERE stream = ? AND version > ? ORDER BY version",
            (stream, after_version),
        )
        return [_to_recorded(r) for r in rows]

    async def read_all(self, after_seq: int = 0, batch_size: int = 2000) -> AsyncIterator[Recorded]:
        # Keyset pagination: bounded memory and no read transaction held across
        # batches, so a long replay never blocks checkpoints.
        position = after_seq
        while True:
            rows = await self._reader.execute_fetchall(
                f"{_SELECT} WHERE seq > ? ORDER BY seq LIMIT ?", (position, batch_size)
            )
            batch = [_to_recorded(r) for r in rows]
            if not batch:
                return
            for recorded in batch:
                yield recorded
            position = batch[-1].seq
            if len(batch) < batch_size:
                return

    async def read_streams(self, streams: Sequence[str]) -> list[Recorded]:
        """Several streams' events in global order (bounded by those streams' size)."""
        out: list[Recorded] = []
        for i in range(0, len(streams), 500):
            chunk = list(streams[i : i + 500])
            marks = ",".join("?" * len(chunk))
            rows = await self._reader.execute_fetchall(
                f"{_SELECT} WHERE stream IN ({marks}) ORDER BY seq", chunk
            )
            out.extend(_to_recorded(r) for r in rows)
        out.sort(key=lambda r: r.seq)
        return out

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
        try:
            await asyncio.wait_for(self._appended.wait(), timeout_s)
        except TimeoutError:
            pass

    # -- maintenance -------------------------------------------------------------

    async def verify_chain(self) -> ChainReport:
        """Walk the hash chain from the first row; name the first bad sequence number."""
        head = await self._reader.execute_fetchall("SELECT seq, hash FROM log_head WHERE id = 1")
        head_seq, head_hash = next(iter(head))
        verifier = ChainVerifier()
        position = 0
        while True:
            batch = await self._reader.execute_fetchall(
                "SELECT seq, stream, version, tag, schema_version, recorded_at_ms, payload,"
                " hash FROM events WHERE seq > ? ORDER BY seq LIMIT 5000",
                (position,),
            )
            rows = [ChainRow(*r) for r in batch]  # type: ignore[arg-type]
            if not rows:
                break
            if not all(verifier.feed(row) for row in rows):
                break
            position = rows[-1].seq
        return verifier.finish(int(head_seq), bytes(head_hash))

    async def rebuild(self, batch_size: int = 5000) -> int:
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
                    batch = [_to_recorded(r) for r in rows]
                    if not batch:
                        break
                    for projector in self._projectors:
                        await projector.apply(self._db, batch)
                    count += len(batch)
                    position = batch[-1].seq
                await self._db.execute("COMMIT")
            except BaseException:
                await self._rollback()
                raise
        return count
