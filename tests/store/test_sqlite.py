"""What only the SQLite store promises: pragmas, the (stream, version) backstop,
append-only triggers, bounded reads, and refusing what it cannot read."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from arenad.errors import ConcurrencyError, LogTampered, StoreError
from arenad.store.base import AppendRequest
from arenad.store.sqlite import SqliteEventStore
from events.cell import CellFailed
from tests.store.contract import collect, line, lines


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SqliteEventStore]:
    s = await SqliteEventStore.open(tmp_path / "events.db")
    try:
        yield s
    finally:
        await s.close()


async def pragma(store: SqliteEventStore, name: str) -> Any:
    rows = list(await store.connection.execute_fetchall(f"PRAGMA {name}"))
    return rows[0][0]


async def test_wal_normal_and_busy_timeout_by_default(store: SqliteEventStore) -> None:
    assert await pragma(store, "journal_mode") == "wal"
    assert await pragma(store, "synchronous") == 1  # NORMAL
    assert await pragma(store, "busy_timeout") == 10_000


async def test_synchronous_full_and_busy_timeout_are_configurable(tmp_path: Path) -> None:
    store = await SqliteEventStore.open(
        tmp_path / "events.db", synchronous="FULL", busy_timeout_ms=2500
    )
    try:
        assert await pragma(store, "synchronous") == 2  # FULL
        assert await pragma(store, "busy_timeout") == 2500
        assert await pragma(store, "journal_mode") == "wal"
    finally:
        await store.close()


async def test_an_unknown_synchronous_mode_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="synchronous"):
        await SqliteEventStore.open(tmp_path / "e.db", synchronous="OFF")  # type: ignore[arg-type]


async def test_wal_persists_in_the_file(store: SqliteEventStore) -> None:
    await store.append("s/a", 0, lines(0, 1))
    with sqlite3.connect(store.path) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


async def test_two_stores_on_one_file_racing_on_one_stream_never_fork(tmp_path: Path) -> None:
    path = tmp_path / "events.db"
    a = await SqliteEventStore.open(path)
    b = await SqliteEventStore.open(path)
    try:
        for round_ in range(30):
            # Both read the same version, then both append against it.
            seen = await a.stream_version("cell/x")
            assert await b.stream_version("cell/x") == seen
            results = await asyncio.gather(
                a.append("cell/x", seen, [line(2 * round_)]),
                b.append("cell/x", seen, [line(2 * round_ + 1)]),
                return_exceptions=True,
            )
            wins = [r for r in results if isinstance(r, list)]
            losses = [r for r in results if isinstance(r, ConcurrencyError)]
            assert len(wins) == 1 and len(losses) == 1, results
            assert losses[0].stream == "cell/x"
            assert losses[0].actual == seen + 1
        versions = [r.version for r in await a.read_stream("cell/x")]
        assert versions == list(range(1, 31))
        report = await a.verify_chain()
        assert report.ok, report
    finally:
        await a.close()
        await b.close()


class StaleStore(SqliteEventStore):
    """A writer whose version check reads a stale version (as a cache would): only
    the UNIQUE(stream, version) key stands between it and a fork."""

    async def _head_and_versions(self, streams: set[str]) -> tuple[int, bytes, dict[str, int], int]:
        seq, prev, _, last = await super()._head_and_versions(streams)
        return seq, prev, {}, last


async def test_unique_stream_version_is_the_backstop(tmp_path: Path) -> None:
    path = tmp_path / "events.db"
    good = await SqliteEventStore.open(path)
    stale = await StaleStore.open(path)
    try:
        await good.append("cell/x", 0, lines(0, 2))
        with pytest.raises(ConcurrencyError) as caught:
            await stale.append_many(
                [AppendRequest("other", None, lines(9, 10)), AppendRequest("cell/x", 0, [line(2)])]
            )
        # The error names the stream that moved, as the in-transaction check would.
        assert (caught.value.stream, caught.value.expected, caught.value.actual) == (
            "cell/x",
            0,
            2,
        )
        assert await good.last_seq() == 2
        assert await good.streams("") == ["cell/x"]
        assert (await good.verify_chain()).ok
    finally:
        await good.close()
        await stale.close()


def test_the_database_itself_refuses_a_duplicate_stream_version(tmp_path: Path) -> None:
    async def setup() -> None:
        s = await SqliteEventStore.open(tmp_path / "events.db")
        await s.append("cell/x", 0, lines(0, 1))
        await s.close()

    asyncio.run(setup())
    with (
        sqlite3.connect(tmp_path / "events.db") as conn,
        pytest.raises(sqlite3.IntegrityError, match=r"events\.stream, events\.version"),
    ):
        conn.execute(
            "INSERT INTO events (seq, stream, version, tag, schema_version, recorded_at_ms,"
            " payload, hash) VALUES (2, 'cell/x', 1, 'ingest.line', 1, 0, x'00', x'00')"
        )


@pytest.mark.parametrize(
    ("statement", "refusal"),
    [
        ("UPDATE events SET payload = x'00' WHERE seq = 1", "UPDATE refused"),
        ("UPDATE events SET recorded_at_ms = 0", "UPDATE refused"),
        ("DELETE FROM events WHERE seq = 2", "DELETE refused"),
        ("DELETE FROM events", "DELETE refused"),
    ],
)
async def test_triggers_refuse_update_and_delete(
    store: SqliteEventStore, statement: str, refusal: str
) -> None:
    await store.append("s/a", 0, lines(0, 3))
    conn = sqlite3.connect(store.path)
    try:
        with pytest.raises(sqlite3.IntegrityError, match=f"events are append-only: {refusal}"):
            conn.execute(statement)
        conn.rollback()
    finally:
        conn.close()
    assert [r.event for r in await store.read_stream("s/a")] == lines(0, 3)


async def test_the_reader_connection_cannot_write(store: SqliteEventStore) -> None:
    reader = store._reader
    with pytest.raises(sqlite3.OperationalError, match="readonly"):
        await reader.execute("INSERT INTO log_head (id, seq, hash) VALUES (2, 0, x'00')")


async def test_a_reader_store_reads_what_its_owner_appends_and_writes_nothing(
    store: SqliteEventStore, tmp_path: Path
) -> None:
    await store.append("s/a", 0, lines(0, 3))
    reader = await SqliteEventStore.open_reader(store.path)
    try:
        await store.append("s/a", 3, lines(3, 4))  # seen: every read is a fresh snapshot
        assert [r.event for r in await reader.read_stream("s/a")] == lines(0, 4)
        with pytest.raises(StoreError):
            await reader.append("s/a", 4, lines(4, 5))
    finally:
        await reader.close()
    assert [r.event for r in await store.read_stream("s/a")] == lines(0, 4)
    # A missing file is an error, not a new empty log.
    with pytest.raises(StoreError, match="cannot open the event store"):
        await SqliteEventStore.open_reader(tmp_path / "nowhere" / "events.db")
    assert not (tmp_path / "nowhere").exists()


async def test_read_all_fetches_in_bounded_batches(
    store: SqliteEventStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    for i in range(0, 2500, 500):
        await store.append("s/a", None, lines(i, i + 500))
    fetched: list[int] = []
    original = store._reader.execute_fetchall

    def spy(sql: str, parameters: Any = None) -> Any:
        async def run() -> Any:
            rows = await original(sql, parameters)
            fetched.append(len(list(rows)))
            return rows

        return run()

    monkeypatch.setattr(store._reader, "execute_fetchall", spy)
    got = await collect(store.read_all(after_seq=0, batch_size=700))
    assert [r.seq for r in got] == list(range(1, 2501))
    assert fetched == [700, 700, 700, 400]


async def test_an_unreadable_row_names_its_seq(store: SqliteEventStore) -> None:
    await store.append("s/a", 0, lines(0, 2))
    # A row written by a newer arenad (a tag this one does not know).
    with sqlite3.connect(store.path) as conn:
        conn.execute(
            "INSERT INTO events (seq, stream, version, tag, schema_version, recorded_at_ms,"
            " payload, hash) VALUES (3, 's/a', 3, 'cell.teleported', 1, 0,"
            ' \'{"type":"cell.teleported","v":1}\', x\'00\')'
        )
        conn.execute("UPDATE log_head SET seq = 3")
    with pytest.raises(StoreError, match=r"event #3 \('cell.teleported' v1\).*unknown event tag"):
        await collect(store.read_all())
    with pytest.raises(StoreError, match="event #3"):
        await store.read_stream("s/a")


def _insert_raw(path: Path, seq: int, tag: str, schema_version: int, payload: str) -> None:
    # Inserting is what the triggers allow; the chain is not this test's concern.
    with sqlite3.connect(path) as conn:
        conn.execute(
            "INSERT INTO events (seq, stream, version, tag, schema_version, recorded_at_ms,"
            " payload, hash) VALUES (?, 's/a', ?, ?, ?, 0, ?, x'00')",
            (seq, seq, tag, schema_version, payload.encode()),
        )
        conn.execute("UPDATE log_head SET seq = ?", (seq,))


async def test_a_payload_of_another_type_than_its_tag_is_refused(
    store: SqliteEventStore,
) -> None:
    # The replay's fast path decodes by the payload's own type; the envelope's tag
    # must still agree with it.
    await store.append("s/a", 0, lines(0, 1))
    _insert_raw(
        store.path,
        2,
        "run.timed_out",
        1,
        '{"type":"run.completed","v":1,"attempt":1,"rc":0,"wall_s":1.0}',
    )
    with pytest.raises(StoreError, match=r"event #2 .*holds a 'run.completed' payload"):
        await collect(store.read_all())


async def test_an_older_schema_version_is_upcast_on_read(store: SqliteEventStore) -> None:
    await store.append("s/a", 0, lines(0, 1))
    _insert_raw(
        store.path,
        2,
        "cell.failed",
        1,
        '{"type":"cell.failed","v":1,"attempt":1,"stage":"materialize",'
        '"error":"clone failed","infra":true}',
    )
    got = await collect(store.read_all())
    assert got[-1].schema_version == 1
    assert isinstance(got[-1].event, CellFailed)
    assert got[-1].event.classification == "infrastructure"


async def test_a_store_that_is_not_a_database_is_a_store_error(tmp_path: Path) -> None:
    path = tmp_path / "events.db"
    path.write_text("not a database, just text\n" * 100)
    with pytest.raises(StoreError, match="cannot open the event store"):
        await SqliteEventStore.open(path)


async def test_appends_survive_reopening(tmp_path: Path) -> None:
    path = tmp_path / "events.db"
    first = await SqliteEventStore.open(path)
    await first.append("s/a", 0, lines(0, 3))
    await first.close()
    second = await SqliteEventStore.open(path)
    try:
        await second.append("s/a", 3, lines(3, 4))
        assert [r.version for r in await second.read_stream("s/a")] == [1, 2, 3, 4]
        assert (await second.verify_chain()).ok
    finally:
        await second.close()


async def test_many_streams_in_one_batch(store: SqliteEventStore) -> None:
    # More streams than one IN (...) chunk: versions are checked for all of them.
    first = [AppendRequest(f"s/{i:04d}", 0, [line(i)]) for i in range(1200)]
    await store.append_many(first)
    again = [AppendRequest(f"s/{i:04d}", 1, [line(i)]) for i in range(1200)]
    again[1100] = AppendRequest("s/1100", 0, [line(0)])
    with pytest.raises(ConcurrencyError) as caught:
        await store.append_many(again)
    assert caught.value.stream == "s/1100"
    assert await store.last_seq() == 1200


async def test_append_batches_chains_every_batch_and_projects_it(
    store: SqliteEventStore,
) -> None:
    # The chain runs on from batch to batch inside the one transaction: verify-log agrees.
    async def batches() -> AsyncIterator[list[AppendRequest]]:
        for n in range(5):
            yield [AppendRequest(f"s/{n}", 0, lines(10 * n, 10 * n + 3))]

    assert await store.append_batches(batches()) == 15
    await store.append("s/0", 3, lines(99, 100))
    report = await store.verify_chain()
    assert report.ok and report.rows == 16


class _RefusesStream:
    """A projector refusing any batch holding one stream's events (as the cells projector
    refuses an illegal transition)."""

    name = "refuser"
    tables: tuple[str, ...] = ()

    def __init__(self, stream: str) -> None:
        self.stream = stream
        self.seen: list[int] = []

    def wants(self, stream: str) -> bool:
        return True

    async def apply(self, db: Any, batch: Any) -> None:
        self.seen.extend(r.seq for r in batch)
        if any(r.stream == self.stream for r in batch):
            raise StoreError(f"refused {self.stream}")


async def test_append_batches_pipelined_sql_failure_rolls_back_every_batch(
    tmp_path: Path,
) -> None:
    # A batch's SQL runs while the next is drawn and encoded: its failure still rolls
    # back the whole transaction, the batches before it and the one drawn after it.
    refuser = _RefusesStream("s/bad")
    store = await SqliteEventStore.open(tmp_path / "events.db", projectors=[refuser])
    drawn: list[int] = []
    try:
        await store.append("s/old", 0, lines(0, 2))

        async def batches() -> AsyncIterator[list[AppendRequest]]:
            for n in range(4):
                drawn.append(n)
                stream = "s/bad" if n == 1 else f"s/{n}"
                yield [AppendRequest(stream, 0, lines(10 * n, 10 * n + 2))]

        with pytest.raises(StoreError, match="refused s/bad"):
            await store.append_batches(batches())
        assert drawn == [0, 1, 2]  # the third was drawn and encoded, never written
        assert await store.last_seq() == 2
        assert await store.streams("s/") == ["s/old"]

        # The head and versions carried in memory start again from the log: a stream
        # written before the transaction (looked up on the reader) and one written by an
        # earlier batch of it (carried) both continue at the right version.
        async def good() -> AsyncIterator[list[AppendRequest]]:
            yield [AppendRequest("s/new", 0, lines(20, 22))]
            yield [AppendRequest("s/old", 2, lines(22, 23))]
            yield [AppendRequest("s/new", 2, lines(23, 24))]

        assert await store.append_batches(good()) == 4
        assert [(r.seq, r.stream, r.version) for r in await collect(store.read_all())][2:] == [
            (3, "s/new", 1),
            (4, "s/new", 2),
            (5, "s/old", 3),
            (6, "s/new", 3),
        ]
        report = await store.verify_chain()
        assert report.ok and report.rows == 6
    finally:
        await store.close()


# -- tamper refusal: every append checks the chain from the last verified head -------------

_UNGUARD = (
    "DROP TRIGGER IF EXISTS events_are_append_only_update;"
    " DROP TRIGGER IF EXISTS events_are_append_only_delete;"
)


def _tamper(path: Path, sql: str) -> None:
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.executescript(_UNGUARD + sql)
    finally:
        conn.close()


def _checkpoint(path: Path) -> tuple[int, bytes, bytes | None]:
    with sqlite3.connect(path) as conn:
        seq, digest = conn.execute("SELECT seq, hash FROM chain_checkpoint").fetchone()
        row = conn.execute("SELECT hash FROM events WHERE seq = ?", (seq,)).fetchone()
    return seq, digest, row[0] if row else None


async def _filled(path: Path, rows: int, every: int = 5) -> None:
    store = await SqliteEventStore.open(path)
    store.checkpoint_rows = every
    try:
        for n in range(rows):
            await store.append(f"ingest/c{n % 3}/1", None, [line(n)])
    finally:
        await store.close()


async def test_the_chain_checkpoint_advances_inside_appends(tmp_path: Path) -> None:
    path = tmp_path / "events.db"
    await _filled(path, 12)
    seq, digest, stored = _checkpoint(path)
    assert 10 <= seq <= 12 and digest == stored


async def test_a_row_deleted_below_the_checkpoint_is_refused_by_a_new_writer(
    tmp_path: Path,
) -> None:
    path = tmp_path / "events.db"
    await _filled(path, 12)
    _tamper(path, "DELETE FROM events WHERE seq = 3;")
    store = await SqliteEventStore.open(path)
    try:
        with pytest.raises(LogTampered) as caught:
            await store.append("cell/x", 0, [line(99)])
        assert caught.value.first_bad_seq == 3
        assert "row 3 is missing" in str(caught.value) and "verify-log" in str(caught.value)
        assert await store.last_seq() == 12
    finally:
        await store.close()


async def test_an_edited_checkpoint_is_walked_past_and_repaired(tmp_path: Path) -> None:
    path = tmp_path / "events.db"
    await _filled(path, 12)
    _tamper(path, "UPDATE chain_checkpoint SET hash = zeroblob(32);")
    store = await SqliteEventStore.open(path)
    try:
        await store.append("cell/x", 0, [line(99)])
    finally:
        await store.close()
    seq, digest, stored = _checkpoint(path)
    assert seq >= 12 and digest == stored


async def test_a_truncated_log_with_a_rewritten_head_below_the_checkpoint_is_refused(
    tmp_path: Path,
) -> None:
    path = tmp_path / "events.db"
    await _filled(path, 12)
    checkpoint, _, _ = _checkpoint(path)
    _tamper(
        path,
        "DELETE FROM events WHERE seq > 8;"
        " UPDATE log_head SET seq = 8, hash = (SELECT hash FROM events WHERE seq = 8);",
    )
    store = await SqliteEventStore.open(path)
    try:
        with pytest.raises(LogTampered, match=f"verified up to row {checkpoint}"):
            await store.append("cell/x", 0, [line(99)])
    finally:
        await store.close()


async def test_a_live_writer_checks_what_others_appended_and_inserted(tmp_path: Path) -> None:
    # A daemon's store stays open for days: rows another process appends are checked
    # before it builds on them, and a row inserted past the head is named.
    path = tmp_path / "events.db"
    ours = await SqliteEventStore.open(path)
    theirs = await SqliteEventStore.open(path)
    try:
        await ours.append("cell/a", 0, lines(0, 3))
        await theirs.append("cell/b", 0, lines(3, 6))
        await ours.append("cell/a", 3, [line(6)])
        await theirs.append("cell/b", 3, [line(7)])
        _tamper(path, "UPDATE events SET payload = CAST(payload AS TEXT) || ' ' WHERE seq = 8;")
        with pytest.raises(LogTampered) as caught:
            await ours.append("cell/a", 4, [line(8)])
        assert caught.value.first_bad_seq == 8
        assert await ours.last_seq() == 8
    finally:
        await ours.close()
        await theirs.close()


async def test_a_row_inserted_past_the_head_is_refused_before_the_insert(
    store: SqliteEventStore,
) -> None:
    await store.append("cell/a", 0, lines(0, 3))
    _tamper(
        store.path,
        "INSERT INTO events SELECT 4, stream, version + 9, tag, schema_version,"
        " recorded_at_ms, payload, hash FROM events WHERE seq = 3;",
    )
    with pytest.raises(LogTampered) as caught:
        await store.append("cell/a", 3, [line(3)])
    assert caught.value.first_bad_seq == 4 and "past the log's head" in str(caught.value)
