"""Proposer capture: real files on disk, a real SQLite log, exactly once across restarts."""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from arenad.proposer.capture import (
    CapturePolicy,
    ProposerCapture,
    ProposerPaths,
    ProposerShotWatcher,
    run_proposer_capture,
    scan_once,
)
from arenad.proposer.layout import (
    candidate_id,
    claude_project_slug,
    parse_shot_path,
)
from arenad.store.sqlite import SqliteEventStore
from events.base import Recorded
from events.capture import ClaudeTranscriptCaptured, ProposerShotCaptured

RECEIPT = {
    "receipt": {
        "generation": 0,
        "candidateIndex": 1,
        "shot": 1,
        "harness": "claude-code",
        "startedAt": "2026-08-22T10:00:00.000Z",
        "completedAt": "2026-08-22T10:05:00.000Z",
        "exitCode": 0,
    },
    "stdoutTail": "",
    "stderrTail": "",
}


def _entry(ts: str, text: str) -> str:
    return json.dumps({"type": "user", "timestamp": ts, "message": {"content": text}}) + "\n"


class Tree:
    """A home's proposer-shots, a worktree root and a Claude projects dir."""

    def __init__(self, root: Path) -> None:
        self.paths = ProposerPaths.for_home(
            root / "home", claude_projects_dir=root / "claude" / "projects"
        )
        Path(self.paths.shots_dir).mkdir(parents=True)
        Path(self.paths.worktree_root).mkdir(parents=True)
        Path(self.paths.claude_projects_dir).mkdir(parents=True)

    def receipt(self, rel: str, body: Any = RECEIPT) -> Path:
        path = Path(self.paths.shots_dir) / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(body if isinstance(body, bytes) else json.dumps(body).encode())
        return path

    def worktree(self, leaf: str) -> str:
        return os.path.join(self.paths.worktree_root, leaf)

    def transcript(self, cwd: str, name: str, text: str, *, append: bool = False) -> Path:
        d = Path(self.paths.claude_projects_dir) / claude_project_slug(cwd)
        d.mkdir(parents=True, exist_ok=True)
        path = d / name
        with open(path, "a" if append else "w", encoding="utf-8") as fh:
            fh.write(text)
        return path


@pytest.fixture
def tree(tmp_path: Path) -> Tree:
    return Tree(tmp_path)


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SqliteEventStore]:
    s = await SqliteEventStore.open(tmp_path / "events.db")
    try:
        yield s
    finally:
        await s.close()


async def _captures(store: SqliteEventStore) -> list[Recorded]:
    return [r async for r in store.read_all() if r.stream.startswith("proposer/")]


async def _latest(store: SqliteEventStore, stream: str) -> Any:
    return (await store.read_stream(stream))[-1].event


async def until(cond: Callable[[], Any], timeout: float = 15.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not await cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.01)


def test_layout_names() -> None:
    name = parse_shot_path("alice/gen2-cand10-shot3.json")
    assert name is not None
    assert (name.author, name.generation, name.candidate_index, name.shot) == ("alice", 2, 10, 3)
    flat = parse_shot_path("gen0-cand0-shot1.json")
    assert flat is not None and flat.author is None
    for rel in ("genx-candx-shot1.json", "a/b/gen0-cand0-shot1.json", "gen0-cand0-shot1.txt"):
        assert parse_shot_path(rel) is None
    assert parse_shot_path("gen\u0661-cand0-shot1.json") is None  # JS \d is ASCII only
    assert candidate_id(-1, -1) == "baseline" and candidate_id(0, 2) == "gen0-cand2"


async def test_scan_once_captures_everything_once(tree: Tree, store: SqliteEventStore) -> None:
    tree.receipt("gen0-cand1-shot1.json")
    tree.receipt("alice/gen0-cand1-shot2.json")
    tree.receipt("gen0-cand2-shot1.json", b'{"receipt": {"startedAt": ')  # cut short
    tree.receipt("gen0-cand3-shot1.json", b"\xff\xfe not utf-8")
    tree.receipt("gen0-cand4-shot1.json", [1, 2])
    tree.receipt("notes.json", {"not": "a receipt name"})
    wt = tree.worktree("gen0-cand1")
    tree.transcript(wt, "s1.jsonl", _entry("2026-08-22T10:00:01.000Z", "go"))
    tree.transcript(wt, "notes.txt", "ignored")
    (Path(tree.paths.claude_projects_dir) / claude_project_slug(wt) / "s1" / "subagents").mkdir(
        parents=True
    )
    # A worktree with no receipt yet: its transcripts are captured while they grow.
    os.mkdir(tree.worktree("gen1-cand0-bob"))
    tree.transcript(tree.worktree("gen1-cand0-bob"), "s2.jsonl", "{}\n")
    # Another project entirely: never read.
    tree.transcript("/somewhere/else", "x.jsonl", "{}\n")

    counts = await scan_once(store, tree.paths)
    assert (counts.receipts, counts.transcripts) == (5, 2)
    streams = sorted(r.stream for r in await _captures(store))
    slug = claude_project_slug(wt)
    assert streams == sorted(
        [
            "proposer/shot/alice/gen0-cand1-shot2.json",
            "proposer/shot/gen0-cand1-shot1.json",
            "proposer/shot/gen0-cand2-shot1.json",
            "proposer/shot/gen0-cand3-shot1.json",
            "proposer/shot/gen0-cand4-shot1.json",
            f"proposer/transcript/{slug}/s1.jsonl",
            f"proposer/transcript/{claude_project_slug(tree.worktree('gen1-cand0-bob'))}/s2.jsonl",
        ]
    )
    good = await _latest(store, "proposer/shot/alice/gen0-cand1-shot2.json")
    assert isinstance(good, ProposerShotCaptured)
    assert good.error is None and json.loads(good.content or "") == RECEIPT
    assert (good.author, good.generation, good.candidate_index, good.shot) == ("alice", 0, 1, 2)
    assert good.worktree == tree.worktree("gen0-cand1-alice")
    cut = await _latest(store, "proposer/shot/gen0-cand2-shot1.json")
    assert cut.content == '{"receipt": {"startedAt": ' and cut.error.startswith("not JSON")
    binary = await _latest(store, "proposer/shot/gen0-cand3-shot1.json")
    assert binary.content is None and binary.error.startswith("not UTF-8")
    assert binary.sha256 is not None and binary.size == 12
    listed = await _latest(store, "proposer/shot/gen0-cand4-shot1.json")
    assert listed.error == "not a shot receipt: no receipt object"
    t = await _latest(store, f"proposer/transcript/{slug}/s1.jsonl")
    assert isinstance(t, ClaudeTranscriptCaptured)
    assert (t.cwd, t.session_id) == (wt, "s1") and "go" in t.content

    # Nothing changed: nothing is captured again, by this process or after a restart.
    again = await scan_once(store, tree.paths)
    assert (again.receipts, again.transcripts) == (0, 0)
    # A restarted capturer (a new store connection, nothing in memory) reads the heads.
    before = await store.last_seq()
    restarted = await SqliteEventStore.open(store.path)
    try:
        assert (await scan_once(restarted, tree.paths)).receipts == 0
        assert await restarted.last_seq() == before
    finally:
        await restarted.close()


async def test_changes_are_recaptured_and_the_latest_is_the_content(
    tree: Tree, store: SqliteEventStore
) -> None:
    wt = tree.worktree("gen0-cand1")
    receipt = tree.receipt("gen0-cand1-shot1.json", {"receipt": {"exitCode": 1}})
    path = tree.transcript(wt, "s1.jsonl", _entry("2026-08-22T10:00:01.000Z", "one"))
    await scan_once(store, tree.paths)
    tree.transcript(wt, "s1.jsonl", _entry("2026-08-22T10:00:02.000Z", "two"), append=True)
    receipt.write_text(json.dumps(RECEIPT))
    counts = await scan_once(store, tree.paths)
    assert (counts.receipts, counts.transcripts) == (1, 1)
    stream = f"proposer/transcript/{claude_project_slug(wt)}/s1.jsonl"
    versions = await store.read_stream(stream)
    assert len(versions) == 2
    assert versions[-1].event.content == path.read_text()
    assert json.loads((await _latest(store, "proposer/shot/gen0-cand1-shot1.json")).content) == (
        RECEIPT
    )
    # A file that disappears is simply no longer looked at; its captures stay.
    path.unlink()
    assert (await scan_once(store, tree.paths)).transcripts == 0
    assert len(await store.read_stream(stream)) == 2


async def test_two_capturers_racing_append_each_content_once(
    tree: Tree, store: SqliteEventStore
) -> None:
    tree.receipt("gen0-cand1-shot1.json")
    tree.transcript(tree.worktree("gen0-cand1"), "s1.jsonl", "{}\n")
    first = ProposerCapture(store, tree.paths)
    second = ProposerCapture(store, tree.paths)
    await first.load()
    await second.load()  # both believe the log is empty
    a = await first.scan(flush=True)
    b = await second.scan(flush=True)  # loses the race, re-reads the heads, finds it there
    assert (a.receipts, a.transcripts, b.receipts, b.transcripts) == (1, 1, 0, 0)
    assert len(await _captures(store)) == 2


async def test_live_capture_waits_for_settling_and_the_interval(
    tree: Tree, store: SqliteEventStore
) -> None:
    now = {"t": 0.0}
    capture = ProposerCapture(
        store,
        tree.paths,
        CapturePolicy(settle_s=5, transcript_min_interval_s=60),
        clock=lambda: now["t"],
    )
    await capture.load()
    wt = tree.worktree("gen0-cand1")
    os.mkdir(wt)
    tree.transcript(wt, "s1.jsonl", "{}\n")
    assert (await capture.scan()).transcripts == 0  # just seen: not settled
    now["t"] = 4
    assert (await capture.scan()).transcripts == 0
    now["t"] = 5
    assert (await capture.scan()).transcripts == 1  # unchanged for settle_s
    tree.transcript(wt, "s1.jsonl", "{}\n", append=True)
    now["t"] = 10
    assert (await capture.scan()).transcripts == 0  # changed: settling again
    now["t"] = 20
    assert (await capture.scan()).transcripts == 0  # settled, but captured 15 s ago
    now["t"] = 65
    assert (await capture.scan()).transcripts == 1
    assert (await capture.scan()).transcripts == 0


async def test_watcher_captures_live_and_flushes_the_final_content_on_close(
    tree: Tree, store: SqliteEventStore
) -> None:
    wt = tree.worktree("gen0-cand1")
    stream = f"proposer/transcript/{claude_project_slug(wt)}/s1.jsonl"
    eager = CapturePolicy(settle_s=0, transcript_min_interval_s=0)
    async with ProposerShotWatcher(store, tree.paths, policy=eager, rescan_interval=0.05) as w:
        tree.receipt("gen0-cand1-shot1.json")

        async def receipt_in() -> bool:
            return await store.stream_version("proposer/shot/gen0-cand1-shot1.json") == 1

        await until(receipt_in, what="the receipt's capture")
        path = tree.transcript(wt, "s1.jsonl", _entry("2026-08-22T10:00:01.000Z", "a"))

        async def transcript_is(text: str) -> bool:
            if await store.stream_version(stream) == 0:
                return False
            return bool((await _latest(store, stream)).content == text)

        await until(lambda: transcript_is(path.read_text()), what="the transcript")
        tree.transcript(wt, "s1.jsonl", _entry("2026-08-22T10:00:02.000Z", "b"), append=True)
        await until(lambda: transcript_is(path.read_text()), what="the grown transcript")
    assert w.counts.receipts == 1 and w.counts.transcripts >= 2

    # A lazy watcher captures nothing live, but stopping it captures the final content.
    lazy = CapturePolicy(settle_s=3600, transcript_min_interval_s=3600)
    tree.transcript(wt, "s1.jsonl", _entry("2026-08-22T10:00:03.000Z", "c"), append=True)
    stop = asyncio.Event()
    task = asyncio.create_task(
        run_proposer_capture(store, tree.paths, stop, policy=lazy, rescan_interval=0.05)
    )
    tree.transcript(wt, "s1.jsonl", _entry("2026-08-22T10:00:04.000Z", "d"), append=True)
    stop.set()
    counts = await asyncio.wait_for(task, 30)
    assert (counts.receipts, counts.transcripts) == (0, 1)
    assert await transcript_is(path.read_text())


async def test_a_store_that_refuses_stops_the_watcher_loudly(
    tree: Tree, store: SqliteEventStore
) -> None:
    class Refusing(Exception):
        pass

    async def refuse(requests: Any) -> Any:
        raise Refusing("disk full")

    watcher = ProposerShotWatcher(
        store, tree.paths, policy=CapturePolicy(settle_s=0), rescan_interval=0.05
    )
    await watcher.start()
    store.append_many = refuse  # type: ignore[method-assign]
    tree.receipt("gen0-cand1-shot1.json")
    with pytest.raises(Refusing):
        await asyncio.wait_for(watcher.wait(), 30)
    with pytest.raises(Refusing):
        await watcher.close()
