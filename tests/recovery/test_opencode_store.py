from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from arenad.recovery.opencode_store import (
    StoreUnavailable,
    capture_session_tree,
    capture_sessions_by_directory,
    probe_store,
    unmatched_events,
)
from events.capture import AgentSessionCaptured, AgentStoreUnavailable, WorkerCwdUnmatched
from events.codec import decode_event, encode_event, event_tag
from tests.recovery.opencode_fixture import (
    StoreWriter,
    assistant_data,
    file_state,
    step_finish,
    user_data,
)

REPO = Path(__file__).resolve().parents[2]

SESSION_COLUMNS = [
    "id",
    "project_id",
    "workspace_id",
    "parent_id",
    "slug",
    "directory",
    "path",
    "title",
    "version",
    "share_url",
    "summary_additions",
    "summary_deletions",
    "summary_files",
    "summary_diffs",
    "metadata",
    "cost",
    "tokens_input",
    "tokens_output",
    "tokens_reasoning",
    "tokens_cache_read",
    "tokens_cache_write",
    "revert",
    "permission",
    "agent",
    "model",
    "time_created",
    "time_updated",
    "time_compacting",
    "time_archived",
]


@pytest.fixture
def store(tmp_path: Path) -> Iterator[StoreWriter]:
    (tmp_path / "data").mkdir()
    writer = StoreWriter(tmp_path / "data" / "opencode.db")
    yield writer
    writer.close()


def _one_turn(w: StoreWriter, sid: str, directory: str, t0: int) -> None:
    w.session(sid, directory, time_created=t0, usage=(0.5, 10, 2, 1, 3, 0))
    w.message(sid, f"msg_{sid}_1", t0 + 1, user_data())
    w.part(sid, f"msg_{sid}_1", f"prt_{sid}_1", {"type": "text", "text": f"hi from {sid}"})
    w.message(sid, f"msg_{sid}_2", t0 + 2, assistant_data())
    w.part(sid, f"msg_{sid}_2", f"prt_{sid}_2", {"type": "step-start"})
    w.part(sid, f"msg_{sid}_2", f"prt_{sid}_3", {"type": "text", "text": "ok"})
    w.part(sid, f"msg_{sid}_2", f"prt_{sid}_4", step_finish(0.5, 10, 2, 1, 3, 0))


def _captures(result: object) -> list[AgentSessionCaptured]:
    assert isinstance(result, list), result
    return result


# ---------------------------------------------------------------- reading the WAL in place


def test_capture_sees_rows_that_live_only_in_the_wal(store: StoreWriter) -> None:
    _one_turn(store, "ses_a", "/work/a", 1_000)
    db = store.path
    wal = db.with_name(db.name + "-wal")
    # The rows are in the WAL, not in the main file: a reader that copied only the .db
    # (or ignored the WAL) would see nothing.
    assert b"ses_a" not in db.read_bytes()
    assert b"ses_a" in wal.read_bytes()

    caps = _captures(capture_session_tree(db, None, attempt=3, purpose="solo"))

    assert [c.session_id for c in caps] == ["ses_a"]
    cap = caps[0]
    assert cap.attempt == 3 and cap.purpose == "solo"
    assert cap.store_path == os.fspath(db)
    assert cap.directory == "/work/a" and cap.parent_id is None
    assert list(cap.row) == SESSION_COLUMNS
    assert cap.row["tokens_input"] == 10 and cap.row["cost"] == 0.5
    assert cap.row["model"] == '{"id":"mock","providerID":"local","variant":"default"}'
    assert [(m.id, m.time_created) for m in cap.messages] == [
        ("msg_ses_a_1", 1_001),
        ("msg_ses_a_2", 1_002),
    ]
    assert json.loads(cap.messages[0].data) == user_data()
    assert [(p.id, p.message_id) for p in cap.parts] == [
        ("prt_ses_a_1", "msg_ses_a_1"),
        ("prt_ses_a_2", "msg_ses_a_2"),
        ("prt_ses_a_3", "msg_ses_a_2"),
        ("prt_ses_a_4", "msg_ses_a_2"),
    ]
    assert cap.unreadable == []


def test_the_reader_never_writes_the_store(store: StoreWriter) -> None:
    _one_turn(store, "ses_a", "/work/a", 1_000)
    db = store.path
    before = file_state(db)

    _captures(capture_session_tree(db, None, attempt=1))
    assert probe_store(db) is None

    after = file_state(db)
    assert set(after) == set(before)
    for name in (db.name, db.name + "-wal"):
        assert after[name] == before[name], name
    # Only the WAL index (-shm, SQLite's scratch file) may be touched; its size stays.
    assert after[db.name + "-shm"][0] == before[db.name + "-shm"][0]


def test_a_store_left_behind_by_an_exited_writer_is_read_in_place(tmp_path: Path) -> None:
    # opencode exits without checkpointing: -wal and -shm stay beside the .db.
    db = tmp_path / "opencode.db"
    script = textwrap.dedent(
        f"""
        import os, sys
        sys.path.insert(0, {str(REPO)!r})
        from pathlib import Path
        from tests.recovery.opencode_fixture import StoreWriter, user_data
        w = StoreWriter(Path({str(db)!r}))
        w.session("ses_x", "/w/x")
        w.message("ses_x", "msg_1", 5, user_data())
        w.part("ses_x", "msg_1", "prt_1", {{"type": "text", "text": "hello"}})
        os._exit(0)
        """
    )
    subprocess.run([sys.executable, "-c", script], check=True)
    wal = db.with_name("opencode.db-wal")
    assert wal.stat().st_size > 0 and db.with_name("opencode.db-shm").exists()
    before = file_state(db)

    caps = _captures(capture_session_tree(db, None, attempt=1))

    assert [c.session_id for c in caps] == ["ses_x"]
    assert [p.data for p in caps[0].parts] == ['{"type": "text", "text": "hello"}']
    after = file_state(db)
    assert set(after) == set(before)
    assert after[db.name] == before[db.name] and after[wal.name] == before[wal.name]


def test_a_checkpointed_store_gains_only_sqlites_own_files(tmp_path: Path) -> None:
    db = tmp_path / "opencode.db"
    w = StoreWriter(db)
    _one_turn(w, "ses_a", "/w", 1)
    w.close()  # last connection: SQLite checkpoints and removes -wal/-shm
    assert sorted(p.name for p in tmp_path.iterdir()) == ["opencode.db"]
    before = file_state(db)

    assert [c.session_id for c in _captures(capture_session_tree(db, None, 1))] == ["ses_a"]

    after = file_state(db)
    assert after[db.name] == before[db.name]
    assert set(after) - set(before) <= {"opencode.db-wal", "opencode.db-shm"}


# ---------------------------------------------------------------- unavailable stores


def test_a_missing_store_is_unavailable(tmp_path: Path) -> None:
    db = tmp_path / "nope" / "opencode.db"
    result = capture_session_tree(db, None, attempt=2)
    assert isinstance(result, StoreUnavailable)
    assert result.store_path == os.fspath(db) and "no such file" in result.error
    event = result.event(2)
    assert isinstance(event, AgentStoreUnavailable)
    assert (event.attempt, event.store_path, event.error) == (2, os.fspath(db), result.error)
    assert not (tmp_path / "nope").exists()
    assert isinstance(capture_sessions_by_directory(db, ["/w"], 2), StoreUnavailable)
    assert isinstance(probe_store(db), StoreUnavailable)


def test_a_directory_is_unavailable(tmp_path: Path) -> None:
    result = capture_session_tree(tmp_path, None, attempt=1)
    assert isinstance(result, StoreUnavailable) and "not a regular file" in result.error


@pytest.mark.parametrize(
    "content", [b"this is not a database at all" * 200, b"SQLite format 3\x00" + b"\xff" * 4080]
)
def test_a_garbage_file_is_unavailable_and_untouched(tmp_path: Path, content: bytes) -> None:
    db = tmp_path / "opencode.db"
    db.write_bytes(content)
    before = file_state(db)
    result = capture_session_tree(db, None, attempt=1)
    assert isinstance(result, StoreUnavailable)
    assert result.error  # SQLite's own text, e.g. "file is not a database"
    assert file_state(db)[db.name] == before[db.name]


def test_an_empty_file_or_a_foreign_database_is_unavailable(tmp_path: Path) -> None:
    empty = tmp_path / "empty.db"
    empty.write_bytes(b"")
    result = capture_session_tree(empty, None, attempt=1)
    assert isinstance(result, StoreUnavailable) and "no such table: session" in result.error
    assert empty.read_bytes() == b""

    other = tmp_path / "other.db"
    conn = sqlite3.connect(other)
    conn.execute("CREATE TABLE t (x)")
    conn.commit()
    conn.close()
    by_dir = capture_sessions_by_directory(other, ["/w"], attempt=1)
    assert isinstance(by_dir, StoreUnavailable) and "no such table: session" in by_dir.error


def test_a_store_without_message_tables_is_unavailable_not_partial(tmp_path: Path) -> None:
    db = tmp_path / "opencode.db"
    conn = sqlite3.connect(db)
    conn.execute(
        "CREATE TABLE session (id text, directory text, parent_id text, time_created integer)"
    )
    conn.execute("INSERT INTO session VALUES ('s', '/w', NULL, 1)")
    conn.commit()
    conn.close()
    result = capture_session_tree(db, None, attempt=1)
    assert isinstance(result, StoreUnavailable) and "no such table: message" in result.error


# ---------------------------------------------------------------- read-only directories

_READER = textwrap.dedent(
    """
    import json, sys
    sys.path.insert(0, sys.argv[1])
    from arenad.recovery.opencode_store import StoreUnavailable, capture_session_tree
    r = capture_session_tree(sys.argv[2], None, 1)
    if isinstance(r, StoreUnavailable):
        print(json.dumps({"error": r.error}))
    else:
        print(json.dumps({"sessions": [c.session_id for c in r]}))
    """
)


def _read_without_write_access(db: Path) -> dict[str, object]:
    """Capture ``db`` as a user who cannot write its directory."""
    directory = db.parent
    if os.geteuid() == 0:
        setpriv = shutil.which("setpriv")
        if setpriv is None:
            pytest.skip("running as root without setpriv: cannot drop write access")
        for p in [directory, *directory.iterdir()]:
            p.chmod(0o755 if p.is_dir() else 0o644)
        out = subprocess.run(
            [setpriv, "--reuid=65534", "--regid=65534", "--clear-groups",
             sys.executable, "-c", _READER, str(REPO), str(db)],
            check=True, capture_output=True, text=True,
            env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"},
        ).stdout  # fmt: skip
        result: dict[str, object] = json.loads(out)
        return result
    directory.chmod(0o555)
    try:
        r = capture_session_tree(db, None, 1)
    finally:
        directory.chmod(0o755)
    if isinstance(r, StoreUnavailable):
        return {"error": r.error}
    return {"sessions": [c.session_id for c in r]}


@pytest.fixture
def public_tmp() -> Iterator[Path]:
    """A temporary directory another user can traverse (pytest's tmp_path is 0700)."""
    path = Path(tempfile.mkdtemp(prefix="arenad-ro-"))
    path.chmod(0o755)
    try:
        yield path
    finally:
        for p in [path, *path.rglob("*")]:
            if p.is_dir():
                p.chmod(0o755)
        shutil.rmtree(path)


def _left_behind_store(directory: Path) -> Path:
    directory.mkdir(mode=0o755)
    db = directory / "opencode.db"
    script = textwrap.dedent(
        f"""
        import os, sys
        sys.path.insert(0, {str(REPO)!r})
        from pathlib import Path
        from tests.recovery.opencode_fixture import StoreWriter
        w = StoreWriter(Path({str(db)!r}))
        w.session("ses_x", "/w/x")
        os._exit(0)
        """
    )
    subprocess.run([sys.executable, "-c", script], check=True)
    return db


def test_wal_without_shm_in_a_read_only_directory_is_unavailable(public_tmp: Path) -> None:
    db = _left_behind_store(public_tmp / "ro")
    db.with_name("opencode.db-shm").unlink()
    before = file_state(db)
    result = _read_without_write_access(db)
    assert "un-checkpointed WAL but no -shm" in str(result.get("error")), result
    assert file_state(db) == before


def test_wal_and_shm_in_a_read_only_directory_are_read(public_tmp: Path) -> None:
    db = _left_behind_store(public_tmp / "ro")
    assert _read_without_write_access(db) == {"sessions": ["ses_x"]}


def test_a_checkpointed_store_in_a_read_only_directory_is_read_immutable(
    public_tmp: Path,
) -> None:
    directory = public_tmp / "ro"
    directory.mkdir()
    w = StoreWriter(directory / "opencode.db")
    w.session("ses_c", "/w")
    w.close()
    db = directory / "opencode.db"
    before = file_state(db)
    assert _read_without_write_access(db) == {"sessions": ["ses_c"]}
    assert file_state(db) == before


# ---------------------------------------------------------------- which sessions


def test_every_session_in_time_then_id_order(store: StoreWriter) -> None:
    store.session("ses_b", "/w", time_created=20)
    store.session("ses_c", "/w", time_created=10)
    store.session("ses_a", "/w", time_created=20)
    caps = _captures(capture_session_tree(store.path, None, attempt=1))
    assert [c.session_id for c in caps] == ["ses_c", "ses_a", "ses_b"]


def test_a_tree_is_its_roots_and_all_descendants(store: StoreWriter) -> None:
    store.session("root", "/w", time_created=1)
    store.session("child", "/w", parent_id="root", time_created=2)
    store.session("grandchild", "/elsewhere", parent_id="child", time_created=3)
    store.session("other", "/w", time_created=4)
    store.session("other_child", "/w", parent_id="other", time_created=5)
    caps = _captures(capture_session_tree(store.path, ["root", "missing"], 1, "command"))
    assert [(c.session_id, c.parent_id) for c in caps] == [
        ("root", None),
        ("child", "root"),
        ("grandchild", "child"),
    ]
    assert {c.purpose for c in caps} == {"command"}
    assert _captures(capture_session_tree(store.path, [], 1)) == []


def test_parent_cycles_do_not_loop(store: StoreWriter) -> None:
    store.session("a", "/w", parent_id="b", time_created=1)
    store.session("b", "/w", parent_id="a", time_created=2)
    caps = _captures(capture_session_tree(store.path, ["a"], 1))
    assert [c.session_id for c in caps] == ["a", "b"]


def test_sessions_by_directory_with_children(store: StoreWriter) -> None:
    store.session("w1", "/clone/1", time_created=10)
    store.session("w1_sub", "/clone/1", parent_id="w1", time_created=11)
    store.session("w1_far", "/somewhere", parent_id="w1_sub", time_created=12)
    store.session("w2_late", "/clone/2", time_created=30)
    store.session("w2_early", "/clone/2", time_created=20)
    store.session("noise", "/clone/10", time_created=5)
    store.session("noise2", "/clone/1/", time_created=6)

    result = capture_sessions_by_directory(
        store.path, ["/clone/2", "/clone/1", "/clone/3", "/clone/2", "/clone/3"], attempt=4
    )
    assert isinstance(result, tuple)
    caps, unmatched = result
    assert [c.session_id for c in caps] == ["w2_early", "w2_late", "w1", "w1_sub", "w1_far"]
    assert {c.purpose for c in caps} == {"worker"}
    assert {c.attempt for c in caps} == {4}
    assert unmatched == ["/clone/3"]
    events = unmatched_events(unmatched, 4)
    assert events == [WorkerCwdUnmatched(attempt=4, cwd="/clone/3")]


def test_a_child_matching_two_cwds_is_captured_once(store: StoreWriter) -> None:
    store.session("p", "/a", time_created=1)
    store.session("c", "/b", parent_id="p", time_created=2)
    result = capture_sessions_by_directory(store.path, ["/a", "/b"], attempt=1)
    assert isinstance(result, tuple)
    caps, unmatched = result
    assert [c.session_id for c in caps] == ["p", "c"] and unmatched == []


# ---------------------------------------------------------------- row contents


def test_an_old_store_row_lacks_the_usage_columns(tmp_path: Path) -> None:
    w = StoreWriter(tmp_path / "opencode.db", old=True)
    try:
        w.session("ses_old", "/w")
        caps = _captures(capture_session_tree(w.path, None, 1))
    finally:
        w.close()
    row = caps[0].row
    assert "tokens_input" not in row and "cost" not in row and "metadata" not in row
    assert row["version"] == "1.14.41"


def test_rows_that_cannot_be_read_are_listed_not_dropped_silently(store: StoreWriter) -> None:
    store.session("s", "/w")
    store.message("s", "msg_ok", 1, user_data())
    store.message("s", "msg_bad_time", "yesterday", user_data())  # type: ignore[arg-type]
    store.message("s", "msg_bad_bytes", 3, b"\xff\xfe{")
    store.part("s", "msg_ok", "prt_ok", {"type": "text", "text": "é"})
    store.part("s", "msg_ok", "prt_bytes", b"\xc3(")
    store.part("s", "msg_ok", "prt_invalid_json", "{not json")
    caps = _captures(capture_session_tree(store.path, None, 1))
    cap = caps[0]
    assert [m.id for m in cap.messages] == ["msg_ok"]
    # Text that is not valid JSON is still captured verbatim (the projection skips it).
    assert [p.id for p in cap.parts] == ["prt_invalid_json", "prt_ok"]
    assert cap.parts[1].data == '{"type": "text", "text": "\\u00e9"}'
    assert len(cap.unreadable) == 3
    joined = "\n".join(cap.unreadable)
    for name in ("msg_bad_time", "msg_bad_bytes", "prt_bytes"):
        assert name in joined
    # The fold it keeps is of the rows it could read.
    assert cap.transcript is not None
    assert bytes(cap.transcript.messages) == b'[{"role":"user","content":"\xc3\xa9"}]'


def test_parts_of_other_sessions_messages_are_not_taken(store: StoreWriter) -> None:
    store.session("s1", "/w", time_created=1)
    store.session("s2", "/w", time_created=2)
    store.message("s1", "m1", 1, user_data())
    store.message("s2", "m2", 1, user_data())
    store.part("s1", "m1", "p1", {"type": "text", "text": "one"})
    store.part("s2", "m2", "p2", {"type": "text", "text": "two"})
    caps = _captures(capture_session_tree(store.path, None, 1))
    assert [[p.id for p in c.parts] for c in caps] == [["p1"], ["p2"]]


def test_captures_round_trip_through_the_event_codec(store: StoreWriter) -> None:
    _one_turn(store, "ses_a", "/work/a", 1_000)
    cap = _captures(capture_session_tree(store.path, None, 1))[0]
    decoded = decode_event(encode_event(cap), event_tag(cap), 1)
    assert decoded == cap
    assert decoded.transcript is not None and bytes(decoded.transcript.messages)[:1] == b"["


def test_paths_with_uri_characters(tmp_path: Path) -> None:
    directory = tmp_path / "we?ird #dir %20"
    directory.mkdir()
    w = StoreWriter(directory / "open code.db")
    try:
        w.session("s", "/w")
        caps = _captures(capture_session_tree(w.path, None, 1))
    finally:
        w.close()
    assert [c.session_id for c in caps] == ["s"]


def test_a_relative_path_is_read(store: StoreWriter, monkeypatch: pytest.MonkeyPatch) -> None:
    store.session("s", "/w")
    monkeypatch.chdir(store.path.parent.parent)
    relative = Path(store.path.parent.name) / store.path.name
    caps = _captures(capture_session_tree(relative, None, 1))
    assert [c.session_id for c in caps] == ["s"] and caps[0].store_path == str(relative)


def test_a_store_that_links_out_of_the_run_dir_is_a_gap_not_read(
    store: StoreWriter, tmp_path: Path
) -> None:
    # The store lives where the agent writes: a link from the cell's store to another
    # cell's (hidden from it by the sandbox, not from the daemon) must not be read as its.
    _one_turn(store, "ses_other", "/work/other", 1_000)
    run = tmp_path / "run"
    (run / "xdg").mkdir(parents=True)
    linked = run / "xdg" / "opencode.db"
    linked.symlink_to(store.path)
    result = capture_session_tree(linked, None, 1, confine=run)
    assert isinstance(result, StoreUnavailable), result
    assert "leads outside" in result.error and "ses_other" not in result.error
    worker = capture_sessions_by_directory(linked, ["/work/other"], 1, confine=run)
    assert isinstance(worker, StoreUnavailable)
    # A -wal beside a real store that links elsewhere is refused the same way.
    (run / "xdg" / "real.db").write_bytes(store.path.read_bytes())
    (run / "xdg" / "real.db-wal").symlink_to(store.path.with_name(store.path.name + "-wal"))
    assert isinstance(
        capture_session_tree(run / "xdg" / "real.db", None, 1, confine=run), StoreUnavailable
    )
    # Inside the run dir, the same store is read.
    assert _captures(capture_session_tree(store.path, None, 1, confine=tmp_path))
