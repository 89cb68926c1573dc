"""Proposer lines: receipts and transcripts captured from real files, joined from the log."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from arenad.js import js_date_parse
from arenad.ledger import service
from arenad.ledger.candidate import campaign_candidate
from arenad.ledger.claude_transcript import claude_transcript
from arenad.ledger.lines import new_stats
from arenad.ledger.proposer import (
    CapturedTranscript,
    candidate_key,
    join_transcript,
)
from arenad.ledger.rollout import validate_rollout_line
from arenad.ledger.service import project_store
from arenad.proposer.capture import ProposerPaths, scan_once
from arenad.proposer.layout import claude_project_slug
from arenad.store.base import AppendRequest
from arenad.store.sqlite import SqliteEventStore
from events import cell as ev
from events.specs import CandidateSpec
from tests.events.samples import make_spec

START = "2026-08-22T10:00:00.000Z"
END = "2026-08-22T10:10:00.000Z"


def _transcript(name: str, started_at: str | None) -> CapturedTranscript:
    lines = []
    if started_at is not None:
        lines.append({"type": "user", "timestamp": started_at, "message": {"content": name}})
    text = "".join(json.dumps(x) + "\n" for x in lines)
    return CapturedTranscript(
        path=f"/p/{name}", name=name, recorded_at_ms=1, transcript=claude_transcript(text)
    )


def _ms(iso: str) -> int:
    ms = js_date_parse(iso)
    assert ms is not None
    return ms


def _names(t: CapturedTranscript | None) -> str | None:
    return t.name if t is not None else None


def test_join_window_edges_are_inclusive() -> None:
    s, e = _ms(START), _ms(END)
    before = _transcript("a.jsonl", "2026-08-22T09:58:00.000Z")  # start − 120 s
    after = _transcript("b.jsonl", "2026-08-22T10:12:00.000Z")  # end + 120 s
    assert _names(join_transcript(s, e, [before])) == "a.jsonl"
    assert _names(join_transcript(s, e, [after])) == "b.jsonl"
    early = _transcript("c.jsonl", "2026-08-22T09:57:59.999Z")
    late = _transcript("d.jsonl", "2026-08-22T10:12:00.001Z")
    assert join_transcript(s, e, [early, late]) is None


def test_join_picks_the_nearest_start_and_the_first_name_on_ties() -> None:
    s, e = _ms(START), _ms(END)
    near = _transcript("z.jsonl", "2026-08-22T10:00:30.000Z")
    far = _transcript("a.jsonl", "2026-08-22T10:05:00.000Z")
    assert _names(join_transcript(s, e, [far, near])) == "z.jsonl"
    twin_b = _transcript("b.jsonl", "2026-08-22T09:59:00.000Z")
    twin_a = _transcript("a.jsonl", "2026-08-22T10:01:00.000Z")
    assert _names(join_transcript(s, e, [twin_b, twin_a])) == "a.jsonl"


def test_join_without_receipt_times_needs_exactly_one_transcript() -> None:
    only = _transcript("a.jsonl", "2020-01-01T00:00:00.000Z")
    assert _names(join_transcript(None, None, [only])) == "a.jsonl"
    assert _names(join_transcript(_ms(START), None, [only])) == "a.jsonl"
    # "Exactly one" counts every transcript, even one that never started.
    assert join_transcript(None, None, [only, _transcript("b.jsonl", None)]) is None
    assert join_transcript(None, None, [_transcript("b.jsonl", None)]) is None


def test_join_orders_names_by_utf16_code_units() -> None:
    s, e = _ms(START), _ms(END)
    # U+1F600 sorts after U+FF5E in code points, but its first UTF-16 code unit (a
    # surrogate, U+D83D) sorts before it: JS's order picks the emoji on a tie.
    astral = _transcript("\U0001f600.jsonl", START)
    bmp = _transcript("\uff5e.jsonl", START)
    assert _names(join_transcript(s, e, [bmp, astral])) == "\U0001f600.jsonl"


def test_candidate_campaign_names() -> None:
    assert candidate_key("baseline") == (-1, -1)
    assert candidate_key("gen0-cand12") == (0, 12)
    for name in ("gen01-cand1", "gen0-cand1-x", "demo", "gen-1-cand0"):
        assert candidate_key(name) is None
    assert campaign_candidate("demo") is None
    assert campaign_candidate("gen0-cand1") == CandidateSpec(id="gen0-cand1", generation=0, index=1)
    assert campaign_candidate("baseline") == CandidateSpec(id="baseline", generation=-1, index=-1)


# --------------------------------------------------------------------------- end to end

RECEIPT = {
    "generation": 0,
    "candidateIndex": 1,
    "shot": 1,
    "maxShots": 3,
    "harness": "claude-code",
    "model": "receipt-model",
    "promptSha256": "sha256:" + "ab" * 32,
    "startedAt": START,
    "completedAt": END,
    "durationMs": 600_499,
    "exitCode": 0,
    "timedOut": False,
    "costUsd": 1.25,
    "error": None,
}


def _entries(start: str, mid: str) -> str:
    rows: list[dict[str, Any]] = [
        {"type": "queue-operation", "timestamp": "2026-08-22T09:00:00.000Z"},
        {"type": "user", "timestamp": start, "message": {"role": "user", "content": "improve"}},
        {
            "type": "assistant",
            "timestamp": start,
            "message": {
                "id": mid,
                "model": "claude-opus-4",
                "content": [{"type": "text", "text": "on it"}],
                "usage": {"input_tokens": 10, "output_tokens": 5, "cache_read_input_tokens": 2},
            },
        },
    ]
    return "".join(json.dumps(r) + "\n" for r in rows)


class Arena:
    """A home with shot receipts, worktrees and Claude transcripts on disk, and a log."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.db = tmp / "events.db"
        self.paths = ProposerPaths.for_home(tmp / "home", claude_projects_dir=tmp / "claude")

    def receipt(self, rel: str, body: Any) -> None:
        path = Path(self.paths.shots_dir) / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(body if isinstance(body, bytes) else json.dumps(body).encode())

    def transcript(self, leaf: str, name: str, text: str) -> None:
        cwd = os.path.join(self.paths.worktree_root, leaf)
        d = Path(self.paths.claude_projects_dir) / claude_project_slug(cwd)
        d.mkdir(parents=True, exist_ok=True)
        (d / name).write_text(text)


async def _candidate_cells(store: SqliteEventStore, campaign: str, resolved: list[bool]) -> None:
    """One cell per (instance, rep), each with an ended attempt and a verdict."""
    requests = []
    for i, ok in enumerate(resolved):
        spec = make_spec(campaign=campaign, instance_id=f"i{i // 2}", rep=i % 2)
        run_dir = f"/runs/{spec.cell_id}"
        requests.append(
            AppendRequest(
                f"cell/{spec.cell_id}",
                0,
                [
                    ev.CellSubmitted(spec=spec),
                    ev.CellMaterialized(
                        attempt=1,
                        run_dir=run_dir,
                        workspace=run_dir,
                        head="0" * 40,
                        clean=True,
                        materializer="git",
                    ),
                    ev.ProvenanceRecorded(attempt=1, repo="/agent", commit="feed" * 10),
                    # Scored: a verdict counts toward the candidate only on a run that
                    # counts (the reference judges completed runs alone).
                    ev.CellVerified(attempt=1, scored=True),
                    ev.JudgeVerdictRecorded(
                        attempt=1,
                        judge="official",
                        verdict_json=json.dumps({"resolved": ok}),
                        resolved=ok,
                        score=None,
                    ),
                    ev.CellRecovered(attempt=1, store_available=True, spend=ev.SpendFigures()),
                ],
            )
        )
    await store.append_many(requests)


@pytest.fixture
def arena(tmp_path: Path) -> Arena:
    a = Arena(tmp_path)
    a.receipt("alice/gen0-cand1-shot1.json", {"receipt": RECEIPT, "stdoutTail": "x"})
    a.receipt(
        "alice/gen0-cand1-shot2.json",
        {"receipt": {**RECEIPT, "shot": 2, "exitCode": 1, "timedOut": True, "error": "boom"}},
    )
    # Candidate 2: no campaign evaluated it, no transcript was written.
    a.receipt("gen0-cand2-shot1.json", {"receipt": {**RECEIPT, "candidateIndex": 2}})
    # Unparseable: still a line, with the capture error.
    a.receipt("gen0-cand3-shot1.json", b'{"receipt": {')
    a.transcript("gen0-cand1-alice", "s-far.jsonl", _entries("2026-08-22T10:05:00.000Z", "m1"))
    a.transcript("gen0-cand1-alice", "s-near.jsonl", _entries("2026-08-22T10:00:10.000Z", "m2"))
    return a


async def _capture_and_project(
    arena: Arena, out: Path, resolved: list[bool], jobs: int = 1
) -> dict[str, Any]:
    store = await SqliteEventStore.open(arena.db)
    try:
        if not await store.streams("proposer/"):
            await scan_once(store, arena.paths)
            await _candidate_cells(store, "gen0-cand1", resolved)
        return await project_store(store, out, run_id="arena-run", jobs=jobs)
    finally:
        await store.close()


def _lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in path.read_text().splitlines()]


def test_the_candidate_tally_is_the_same_when_worker_processes_share_the_cells(
    arena: Arena, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # One cell a batch: the candidate's cells are tallied by this process and by workers.
    monkeypatch.setattr(service, "READ_BATCH_CELLS", 1)
    ledgers = []
    for jobs in (1, 2, 3):
        out = tmp_path / f"ledger-{jobs}.jsonl"
        stats = asyncio.run(_capture_and_project(arena, out, [True, True, True, False], jobs))
        ledgers.append((out.read_bytes(), stats))
    assert ledgers[0] == ledgers[1] == ledgers[2]
    shot1 = next(x for x in _lines(tmp_path / "ledger-2.jsonl") if x["role"] == "proposer")
    assert shot1["outcome"]["reward"] == 0.5


def test_proposer_lines_from_captured_shots(arena: Arena, tmp_path: Path) -> None:
    out = tmp_path / "ledger.jsonl"
    stats = asyncio.run(_capture_and_project(arena, out, [True, True, True, False]))
    lines = _lines(out)
    assert all(validate_rollout_line(x) == [] for x in lines)
    proposers = [x for x in lines if x["role"] == "proposer"]
    assert lines[-4:] == proposers  # proposer lines come last
    assert stats["proposerShotsJoined"] == 2 and stats["proposerShotsMissed"] == 2
    assert stats["byRole"]["proposer"] == 4

    shot1, shot2, cand2, cand3 = proposers
    worktree = os.path.join(arena.paths.worktree_root, "gen0-cand1-alice")
    near = os.path.join(
        arena.paths.claude_projects_dir, claude_project_slug(worktree), "s-near.jsonl"
    )
    assert shot1["candidate_id"] == "gen0-cand1" and shot1["generation"] == 0
    assert shot1["task"] == {
        "suite": "swe-arena-proposer",
        "instance_id": "gen0-cand1-alice",
        "split": "search",
        "seed": None,
        "rep": 1,
    }
    assert shot1["policy"]["model"] == "claude-opus-4"  # the transcript's model wins
    assert shot1["policy"]["harness"] == "claude-code"
    assert shot1["policy"]["profile_commit"] == "feed" * 10
    assert [m["content"] for m in shot1["messages"]] == ["improve", "on it"]
    # i0 resolved on both reps, i1 on one of two: 1 of 2 instances.
    assert shot1["outcome"]["reward"] == 0.5
    assert shot1["outcome"]["reward_source"] == "official/candidate-resolved-fraction"
    assert shot1["outcome"]["metrics"] == {
        "resolved_count": 1,
        "instance_count": 2,
        "exit_code": 0,
        "timed_out": False,
        "author": "alice",
        "max_shots": 3,
        "prompt_sha256": "sha256:" + "ab" * 32,
        "receipt_error": None,
    }
    assert shot1["outcome"]["is_completed"] and not shot1["outcome"]["is_truncated"]
    assert shot1["cost"] == {
        "usd": 1.25,
        "tokens_in": 10,
        "tokens_out": 5,
        "tokens_reasoning": None,
        "cache_read": 2,
        "cache_write": 0,
        "wall_s": 600,
    }
    assert shot1["artifacts"] == {
        "patch_path": None,
        "run_dir": worktree,
        "transcript_ref": near,
    }
    assert shot1["provenance"]["capture"] == "settle-time" and "gap" not in shot1["provenance"]

    assert shot2["task"]["rep"] == 2 and shot2["outcome"]["error"] == "boom"
    assert shot2["outcome"]["is_truncated"] and not shot2["outcome"]["is_completed"]
    assert shot2["artifacts"]["transcript_ref"] == near  # one worktree, several shots

    assert cand2["outcome"]["reward"] is None and cand2["outcome"]["reward_source"] is None
    assert cand2["outcome"]["metrics"]["resolved_count"] is None
    assert cand2["messages"] == [] and cand2["task"]["instance_id"] == "gen0-cand2"
    assert cand2["provenance"]["gap"].startswith("no claude transcript matched worktree ")
    assert cand2["artifacts"]["transcript_ref"].endswith("proposer-shots/gen0-cand2-shot1.json")

    assert cand3["outcome"]["error"].startswith("not JSON")
    assert cand3["outcome"]["metrics"]["receipt_error"] == cand3["outcome"]["error"]
    assert "receipt unreadable: not JSON" in cand3["provenance"]["gap"]
    assert cand3["policy"]["harness"] is None and cand3["cost"]["wall_s"] is None
    assert len({x["rollout_id"] for x in lines}) == len(lines)


def test_a_pending_cell_keeps_the_candidate_reward_unknown(arena: Arena, tmp_path: Path) -> None:
    out = tmp_path / "ledger.jsonl"
    asyncio.run(_capture_and_project(arena, out, [True, True]))

    async def add_pending() -> None:
        store = await SqliteEventStore.open(arena.db)
        try:
            spec = make_spec(campaign="gen0-cand1", instance_id="i9")
            await store.append(f"cell/{spec.cell_id}", 0, [ev.CellSubmitted(spec=spec)])
        finally:
            await store.close()

    assert _lines(out)[-4]["outcome"]["reward"] == 1
    asyncio.run(add_pending())
    asyncio.run(_capture_and_project(arena, out, []))
    shot1 = next(x for x in _lines(out) if x["role"] == "proposer")
    assert shot1["outcome"]["reward"] is None  # unknown, never 0
    assert shot1["outcome"]["metrics"]["instance_count"] is None


def test_proposer_lines_need_only_the_log(arena: Arena, tmp_path: Path) -> None:
    first, second = tmp_path / "1.jsonl", tmp_path / "2.jsonl"
    asyncio.run(_capture_and_project(arena, first, [True, False]))
    shutil.rmtree(arena.paths.shots_dir)
    shutil.rmtree(arena.paths.claude_projects_dir)
    asyncio.run(_capture_and_project(arena, second, [True, False]))
    assert first.read_bytes() == second.read_bytes()


def test_a_cell_filter_leaves_proposer_lines_out(arena: Arena, tmp_path: Path) -> None:
    out = tmp_path / "ledger.jsonl"
    asyncio.run(_capture_and_project(arena, out, [True]))

    async def one_cell() -> dict[str, Any]:
        store = await SqliteEventStore.open(arena.db)
        try:
            return await project_store(store, out, cells=["gen0-cand1:i0:SOLO:0"])
        finally:
            await store.close()

    stats = asyncio.run(one_cell())
    assert stats["byRole"] == {"agent": 1}
    assert stats == {
        **new_stats(),
        "lines": 1,
        "byRole": {"agent": 1},
        "gapLines": 1,
        "rewardLabeled": 1,
    }


def test_the_reward_divides_by_the_baselines_instance_count() -> None:
    """The reference: ``resolvedCount / manifest.instances.length`` — the baseline manifest's
    instances, not the candidate campaign's (issue 29, finding 9)."""
    from arenad.ledger.project import CellResolution
    from arenad.ledger.proposer import CandidateTally
    from events.specs import CandidateSpec

    def cell(campaign: str, g: int, c: int, iid: str, status: str) -> CellResolution:
        return CellResolution(
            campaign=campaign,
            candidate=CandidateSpec(id=campaign, generation=g, index=c),
            instance_id=iid,
            rep=0,
            status=status,  # type: ignore[arg-type]
            judge=None,
            profile_commit=None,
        )

    tally = CandidateTally()
    for n in range(4):
        tally.add(cell("baseline", -1, -1, f"i{n}", "unresolved"))
    # The candidate ran on two of the baseline's four instances and resolved both.
    tally.add(cell("gen0-cand0", 0, 0, "i0", "resolved"))
    tally.add(cell("gen0-cand0", 0, 0, "i1", "resolved"))
    out = tally.outcome(0, 0)
    assert out is not None and (out.resolved_count, out.instance_count) == (2, 4)
    assert out.reward == 0.5
    # Without a baseline, its own instances.
    alone = CandidateTally()
    alone.add(cell("gen0-cand0", 0, 0, "i0", "resolved"))
    own = alone.outcome(0, 0)
    assert own is not None and own.reward == 1.0
