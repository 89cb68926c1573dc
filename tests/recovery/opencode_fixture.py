"""Build real opencode-shaped SQLite stores for tests, and captures as recovery keeps them.

The DDL is opencode 1.18.33's for ``project``, ``session``, ``message`` and ``part``
(facts/opencode.md §1, checked against ``sqlite3 .schema`` of a store the real CLI
wrote). ``old=True`` drops the columns that arrived after 1.14.41: the usage columns
(``cost``, ``tokens_*``, 1.15.0) and ``metadata``.

The writer keeps its connection open in WAL mode with ``wal_autocheckpoint=0``, so
every row it writes lives only in ``<db>-wal`` until ``close()`` — as in a store
opencode left behind.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import msgspec

from arenad.recovery.opencode_transcript import session_transcript
from events.capture import AgentSessionCaptured

PROJECT_DDL = """
CREATE TABLE `project` (
  `id` text PRIMARY KEY,
  `worktree` text NOT NULL,
  `vcs` text,
  `name` text,
  `icon_url` text,
  `icon_url_override` text,
  `icon_color` text,
  `time_created` integer NOT NULL,
  `time_updated` integer NOT NULL,
  `time_initialized` integer,
  `sandboxes` text NOT NULL,
  `commands` text
);
"""

USAGE_COLUMNS_DDL = """
  `cost` real DEFAULT 0 NOT NULL,
  `tokens_input` integer DEFAULT 0 NOT NULL,
  `tokens_output` integer DEFAULT 0 NOT NULL,
  `tokens_reasoning` integer DEFAULT 0 NOT NULL,
  `tokens_cache_read` integer DEFAULT 0 NOT NULL,
  `tokens_cache_write` integer DEFAULT 0 NOT NULL,"""


def session_ddl(old: bool) -> str:
    added = "" if old else "\n  `metadata` text," + USAGE_COLUMNS_DDL
    return f"""
CREATE TABLE `session` (
  `id` text PRIMARY KEY,
  `project_id` text NOT NULL,
  `workspace_id` text,
  `parent_id` text,
  `slug` text NOT NULL,
  `directory` text NOT NULL,
  `path` text,
  `title` text NOT NULL,
  `version` text NOT NULL,
  `share_url` text,
  `summary_additions` integer,
  `summary_deletions` integer,
  `summary_files` integer,
  `summary_diffs` text,{added}
  `revert` text,
  `permission` text,
  `agent` text,
  `model` text,
  `time_created` integer NOT NULL,
  `time_updated` integer NOT NULL,
  `time_compacting` integer,
  `time_archived` integer,
  CONSTRAINT `fk_session_project_id_project_id_fk` FOREIGN KEY (`project_id`)
    REFERENCES `project`(`id`) ON DELETE CASCADE
);
CREATE INDEX `session_project_idx` ON `session` (`project_id`);
CREATE INDEX `session_workspace_idx` ON `session` (`workspace_id`);
CREATE INDEX `session_parent_idx` ON `session` (`parent_id`);
"""


MESSAGE_PART_DDL = """
CREATE TABLE `message` (
  `id` text PRIMARY KEY,
  `session_id` text NOT NULL,
  `time_created` integer NOT NULL,
  `time_updated` integer NOT NULL,
  `data` text NOT NULL,
  CONSTRAINT `fk_message_session_id_session_id_fk` FOREIGN KEY (`session_id`)
    REFERENCES `session`(`id`) ON DELETE CASCADE
);
CREATE INDEX `message_session_time_created_id_idx` ON `message` (`session_id`,`time_created`,`id`);
CREATE TABLE `part` (
  `id` text PRIMARY KEY,
  `message_id` text NOT NULL,
  `session_id` text NOT NULL,
  `time_created` integer NOT NULL,
  `time_updated` integer NOT NULL,
  `data` text NOT NULL,
  CONSTRAINT `fk_part_message_id_message_id_fk` FOREIGN KEY (`message_id`)
    REFERENCES `message`(`id`) ON DELETE CASCADE
);
CREATE INDEX `part_message_id_id_idx` ON `part` (`message_id`,`id`);
CREATE INDEX `part_session_idx` ON `part` (`session_id`);
"""


def _text(data: Any) -> Any:
    return data if isinstance(data, str | bytes) or data is None else json.dumps(data)


class StoreWriter:
    """An opencode store being written, its WAL never checkpointed until ``close``."""

    def __init__(self, path: Path, *, old: bool = False) -> None:
        self.path = path
        self.old = old
        self.conn = sqlite3.connect(path, isolation_level=None)
        self.conn.execute("PRAGMA journal_mode=WAL")
        self.conn.execute("PRAGMA wal_autocheckpoint=0")
        self.conn.execute("PRAGMA foreign_keys=ON")
        self.conn.executescript(PROJECT_DDL + session_ddl(old) + MESSAGE_PART_DDL)
        self.conn.execute(
            "INSERT INTO project (id, worktree, vcs, time_created, time_updated, sandboxes) "
            "VALUES ('proj', '/w', 'git', 1, 1, '[]')"
        )

    def session(
        self,
        sid: str,
        directory: str,
        *,
        parent_id: str | None = None,
        time_created: int = 1_000,
        usage: tuple[float, int, int, int, int, int] = (0.0, 0, 0, 0, 0, 0),
        agent: str = "build",
        model: str | None = '{"id":"mock","providerID":"local","variant":"default"}',
    ) -> None:
        columns: dict[str, object] = {
            "id": sid,
            "project_id": "proj",
            "parent_id": parent_id,
            "slug": "calm-meadow",
            "directory": directory,
            "path": "",
            "title": f"title {sid}",
            "version": "1.14.41" if self.old else "1.18.33",
            "agent": agent,
            "model": model,
            "time_created": time_created,
            "time_updated": time_created + 4_600,
        }
        if not self.old:
            names = (
                "cost",
                "tokens_input",
                "tokens_output",
                "tokens_reasoning",
                "tokens_cache_read",
                "tokens_cache_write",
            )
            columns.update(zip(names, usage, strict=True))
        keys = ", ".join(columns)
        marks = ", ".join("?" for _ in columns)
        self.conn.execute(f"INSERT INTO session ({keys}) VALUES ({marks})", list(columns.values()))

    def message(self, session_id: str, mid: str, time_created: int, data: Any) -> None:
        self.conn.execute(
            "INSERT INTO message (id, session_id, time_created, time_updated, data) "
            "VALUES (?, ?, ?, ?, ?)",
            (mid, session_id, time_created, time_created, _text(data)),
        )

    def part(self, session_id: str, message_id: str, pid: str, data: Any) -> None:
        self.conn.execute(
            "INSERT INTO part (id, message_id, session_id, time_created, time_updated, data) "
            "VALUES (?, ?, ?, 0, 0, ?)",
            (pid, message_id, session_id, _text(data)),
        )

    def close(self) -> None:
        self.conn.close()


def step_finish(
    cost: float, inp: int, out: int, reasoning: int, read: int, write: int
) -> dict[str, Any]:
    return {
        "type": "step-finish",
        "reason": "stop",
        "snapshot": "abc",
        "tokens": {
            "total": inp + out + reasoning + read + write,
            "input": inp,
            "output": out,
            "reasoning": reasoning,
            "cache": {"write": write, "read": read},
        },
        "cost": cost,
    }


def user_data() -> dict[str, Any]:
    return {
        "role": "user",
        "time": {"created": 1},
        "agent": "build",
        "model": {"providerID": "local", "modelID": "mock"},
    }


def assistant_data() -> dict[str, Any]:
    return {
        "parentID": "msg_user",
        "role": "assistant",
        "mode": "build",
        "agent": "build",
        "path": {"cwd": "/w", "root": "/w"},
        "cost": 0,
        "tokens": {"input": 0, "output": 0, "reasoning": 0, "cache": {"read": 0, "write": 0}},
        "modelID": "mock",
        "providerID": "local",
        "time": {"created": 2},
    }


def file_state(path: Path) -> dict[str, tuple[int, int, bytes]]:
    """Every file beside ``path``'s store: (size, mtime_ns, bytes) by name."""
    out: dict[str, tuple[int, int, bytes]] = {}
    for f in sorted(path.parent.iterdir()):
        st = f.stat()
        out[f.name] = (st.st_size, st.st_mtime_ns, f.read_bytes())
    return out


def with_kept_fold(capture: AgentSessionCaptured) -> AgentSessionCaptured:
    """The capture as recovery records it today: with its session's fold kept."""
    kept = session_transcript(capture.messages, capture.parts, capture.session_id)
    return msgspec.structs.replace(capture, transcript=kept)
