"""Numbered migrations: order, bookkeeping, refusal of edits, rollback, --list, and
the committed schema snapshot."""

from __future__ import annotations

import hashlib
import os
import re
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path

import aiosqlite
import pytest

from arenad.errors import MigrationError
from arenad.store.migrations import (
    apply_migrations,
    load_migrations,
    migration_status,
    migrations_dir,
    split_statements,
)
from tests.store.helpers import REPO, run_arenad

SNAPSHOT = Path(__file__).with_name("schema_snapshot.sql")


@pytest.fixture
async def db(tmp_path: Path) -> AsyncIterator[aiosqlite.Connection]:
    conn = await aiosqlite.connect(tmp_path / "m.db", isolation_level=None)
    try:
        yield conn
    finally:
        await conn.close()


def write(directory: Path, files: dict[str, str]) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    for name, sql in files.items():
        (directory / name).write_text(sql)
    return directory


TWO = {
    # Written out of order on purpose: the number decides, not the directory listing.
    "0002_add_b.sql": "CREATE TABLE b (id INTEGER PRIMARY KEY, a_id INTEGER REFERENCES a(id));\n"
    "INSERT INTO b (a_id) SELECT id FROM a;\n",
    "0001_add_a.sql": "-- the first table\nCREATE TABLE a (id INTEGER PRIMARY KEY, name TEXT);\n"
    "INSERT INTO a (name) VALUES ('one');\n",
}


async def bookkeeping(db: aiosqlite.Connection) -> list[tuple[str, str]]:
    rows = await db.execute_fetchall("SELECT name, checksum FROM schema_migrations ORDER BY name")
    return [(str(n), str(c)) for n, c in rows]


async def test_migrations_apply_in_order_each_with_its_bookkeeping_row(
    db: aiosqlite.Connection, tmp_path: Path
) -> None:
    migrations = load_migrations(write(tmp_path / "mig", TWO))
    assert [m.name for m in migrations] == ["0001_add_a.sql", "0002_add_b.sql"]
    assert await apply_migrations(db, migrations) == ["0001_add_a.sql", "0002_add_b.sql"]
    assert await bookkeeping(db) == [
        (name, hashlib.sha256(TWO[name].encode()).hexdigest()) for name in sorted(TWO)
    ]
    assert list(await db.execute_fetchall("SELECT a_id FROM b")) == [(1,)]
    # Applying again is a no-op.
    assert await apply_migrations(db, migrations) == []
    assert [s.applied for s in await migration_status(db, migrations)] == [True, True]


async def test_a_pending_migration_is_applied_later(
    db: aiosqlite.Connection, tmp_path: Path
) -> None:
    directory = write(tmp_path / "mig", {"0001_add_a.sql": TWO["0001_add_a.sql"]})
    assert await apply_migrations(db, load_migrations(directory)) == ["0001_add_a.sql"]
    write(directory, {"0002_add_b.sql": TWO["0002_add_b.sql"]})
    status = await migration_status(db, load_migrations(directory))
    assert [(s.name, s.applied) for s in status] == [
        ("0001_add_a.sql", True),
        ("0002_add_b.sql", False),
    ]
    assert await apply_migrations(db, load_migrations(directory)) == ["0002_add_b.sql"]


async def test_a_changed_applied_migration_is_an_error(
    db: aiosqlite.Connection, tmp_path: Path
) -> None:
    directory = write(tmp_path / "mig", TWO)
    await apply_migrations(db, load_migrations(directory))
    (directory / "0001_add_a.sql").write_text(TWO["0001_add_a.sql"] + "-- an edit\n")
    with pytest.raises(MigrationError, match=r"0001_add_a.sql changed after it was applied"):
        await apply_migrations(db, load_migrations(directory))
    with pytest.raises(MigrationError, match="changed after it was applied"):
        await migration_status(db, load_migrations(directory))


async def test_an_applied_migration_this_arenad_does_not_know_is_an_error(
    db: aiosqlite.Connection, tmp_path: Path
) -> None:
    await apply_migrations(db, load_migrations(write(tmp_path / "new", TWO)))
    older = write(tmp_path / "old", {"0001_add_a.sql": TWO["0001_add_a.sql"]})
    with pytest.raises(MigrationError, match=r"does not know: 0002_add_b\.sql"):
        await apply_migrations(db, load_migrations(older))


async def test_a_failing_statement_rolls_the_whole_migration_back(
    db: aiosqlite.Connection, tmp_path: Path
) -> None:
    directory = write(
        tmp_path / "mig",
        {
            "0001_add_a.sql": TWO["0001_add_a.sql"],
            "0002_broken.sql": "CREATE TABLE c (id INTEGER);\nINSERT INTO c VALUES (1);\n"
            "CREATE INDEX c_by_missing ON c (no_such_column);\n",
        },
    )
    with pytest.raises(MigrationError, match=r"migration 0002_broken.sql failed: .*no_such_column"):
        await apply_migrations(db, load_migrations(directory))
    tables = {str(r[0]) for r in await db.execute_fetchall("SELECT name FROM sqlite_master")}
    assert "c" not in tables  # the CREATE TABLE before the failure is gone too
    assert "a" in tables  # the earlier migration stays applied
    assert await bookkeeping(db) == [
        ("0001_add_a.sql", hashlib.sha256(TWO["0001_add_a.sql"].encode()).hexdigest())
    ]
    assert not list(await db.execute_fetchall("SELECT 1 WHERE NOT EXISTS (SELECT 1)"))
    # The connection is usable and not stuck in a transaction.
    assert (await db.execute_fetchall("SELECT 1")) == [(1,)]


async def test_a_misnamed_or_duplicate_migration_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(MigrationError, match=r"not named NNNN_lowercase_name\.sql"):
        load_migrations(write(tmp_path / "a", {"0001_ok.sql": "", "3_bad.sql": ""}))
    with pytest.raises(MigrationError, match="share a number"):
        load_migrations(write(tmp_path / "b", {"0001_one.sql": "", "0001_two.sql": ""}))


def test_split_statements_keeps_trigger_bodies_whole() -> None:
    sql = (REPO / "migrations" / "0001_events.sql").read_text()
    statements = split_statements(sql)
    triggers = [s for s in statements if s.startswith("CREATE TRIGGER")]
    assert len(triggers) == 2
    assert all(s.rstrip().endswith("END;") for s in triggers)
    assert all(sqlite3.complete_statement(s) for s in statements)
    with pytest.raises(MigrationError, match="incomplete SQL statement"):
        split_statements("CREATE TABLE x (id INTEGER")


def test_the_checkout_uses_the_repos_migrations() -> None:
    assert migrations_dir() == REPO / "migrations"


def _migrate_partially(db_path: Path) -> None:
    """A store built by an older arenad: only the first migration applied."""
    import asyncio

    async def go() -> None:
        conn = await aiosqlite.connect(db_path, isolation_level=None)
        try:
            await conn.execute("PRAGMA journal_mode = WAL")
            await apply_migrations(conn, load_migrations()[:1])
        finally:
            await conn.close()

    asyncio.run(go())


def test_migrate_list_shows_applied_and_pending_and_writes_nothing(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    db_path = home / "arenad.db"
    _migrate_partially(db_path)
    before_bytes = db_path.read_bytes()
    before_mtime = os.stat(db_path).st_mtime_ns
    done = run_arenad(home, "migrate", "--list")
    assert done.returncode == 0, done.stderr
    listed = [line.split()[:2] for line in done.stdout.splitlines()]
    assert listed == [
        ["applied", "0001_events.sql"],
        ["pending", "0002_cells.sql"],
        ["pending", "0003_runnable_index.sql"],
        ["pending", "0004_chain_checkpoint.sql"],
        ["pending", "0006_tallies.sql"],
        ["pending", "0008_campaign_spend.sql"],
        ["pending", "0009_report_facts.sql"],
    ]
    assert db_path.read_bytes() == before_bytes
    assert os.stat(db_path).st_mtime_ns == before_mtime
    with sqlite3.connect(db_path) as conn:
        assert [r[0] for r in conn.execute("SELECT name FROM schema_migrations")] == [
            "0001_events.sql"
        ]
    # `migrate` then applies the pending one; the list shows it applied.
    done = run_arenad(home, "migrate")
    assert done.returncode == 0, done.stderr
    assert (
        "6 migration(s) applied: 0002_cells.sql, 0003_runnable_index.sql,"
        " 0004_chain_checkpoint.sql, 0006_tallies.sql, 0008_campaign_spend.sql,"
        " 0009_report_facts.sql" in done.stdout
    )
    done = run_arenad(home, "migrate", "--list")
    assert [line.split()[0] for line in done.stdout.splitlines()] == ["applied"] * 7


def test_migrate_list_on_a_missing_store_is_a_user_error(tmp_path: Path) -> None:
    done = run_arenad(tmp_path / "nowhere", "migrate", "--list")
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "run `arenad --home" in done.stderr
    assert not (tmp_path / "nowhere").exists()


def _normalize(sql: str) -> str:
    """Comments dropped, each line stripped, blank lines removed, runs of spaces
    collapsed: formatting-only edits of a migration do not move the snapshot."""
    out = []
    for line in sql.splitlines():
        line = re.sub(r"\s+", " ", re.sub(r"--.*$", "", line)).strip()
        if line:
            out.append(line)
    return "\n".join(out)


def schema_from_migrations(path: Path) -> str:
    import asyncio

    async def build() -> None:
        conn = await aiosqlite.connect(path, isolation_level=None)
        try:
            await apply_migrations(conn)
        finally:
            await conn.close()

    asyncio.run(build())
    with sqlite3.connect(path) as conn:
        rows = conn.execute(
            # Tables first, so the snapshot is itself a script that builds the schema.
            "SELECT type, name, sql FROM sqlite_master WHERE sql IS NOT NULL ORDER BY"
            " CASE type WHEN 'table' THEN 0 WHEN 'index' THEN 1 WHEN 'view' THEN 2 ELSE 3 END,"
            " name"
        ).fetchall()
    return "".join(f"-- {kind} {name}\n{_normalize(sql)};\n\n" for kind, name, sql in rows)


def test_schema_matches_the_committed_snapshot(tmp_path: Path) -> None:
    """The schema all migrations build equals tests/store/schema_snapshot.sql.

    After adding a migration, regenerate the snapshot and review its diff:
        ARENAD_UPDATE_SCHEMA_SNAPSHOT=1 .venv/bin/pytest tests/store/test_migrations.py
    """
    schema = schema_from_migrations(tmp_path / "snapshot.db")
    if os.environ.get("ARENAD_UPDATE_SCHEMA_SNAPSHOT") == "1":
        SNAPSHOT.write_text(schema)
    assert SNAPSHOT.exists(), "no snapshot: run with ARENAD_UPDATE_SCHEMA_SNAPSHOT=1"
    assert schema == SNAPSHOT.read_text(), (
        "the schema changed; if intended, regenerate with ARENAD_UPDATE_SCHEMA_SNAPSHOT=1"
    )
