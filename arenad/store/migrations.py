"""Numbered .sql migrations, each applied in one explicit transaction with its
bookkeeping row (name + checksum). A changed, already-applied migration is an error."""

from __future__ import annotations

import hashlib
import re
import sqlite3
from pathlib import Path

import aiosqlite
import msgspec

from arenad.errors import MigrationError

_NAME = re.compile(r"^(\d{4})_[a-z0-9_]+\.sql$")

BOOKKEEPING = """
CREATE TABLE IF NOT EXISTS schema_migrations (
    name       TEXT PRIMARY KEY,
    checksum   TEXT NOT NULL,
    applied_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
)
"""


class Migration(msgspec.Struct, frozen=True):
    name: str
    sql: str

    @property
    def checksum(self) -> str:
        return hashlib.sha256(self.sql.encode()).hexdigest()


class MigrationStatus(msgspec.Struct, frozen=True):
    name: str
    applied: bool
    checksum: str


def migrations_dir() -> Path:
    """The copy shipped inside the wheel (arenad/migrations); the repo's migrations/ in a
    checkout.

    The packaged copy is looked at first: an installed arenad must never pick up an
    unrelated top-level ``migrations`` folder another distribution put in site-packages.
    The checkout's is used only beside this project's own pyproject.toml.
    """
    here = Path(__file__).resolve().parent.parent
    packaged = here / "migrations"
    checkout = here.parent / "migrations"
    if packaged.is_dir() and any(packaged.glob("*.sql")):
        return packaged
    if (here.parent / "pyproject.toml").is_file() and checkout.is_dir():
        return checkout
    raise MigrationError(f"no migrations found in {packaged} or {checkout}")


def load_migrations(directory: Path | None = None) -> list[Migration]:
    directory = directory or migrations_dir()
    misnamed = sorted(
        p.name for p in directory.iterdir() if p.suffix == ".sql" and not _NAME.match(p.name)
    )
    if misnamed:
        # A file that looks like a migration but would be silently skipped.
        raise MigrationError(
            f"{directory}: {', '.join(misnamed)} not named NNNN_lowercase_name.sql"
        )
    found = sorted(p for p in directory.iterdir() if _NAME.match(p.name))
    if not found:
        raise MigrationError(f"no migrations in {directory}")
    numbers = [p.name[:4] for p in found]
    if len(set(numbers)) != len(numbers):
        raise MigrationError(f"two migrations share a number in {directory}")
    return [Migration(p.name, p.read_text()) for p in found]


def split_statements(sql: str) -> list[str]:
    """Split a script into statements (triggers keep their inner semicolons).

    executescript() would commit any open transaction first, so each statement is
    executed on its own inside the migration's explicit transaction.
    """
    statements: list[str] = []
    current = ""
    for line in sql.splitlines(keepends=True):
        if not current and (not line.strip() or line.lstrip().startswith("--")):
            continue
        current += line
        if sqlite3.complete_statement(current):
            statements.append(current.strip())
            current = ""
    if current.strip():
        raise MigrationError(f"incomplete SQL statement at the end: {current.strip()[:60]!r}")
    return statements


async def _applied(db: aiosqlite.Connection) -> dict[str, str]:
    rows = await db.execute_fetchall(
        "SELECT name FROM sqlite_master WHERE type='table' AND name='schema_migrations'"
    )
    if not list(rows):
        return {}
    return {
        str(name): str(checksum)
        for name, checksum in await db.execute_fetchall(
            "SELECT name, checksum FROM schema_migrations"
        )
    }


def _check_unchanged(migrations: list[Migration], applied: dict[str, str]) -> None:
    known = {m.name for m in migrations}
    for m in migrations:
        if m.name in applied and applied[m.name] != m.checksum:
            raise MigrationError(
                f"migration {m.name} changed after it was applied"
                f" (recorded {applied[m.name][:12]}, file {m.checksum[:12]});"
                " add a new migration instead of editing an applied one"
            )
    unknown = sorted(set(applied) - known)
    if unknown:
        raise MigrationError(
            f"the store has migrations this arenad does not know: {', '.join(unknown)}"
        )


async def migration_status(
    db: aiosqlite.Connection, migrations: list[Migration] | None = None
) -> list[MigrationStatus]:
    """Applied and pending migrations, without writing anything."""
    migrations = migrations if migrations is not None else load_migrations()
    applied = await _applied(db)
    _check_unchanged(migrations, applied)
    return [MigrationStatus(m.name, m.name in applied, m.checksum) for m in migrations]


async def apply_migrations(
    db: aiosqlite.Connection, migrations: list[Migration] | None = None
) -> list[str]:
    """Apply pending migrations in order; return the names applied."""
    migrations = migrations if migrations is not None else load_migrations()
    await db.execute(BOOKKEEPING)
    await db.commit()
    applied = await _applied(db)
    _check_unchanged(migrations, applied)
    done: list[str] = []
    for m in migrations:
        if m.name in applied:
            continue
        await db.execute("BEGIN IMMEDIATE")
        try:
            # Another process may have applied it while this one waited for the lock.
            if list(
                await db.execute_fetchall(
                    "SELECT 1 FROM schema_migrations WHERE name = ?", (m.name,)
                )
            ):
                await db.rollback()
                continue
            for statement in split_statements(m.sql):
                await db.execute(statement)
            await db.execute(
                "INSERT INTO schema_migrations (name, checksum) VALUES (?, ?)", (m.name, m.checksum)
            )
        except BaseException as exc:
            await db.rollback()
            if isinstance(exc, sqlite3.Error):
                raise MigrationError(f"migration {m.name} failed: {exc}") from exc
            raise
        await db.commit()
        done.append(m.name)
    return done
