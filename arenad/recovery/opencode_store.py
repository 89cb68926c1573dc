"""Capture a cell's opencode sessions from its own SQLite store, read-only, in place.

opencode keeps its store in WAL mode and does not checkpoint at exit, so the newest
rows may live only in ``opencode.db-wal``. The store is therefore opened where it lies
(``file:<path>?mode=ro``) with its ``-wal``/``-shm`` beside it — never copied — inside
one read transaction, so every row comes from one snapshot.

What SQLite does with a read-only open (sqlite 3.40, checked in the tests):

- ``opencode.db`` and ``opencode.db-wal`` are never written: bytes and mtimes stay
  the same, and the un-checkpointed WAL is read, not folded back (a read-only
  connection cannot checkpoint or delete it when it closes).
- ``opencode.db-shm`` (the WAL index, a scratch file, not data) is opened read-write
  when possible, so its mtime moves; when it is missing and the directory is
  writable SQLite creates it, and when the WAL is missing too it creates an empty
  ``-wal``. Those two files are the only ones that can appear.
- ``-shm`` present but not writable: SQLite reads with a private in-memory index. Fine.
- ``-shm`` missing and not creatable with a non-empty ``-wal`` present:
  ``unable to open database file``. The rows in the WAL cannot be read without
  writing, so the store is reported unavailable with that explanation.
- ``-shm`` missing and not creatable with no (or an empty) ``-wal``: the main file
  holds every committed row, so it is read once more with ``immutable=1``.

What a capture keeps is bounded (:mod:`arenad.recovery.capture_bounds`): a huge message or
part is cut with its size and sha256 kept, a session or an attempt past its budget keeps
the count of what it left out, a store with too many sessions is a gap.

Anything that is not a readable opencode store (missing file, a directory, garbage,
an SQLite file without a ``session`` table) is a ``StoreUnavailable`` carrying
SQLite's error text: the caller records ``AgentStoreUnavailable``, never zeros.
"""

from __future__ import annotations

import os
import sqlite3
import urllib.parse
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from arenad.recovery.capture_bounds import (
    ATTEMPT_KEEP_BYTES,
    MAX_SESSIONS,
    ROW_VALUE_KEEP_CHARS,
    ROW_VALUE_SPENT_CHARS,
    SESSION_KEEP_BYTES,
    cut_data,
    cut_row,
)
from arenad.recovery.opencode_transcript import session_transcript
from events.capture import (
    AgentSessionCaptured,
    AgentStoreUnavailable,
    MessageRow,
    PartRow,
    WorkerCwdUnmatched,
)

__all__ = [
    "StoreUnavailable",
    "capture_session_tree",
    "capture_sessions_by_directory",
    "probe_store",
    "unmatched_events",
]

Purpose = Literal["solo", "worker", "command"]

_BUSY_TIMEOUT_S = 5.0


@dataclass(frozen=True, slots=True)
class StoreUnavailable:
    """The store could not be read; ``error`` says why (SQLite's text, plus context)."""

    store_path: str
    error: str

    def event(self, attempt: int) -> AgentStoreUnavailable:
        return AgentStoreUnavailable(attempt=attempt, store_path=self.store_path, error=self.error)


class _Unavailable(Exception):
    pass


def _uri(path: Path, extra: str = "") -> str:
    return f"file:{urllib.parse.quote(str(path.absolute()))}?mode=ro{extra}"


def _has_content(path: Path) -> bool:
    try:
        return path.stat().st_size > 0
    except OSError:
        return False


def _probe(conn: sqlite3.Connection) -> None:
    conn.execute("SELECT id FROM session LIMIT 1").fetchall()


def _connect(uri: str) -> sqlite3.Connection:
    conn = sqlite3.connect(uri, uri=True, timeout=_BUSY_TIMEOUT_S, isolation_level=None)
    try:
        _probe(conn)
    except BaseException:
        conn.close()
        raise
    return conn


# Primary result codes of a read-only open that could not set up the WAL index.
_SQLITE_READONLY = 8
_SQLITE_CANTOPEN = 14


def _open(path: Path, confine: str | os.PathLike[str] | None = None) -> sqlite3.Connection:
    """A probed read-only connection, or ``_Unavailable`` with the reason. ``confine``: the
    directory the store (and its -wal and -shm) must really be inside, symbolic links
    resolved: it lives where the agent writes, and a link to another cell's store or a
    host file must not be read as this cell's."""
    if confine is not None:
        top = os.path.realpath(confine)
        for part in (path, path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")):
            real = os.path.realpath(part)
            if real != top and not real.startswith(top.rstrip(os.sep) + os.sep):
                raise _Unavailable(f"{part} leads outside {top} (a symbolic link?): not read")
    if not path.exists():
        raise _Unavailable(f"no such file: {path}")
    if not path.is_file():
        raise _Unavailable(f"not a regular file: {path}")
    try:
        return _connect(_uri(path))
    except sqlite3.Error as exc:
        first_error = exc
    wal = path.with_name(path.name + "-wal")
    shm = path.with_name(path.name + "-shm")
    code = getattr(first_error, "sqlite_errorcode", 0) & 0xFF
    if shm.exists() or code not in (_SQLITE_READONLY, _SQLITE_CANTOPEN):
        raise _Unavailable(str(first_error))
    if _has_content(wal):
        raise _Unavailable(
            f"{first_error} (the store has an un-checkpointed WAL but no -shm file, and "
            "SQLite cannot create one here without write access: its newest rows cannot "
            "be read without writing to the store)"
        )
    # No WAL content: the main file holds every committed row.
    try:
        return _connect(_uri(path, "&immutable=1"))
    except sqlite3.Error as exc:
        raise _Unavailable(f"{first_error}; read as immutable: {exc}") from exc


@contextmanager
def _snapshot(
    db_path: str | os.PathLike[str], confine: str | os.PathLike[str] | None = None
) -> Iterator[sqlite3.Connection]:
    conn = _open(Path(db_path), confine)
    try:
        conn.execute("BEGIN")
        try:
            yield conn
        finally:
            with suppress(sqlite3.Error):
                conn.execute("ROLLBACK")
    finally:
        conn.close()


def probe_store(db_path: str | os.PathLike[str]) -> StoreUnavailable | None:
    """``None`` when ``db_path`` opens read-only as an opencode store, else why not."""
    try:
        with _snapshot(db_path):
            return None
    except (_Unavailable, sqlite3.Error) as exc:
        return StoreUnavailable(os.fspath(db_path), str(exc))


def _session_rows(conn: sqlite3.Connection) -> list[dict[str, Any]]:
    cursor = conn.execute("SELECT * FROM session ORDER BY time_created, id")
    names = [d[0] for d in cursor.description]
    return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]


def _decode(kind: str, row_id: object, raw: object, unreadable: list[str]) -> str | None:
    if isinstance(raw, bytes):
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            unreadable.append(
                f"{kind} {_cut_id(row_id)}: data is not UTF-8 ({exc.reason} at {exc.start})"
            )
            return None
    if isinstance(raw, str):
        return raw
    what = "NULL" if raw is None else type(raw).__name__
    unreadable.append(f"{kind} {_cut_id(row_id)}: data is {what}")
    return None


class _Budget:
    """What is left of the attempt's capture budget (capture_bounds.ATTEMPT_KEEP_BYTES)."""

    __slots__ = ("left",)

    def __init__(self) -> None:
        self.left = ATTEMPT_KEEP_BYTES


def _capture(
    conn: sqlite3.Connection,
    store_path: str,
    row: dict[str, Any],
    attempt: int,
    purpose: Purpose,
    budget: _Budget,
) -> AgentSessionCaptured:
    """One session, bounded (:mod:`arenad.recovery.capture_bounds`): data cut per row, rows
    kept until the session's (or the attempt's) budget is spent, the rest counted."""
    session_id = row.get("id")
    unreadable: list[str] = []
    room = min(SESSION_KEEP_BYTES, budget.left)
    kept_bytes = 0
    omitted = {"messages": 0, "parts": 0, "bytes": 0}

    def keep(kind: str, data: str, *ids: str) -> tuple[str, int | None, str | None] | None:
        """The data as kept (cut or whole), or None when past the budget (counted). Ids
        are kept whole (they join parts to messages), so they count against it too."""
        nonlocal kept_bytes
        bounded = cut_data(data)
        text = data if bounded is None else bounded.text
        size = len(text.encode("utf-8", errors="surrogatepass")) + sum(map(len, ids))
        if kept_bytes + size > room:
            omitted[kind] += 1
            omitted["bytes"] += bounded.size if bounded is not None else size
            return None
        kept_bytes += size
        return (text, None, None) if bounded is None else (text, bounded.size, bounded.sha256)

    messages: list[MessageRow] = []
    for msg_id, created, raw in conn.execute(
        "SELECT id, time_created, CAST(data AS BLOB) FROM message "
        "WHERE session_id = ? ORDER BY time_created, id",
        (session_id,),
    ):
        if not isinstance(msg_id, str) or not isinstance(created, int):
            unreadable.append(f"message {_cut_id(msg_id)}: id or time_created is not text/integer")
            continue
        data = _decode("message", msg_id, raw, unreadable)
        if data is not None and (kept := keep("messages", data, msg_id)) is not None:
            text, size, sha = kept
            messages.append(
                MessageRow(id=msg_id, time_created=created, data=text, size=size, sha256=sha)
            )
    parts: list[PartRow] = []
    for part_id, message_id, raw in conn.execute(
        "SELECT id, message_id, CAST(data AS BLOB) FROM part "
        "WHERE message_id IN (SELECT id FROM message WHERE session_id = ?) "
        "ORDER BY message_id, id",
        (session_id,),
    ):
        if not isinstance(part_id, str) or not isinstance(message_id, str):
            unreadable.append(f"part {_cut_id(part_id)}: id or message_id is not text")
            continue
        data = _decode("part", part_id, raw, unreadable)
        if data is not None and (kept := keep("parts", data, part_id, message_id)) is not None:
            text, size, sha = kept
            parts.append(
                PartRow(id=part_id, message_id=message_id, data=text, size=size, sha256=sha)
            )
    budget.left = max(0, budget.left - kept_bytes)
    limit = ROW_VALUE_KEEP_CHARS if budget.left > 0 else ROW_VALUE_SPENT_CHARS
    kept_row, cut = cut_row(row, limit)
    if len(unreadable) > _UNREADABLE_KEPT:
        more = len(unreadable) - _UNREADABLE_KEPT
        unreadable = [*unreadable[:_UNREADABLE_KEPT], f"… and {more} more unreadable rows"]
    parent = kept_row.get("parent_id")
    directory = kept_row.get("directory")
    session = str(session_id)
    return AgentSessionCaptured(
        attempt=attempt,
        purpose=purpose,
        store_path=store_path,
        session_id=session,
        parent_id=None if parent is None else str(parent),
        directory="" if directory is None else str(directory),
        row=kept_row,
        messages=messages,
        parts=parts,
        unreadable=unreadable,
        # Folded once here, so no projection has to fold every row again.
        transcript=session_transcript(messages, parts, session),
        omitted_messages=omitted["messages"],
        omitted_parts=omitted["parts"],
        omitted_bytes=omitted["bytes"],
        cut=cut,
    )


_UNREADABLE_KEPT = 100


def _cut_id(value: object) -> str:
    text = str(value)
    return text if len(text) <= 100 else text[:99] + "…"


def _too_many(store_path: str, count: int) -> StoreUnavailable:
    return StoreUnavailable(
        store_path,
        f"the store holds {count} sessions for this cell, more than the {MAX_SESSIONS} a"
        " capture keeps (arenad.recovery.capture_bounds): not captured, its spend unknown",
    )


def _descendants(rows: Sequence[dict[str, Any]], roots: Iterable[object]) -> set[object]:
    """``roots`` plus every session whose parent chain reaches one (cycles are harmless)."""
    children: dict[object, list[object]] = {}
    for row in rows:
        children.setdefault(row.get("parent_id"), []).append(row.get("id"))
    seen: set[object] = set()
    stack = list(roots)
    while stack:
        sid = stack.pop()
        if sid in seen:
            continue
        seen.add(sid)
        stack.extend(children.get(sid, ()))
    return seen


def capture_session_tree(
    db_path: str | os.PathLike[str],
    root_session_ids: Sequence[str] | None,
    attempt: int,
    purpose: Purpose = "solo",
    confine: str | os.PathLike[str] | None = None,
) -> list[AgentSessionCaptured] | StoreUnavailable:
    """Capture sessions in full: every session when ``root_session_ids`` is ``None``
    (a cell's store is private: every row is the cell's), else those roots and all
    their descendants (``parent_id`` recursion). Ordered by (time_created, id).
    Unknown root ids are simply absent from the result. ``confine``: see :func:`_open`.
    """
    store_path = os.fspath(db_path)
    try:
        with _snapshot(db_path, confine) as conn:
            rows = _session_rows(conn)
            if root_session_ids is not None:
                wanted = _descendants(rows, root_session_ids)
                rows = [r for r in rows if r.get("id") in wanted]
            if len(rows) > MAX_SESSIONS:
                return _too_many(store_path, len(rows))
            budget = _Budget()
            return [_capture(conn, store_path, row, attempt, purpose, budget) for row in rows]
    except (_Unavailable, sqlite3.Error) as exc:
        return StoreUnavailable(store_path, str(exc))


def capture_sessions_by_directory(
    db_path: str | os.PathLike[str],
    cwds: Iterable[str],
    attempt: int,
    confine: str | os.PathLike[str] | None = None,
) -> tuple[list[AgentSessionCaptured], list[str]] | StoreUnavailable:
    """Capture the supervisor workers' sessions (purpose ``"worker"``).

    ``cwds`` are deduplicated in first-seen order. For each, the sessions whose
    ``directory`` equals it exactly, plus their child sessions (``parent_id``
    recursion, whatever their directory), each captured once, in (time_created, id)
    order within the cwd's group; groups follow the cwd order. Returns the captures
    and the cwds with no session (the caller records ``WorkerCwdUnmatched``).
    ``confine``: see :func:`_open`.
    """
    store_path = os.fspath(db_path)
    ordered = list(dict.fromkeys(cwds))
    try:
        with _snapshot(db_path, confine) as conn:
            rows = _session_rows(conn)
            taken: list[dict[str, Any]] = []
            taken_ids: set[object] = set()
            unmatched: list[str] = []
            for cwd in ordered:
                direct = [r.get("id") for r in rows if r.get("directory") == cwd]
                if not direct:
                    unmatched.append(cwd)
                    continue
                group = _descendants(rows, direct)
                for row in rows:
                    sid = row.get("id")
                    if sid in group and sid not in taken_ids:
                        taken_ids.add(sid)
                        taken.append(row)
            if len(taken) > MAX_SESSIONS:
                return _too_many(store_path, len(taken))
            budget = _Budget()
            captures = [_capture(conn, store_path, row, attempt, "worker", budget) for row in taken]
            return captures, unmatched
    except (_Unavailable, sqlite3.Error) as exc:
        return StoreUnavailable(store_path, str(exc))


def unmatched_events(unmatched: Iterable[str], attempt: int) -> list[WorkerCwdUnmatched]:
    """The ``WorkerCwdUnmatched`` events for ``capture_sessions_by_directory``'s misses."""
    return [WorkerCwdUnmatched(attempt=attempt, cwd=cwd) for cwd in unmatched]
