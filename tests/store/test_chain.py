"""Tamper evidence: edits made with the sqlite3 CLI (triggers dropped first) are
found by `arenad verify-log`, which names the first bad sequence number."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from arenad.home import Home, open_store
from arenad.store.chain import GENESIS, ChainRow, row_hash, verify_rows
from tests.store.contract import lines
from tests.store.helpers import run_arenad, sqlite3_cli

DROP_TRIGGERS = (
    "DROP TRIGGER events_are_append_only_update;\nDROP TRIGGER events_are_append_only_delete;\n"
)
ROWS = 12


@pytest.fixture
def home(tmp_path: Path) -> Path:
    async def fill() -> None:
        async with open_store(Home(tmp_path / "home"), create=True) as store:
            for i in range(0, ROWS, 3):
                await store.append(f"ingest/c{i % 2}/1", None, lines(i, i + 3))

    asyncio.run(fill())
    return tmp_path / "home"


def verify(home: Path) -> tuple[int, str, str]:
    done = run_arenad(home, "verify-log")
    return done.returncode, done.stdout, done.stderr


def test_an_intact_log_verifies(home: Path) -> None:
    rc, out, err = verify(home)
    assert (rc, err) == (0, "")
    assert out.strip() == f"log ok: {ROWS} events, chain verified"


def test_an_empty_log_verifies(tmp_path: Path) -> None:
    assert run_arenad(tmp_path / "h", "init").returncode == 0
    rc, out, _ = verify(tmp_path / "h")
    assert rc == 0 and "log ok: 0 events" in out


def test_the_triggers_stop_the_sqlite3_cli(home: Path) -> None:
    import subprocess

    from tests.store.helpers import SQLITE3_CLI

    done = subprocess.run(
        [SQLITE3_CLI, str(home / "arenad.db"), "DELETE FROM events WHERE seq = 5;"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode != 0
    assert "events are append-only: DELETE refused" in done.stderr
    assert verify(home)[0] == 0


@pytest.mark.parametrize(
    ("tamper", "first_bad"),
    [
        ("UPDATE events SET payload = replace(payload, 'out.jsonl', 'o.jsonl') WHERE seq = 5", 5),
        ("UPDATE events SET payload = CAST(payload AS TEXT) || ' ' WHERE seq = 7", 7),
        ("UPDATE events SET recorded_at_ms = recorded_at_ms + 1 WHERE seq = 1", 1),
        ("UPDATE events SET stream = 'ingest/c9/1' WHERE seq = 9", 9),
        ("UPDATE events SET hash = 'not a hash' WHERE seq = 3", 3),
        ("UPDATE events SET payload = 42 WHERE seq = 4", 4),
        ("DELETE FROM events WHERE seq = 6", 6),
        ("DELETE FROM events WHERE seq = 1", 1),
        ("DELETE FROM events WHERE seq = 12", 12),
        ("DELETE FROM events WHERE seq >= 10", 10),
        ("DELETE FROM events", 1),
        ("UPDATE log_head SET hash = zeroblob(32)", 13),
    ],
    ids=[
        "edit-payload",
        "payload-to-text",
        "edit-time",
        "move-stream",
        "text-hash",
        "integer-payload",
        "delete-middle",
        "delete-first",
        "delete-last",
        "delete-tail",
        "delete-all",
        "edit-head",
    ],
)
def test_edits_and_deletions_are_found(home: Path, tamper: str, first_bad: int) -> None:
    sqlite3_cli(home / "arenad.db", DROP_TRIGGERS + tamper + ";\n")
    rc, out, err = verify(home)
    assert rc == 1, (out, err)
    assert out == ""
    lines_ = err.strip().splitlines()
    assert len(lines_) == 1, err  # one line, never a traceback
    assert lines_[0].startswith(f"arenad: log tampered or damaged at seq {first_bad}:"), err


def test_a_row_inserted_past_the_head_is_found(home: Path) -> None:
    # INSERT is allowed by the triggers; a row that did not move the head is foreign.
    sqlite3_cli(
        home / "arenad.db",
        "INSERT INTO events (seq, stream, version, tag, schema_version, recorded_at_ms,"
        " payload, hash) SELECT 13, stream, version + 100, tag, schema_version,"
        " recorded_at_ms, payload, hash FROM events WHERE seq = 12;\n",
    )
    rc, _, err = verify(home)
    assert rc == 1
    assert "at seq 13:" in err and "past the log's head" in err


def _chain(n: int) -> tuple[list[ChainRow], bytes]:
    rows: list[ChainRow] = []
    prev = GENESIS
    for seq in range(1, n + 1):
        payload = f'{{"n":{seq}}}'.encode()
        prev = row_hash(prev, seq, "s", seq, "t", 1, 1000 + seq, payload)
        rows.append(ChainRow(seq, "s", seq, "t", 1, 1000 + seq, payload, prev))
    return rows, prev


def test_verify_rows_reports_the_first_bad_row() -> None:
    rows, head = _chain(5)
    assert verify_rows(rows, 5, head).ok
    edited = [*rows[:2], ChainRow(3, "s", 3, "t", 1, 1003, b'{"n":33}', rows[2].hash), *rows[3:]]
    report = verify_rows(edited, 5, head)
    assert (report.ok, report.first_bad_seq) == (False, 3)
    report = verify_rows(rows[:4], 5, head)
    assert (report.ok, report.first_bad_seq) == (False, 5)
    report = verify_rows([rows[0], *rows[2:]], 5, head)
    assert (report.ok, report.first_bad_seq) == (False, 2)


def test_the_hash_separates_fields() -> None:
    # Length prefixes: moving bytes between stream and tag changes the hash.
    a = row_hash(GENESIS, 1, "ab", 1, "c", 1, 0, b"{}")
    b = row_hash(GENESIS, 1, "a", 1, "bc", 1, 0, b"{}")
    assert a != b
