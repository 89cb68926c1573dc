"""Tamper evidence: edits made with the sqlite3 CLI (triggers dropped first) are
found by `arenad verify-log`, which names the first bad sequence number."""

from __future__ import annotations

import asyncio
import json
import subprocess
from pathlib import Path

import pytest

from arenad.home import Home, open_store
from arenad.store.chain import GENESIS, ChainRow, row_hash, verify_rows
from tests.conftest import make_repo
from tests.daemon.support import cli, command_campaign
from tests.store.contract import lines
from tests.store.helpers import count_rows, run_arenad, sqlite3_cli

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


# -- tamper refusal: nothing is appended on top of a log that fails (issue 14, finding 9) --


def _one_line(done: subprocess.CompletedProcess[str]) -> str:
    assert "Traceback" not in done.stderr, done.stderr
    lines_ = done.stderr.strip().splitlines()
    assert len(lines_) == 1, done.stderr
    return lines_[0]


@pytest.fixture
def campaign_home(tmp_path: Path) -> tuple[Path, Path]:
    """A home with one finished cell (for retry) and one submitted cell, and a campaign
    not submitted yet."""
    repo = tmp_path / "repo"
    base = make_repo(repo, {"a.txt": "a\n"})
    camp = command_campaign(
        tmp_path / "c.toml", name="tp", repo=repo, base=base, argv=["true"], instances=("i1",)
    )
    home = tmp_path / "home"
    assert cli(home, "init").returncode == 0
    assert cli(home, "submit", str(camp)).returncode == 0
    assert cli(home, "daemon", "--until-idle").returncode == 0
    more = command_campaign(
        tmp_path / "d.toml", name="tq", repo=repo, base=base, argv=["true"], instances=("i2",)
    )
    assert cli(home, "submit", str(more)).returncode == 0
    # Not submitted yet: its submit has cells to append.
    fresh = command_campaign(
        tmp_path / "e.toml", name="tr", repo=repo, base=base, argv=["true"], instances=("i3",)
    )
    return home, fresh


def test_every_command_that_appends_refuses_a_log_with_a_deleted_row(
    campaign_home: tuple[Path, Path],
) -> None:
    home, camp = campaign_home
    db = home / "arenad.db"
    sqlite3_cli(db, DROP_TRIGGERS + "DELETE FROM events WHERE seq = 3;\n")
    before = count_rows(db)
    commands = [
        ("daemon", "--until-idle"),
        ("submit", str(camp)),
        ("retry", "tp:i1:CMD:0"),
        ("abort", "tq:i2:CMD:0"),
        ("pause", "tq:i2:CMD:0"),
        ("set-max-parallel", "3"),
    ]
    for args in commands:
        done = cli(home, *args)
        assert done.returncode == 1, (args, done.stdout, done.stderr)
        line = _one_line(done)
        assert "fails verification at row 3" in line and "verify-log" in line, (args, line)
        assert count_rows(db) == before, f"{args[0]} wrote on top of a tampered log"


def test_a_row_inserted_past_the_head_is_refused_by_name_not_by_a_constraint(
    home: Path,
) -> None:
    # The daemon stopped with a raw "UNIQUE constraint failed: events.seq".
    sqlite3_cli(
        home / "arenad.db",
        "INSERT INTO events (seq, stream, version, tag, schema_version, recorded_at_ms,"
        " payload, hash) SELECT 13, stream, version + 100, tag, schema_version,"
        " recorded_at_ms, payload, hash FROM events WHERE seq = 12;\n",
    )
    done = run_arenad(home, "daemon", "--until-idle")
    assert done.returncode == 1
    line = _one_line(done)
    assert "UNIQUE constraint" not in line
    assert "fails verification at row 13" in line and "past the log's head" in line, line


def _truncate_and_rewrite_head(db: Path, keep: int) -> None:
    sqlite3_cli(
        db,
        DROP_TRIGGERS + f"DELETE FROM events WHERE seq > {keep};\n"
        f"UPDATE log_head SET seq = {keep}, hash = (SELECT hash FROM events WHERE seq = {keep});\n"
        "UPDATE chain_checkpoint SET seq = 0, hash = zeroblob(32);\n",
    )


def test_an_anchor_kept_elsewhere_catches_truncation_with_a_rewritten_head(
    home: Path, tmp_path: Path
) -> None:
    anchor = tmp_path / "elsewhere" / "arenad.anchor"
    anchor.parent.mkdir()
    done = run_arenad(home, "verify-log", "--anchor", str(anchor))
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == (
        f"log ok: {ROWS} events, chain verified; head (row {ROWS}) recorded in {anchor}"
    )
    recorded = json.loads(anchor.read_text())
    assert recorded["seq"] == ROWS and len(bytes.fromhex(recorded["hash"])) == 32
    # Deleting the newest rows and rewriting the head (and the checkpoint) leaves a valid,
    # shorter chain: the chain alone cannot tell.
    _truncate_and_rewrite_head(home / "arenad.db", 9)
    assert verify(home)[0] == 0
    done = run_arenad(home, "verify-log", "--anchor", str(anchor))
    assert done.returncode == 1
    line = _one_line(done)
    assert line.startswith("arenad: log tampered or damaged at seq 10:"), line
    assert str(anchor) in line
    assert json.loads(anchor.read_text())["seq"] == ROWS, "a failed check moved the anchor"


def test_an_anchor_moves_with_an_intact_log(home: Path, tmp_path: Path) -> None:
    anchor = tmp_path / "a.anchor"
    assert run_arenad(home, "verify-log", "--anchor", str(anchor)).returncode == 0

    async def more() -> None:
        async with open_store(Home(home)) as store:
            await store.append("ingest/c0/1", None, lines(100, 103))

    asyncio.run(more())
    done = run_arenad(home, "verify-log", "--anchor", str(anchor))
    assert done.returncode == 0, done.stderr
    assert f"matches the anchor at row {ROWS}; {anchor} now at row {ROWS + 3}" in done.stdout
    assert json.loads(anchor.read_text())["seq"] == ROWS + 3


def test_a_file_that_is_not_an_anchor_is_a_user_error(home: Path, tmp_path: Path) -> None:
    anchor = tmp_path / "a.anchor"
    anchor.write_text("{}")
    done = run_arenad(home, "verify-log", "--anchor", str(anchor))
    assert done.returncode == 2
    assert str(anchor) in _one_line(done)
