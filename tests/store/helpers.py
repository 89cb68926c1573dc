"""Helpers shared by the store, read-model and CLI tests: run the real `arenad`
command, reach a store file with the sqlite3 CLI, fill a home with cells."""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

from arenad.store.base import AppendRequest
from arenad.store.sqlite import SqliteEventStore
from events import cell as ev
from events.base import Event
from events.specs import CellSpec
from events.streams import cell_stream
from tests.events.samples import make_spec

REPO = Path(__file__).resolve().parents[2]
SQLITE3_CLI = shutil.which("sqlite3") or "/usr/bin/sqlite3"


def arenad_argv() -> list[str]:
    """The installed console script beside this interpreter, else `python -m cli`."""
    script = Path(sys.executable).parent / "arenad"
    if script.exists():
        return [str(script)]
    return [sys.executable, "-m", "cli"]


def run_arenad(
    home: Path, *args: str, timeout: float = 120, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    full_env = {**os.environ, **(env or {})}
    full_env.pop("ARENAD_HOME", None)
    return subprocess.run(
        [*arenad_argv(), "--home", str(home), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=REPO,
        env=full_env,
        stdin=subprocess.DEVNULL,
    )


def sqlite3_cli(db: Path, sql: str) -> str:
    """Run SQL with the real sqlite3 command-line shell (as a tamperer would)."""
    done = subprocess.run(
        [SQLITE3_CLI, str(db)], input=sql, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def count_rows(db: Path, table: str = "events") -> int:
    with sqlite3.connect(db) as conn:
        return int(conn.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0])


def dump_table(db: Path, table: str) -> list[tuple[object, ...]]:
    """Every row, every column, exact values and types, in key order."""
    conn = sqlite3.connect(db)
    try:
        return [tuple(r) for r in conn.execute(f"SELECT * FROM {table} ORDER BY 1")]
    finally:
        conn.close()


def life(spec: CellSpec, steps: int, attempt: int = 1) -> list[Event]:
    """The first ``steps`` events of a cell's happy path (submitted ... recovered)."""
    from tests.events.samples import sample

    path: list[Event] = [ev.CellSubmitted(spec=spec, attempt=attempt)]
    for kind in (
        ev.CellMaterialized,
        ev.RunStarted,
        ev.RunCompleted,
        ev.CellVerified,
        ev.CellRecovered,
    ):
        path.append(sample(kind, attempt))
    return path[:steps]


async def add_cells(store: SqliteEventStore, count: int, campaign: str = "demo") -> list[str]:
    """``count`` cells spread over every stage of the happy path, plus failures."""
    ids: list[str] = []
    requests: list[AppendRequest] = []
    for i in range(count):
        spec = make_spec(campaign=campaign, instance_id=f"bug-{i}", arm="SOLO", rep=i % 3)
        steps = i % 7
        if steps == 0:
            events: list[Event] = [
                ev.CellSubmitted(spec=spec),
                ev.CellFailed(attempt=1, stage="run", error="boom", classification="agent"),
            ]
        else:
            events = life(spec, steps)
        requests.append(AppendRequest(cell_stream(spec.cell_id), 0, events))
        ids.append(spec.cell_id)
    for i in range(0, len(requests), 200):
        await store.append_many(requests[i : i + 200])
    return ids
