"""The exact line of a solo cell and of a supervisor cell, every field traced to the rule of
the reference backfill (shared/seeds/003, facts rollout-v1 §5) it comes from, and the
findings of issue 15 that are the projection's: no reward on an unscored run, candidate
identity, stable run ids, figures from the log, cell order, no phantom worker.

The log is built as the daemon writes it (a real SQLite store; the supervisor's journal,
state.json and worker files as ingested lines on ``ingest/<cell>/<attempt>``), so each
expected value below is the reference's rule applied to what the run recorded.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import msgspec
import pytest

from arenad.campaign import load_campaign
from arenad.js import iso_ms, js_stringify
from arenad.ledger.project import BRAIN_GAP, cell_resolution
from arenad.ledger.rollout import rollout_id, validate_rollout_line
from arenad.ledger.service import home_id, project_store
from arenad.store.base import AppendRequest, EventStore
from arenad.store.sqlite import SqliteEventStore
from events import capture as cap
from events import cell as ev
from events import ingest as ing
from events.base import Event, Recorded
from tests.events.samples import make_spec
from tests.recovery.opencode_fixture import with_kept_fold

T0 = 1_760_000_000_000
JUDGE = "swe-arena-official-judge"
CAMPAIGN = "gen0-cand2"  # a candidate by its name: generation 0, candidate 2


def _clock() -> Callable[[], int]:
    state = {"t": T0}

    def tick() -> int:
        state["t"] += 1000
        return state["t"]

    return tick


def _session(
    sid: str, cwd: str, purpose: str, texts: list[str], created: int
) -> cap.AgentSessionCaptured:
    messages, parts = [], []
    for i, text in enumerate(texts):
        mid = f"msg_{sid}_{i}"
        role = "user" if i % 2 == 0 else "assistant"
        messages.append(
            cap.MessageRow(id=mid, time_created=created + i, data=json.dumps({"role": role}))
        )
        parts.append(
            cap.PartRow(
                id=f"prt_{mid}", message_id=mid, data=json.dumps({"type": "text", "text": text})
            )
        )
    row = {
        "id": sid,
        "parent_id": None,
        "directory": cwd,
        "agent": "build",
        "model": json.dumps({"id": "glm-5", "providerID": "zai"}),
        "time_created": created,
        "time_updated": created + 2500,  # 2.5 s: Math.round gives 3
        "cost": 0.125,
        "tokens_input": 1000,
        "tokens_output": 200,
        "tokens_reasoning": 10,
        "tokens_cache_read": 50,
        "tokens_cache_write": 5,
    }
    return cap.AgentSessionCaptured(
        attempt=1,
        purpose=purpose,  # type: ignore[arg-type]
        store_path="/h/oc.db",
        session_id=sid,
        parent_id=None,
        directory=cwd,
        row=row,
        messages=messages,
        parts=parts,
    )


def _run(run_dir: str, *, end: Event, provenance: Sequence[Event] = ()) -> list[Event]:
    return [
        ev.CellMaterialized(
            attempt=1,
            run_dir=run_dir,
            workspace=f"{run_dir}/ws",
            head="0" * 40,
            clean=True,
            materializer="git",
        ),
        *provenance,
        ev.RunStarted(
            attempt=1,
            argv=["x"],
            cwd=f"{run_dir}/ws",
            pid=1,
            pgid=1,
            started_at_ms=T0,
            deadline_ms=T0 + 1,
            timeout_s=1.0,
            kill_grace_s=1.0,
        ),
        end,
    ]


def _verified(run_dir: str, *, scored: bool = True) -> ev.CellVerified:
    return ev.CellVerified(
        attempt=1,
        scored=scored,
        not_scored_reason=None if scored else "timed out",
        patch_path=f"{run_dir}/p.patch",
        patch_lines=4,
        patch_sha256="cd" * 32,
        verify_rc=0,
        verify_pass=True,
    )


def _journal(*rows: dict[str, Any]) -> list[Event]:
    return [
        ing.LineIngested(
            source="supervisor",
            path="journal.jsonl",
            offset=i * 100,
            length=99,
            raw=json.dumps(row),
            kind=row["kind"],
        )
        for i, row in enumerate(rows)
    ]


class Log:
    """Cells appended through a real store, one append per event (its own time)."""

    def __init__(self, db: Path) -> None:
        self.db = db

    async def _append(self, requests: Sequence[tuple[str, list[Event]]]) -> None:
        store = await SqliteEventStore.open(self.db, clock=_clock_after(self.db))
        try:
            for stream, events in requests:
                version = await store.stream_version(stream)
                for i, event in enumerate(events):
                    await store.append(stream, version + i, [event])
        finally:
            await store.close()

    def add(self, *requests: tuple[str, list[Event]]) -> None:
        asyncio.run(self._append(requests))


_CLOCKS: dict[Path, Callable[[], int]] = {}


def _clock_after(db: Path) -> Callable[[], int]:
    # One clock per log: appends made in several steps keep moving forward.
    return _CLOCKS.setdefault(db, _clock())


_SOLO_PROVENANCE = ev.ProvenanceRecorded(
    attempt=1, repo="opencode", commit="cli", env_knobs={"model": "local/scripted"}
)


def solo_cell(
    campaign: str = CAMPAIGN, *, scored: bool = True, rep: int = 0
) -> list[tuple[str, list[Event]]]:
    spec = make_spec(campaign=campaign, instance_id="astropy-7", arm="SOLO", rep=rep)
    rd = f"/h/campaigns/{campaign}/rep-{rep}/attempt-1/runs/astropy-7/SOLO"
    end: Event = (
        ev.RunCompleted(attempt=1, rc=0, wall_s=2.5)
        if scored
        else ev.RunTimedOut(attempt=1, wall_s=2.5)
    )
    return [
        (
            f"cell/{spec.cell_id}",
            [
                ev.CellSubmitted(spec=spec),
                # The solo arm's identity, recorded with its start (SoloArmRunner).
                *_run(rd, end=end, provenance=[_SOLO_PROVENANCE]),
                _verified(rd, scored=scored),
                ev.JudgeVerdictRecorded(
                    attempt=1,
                    judge=JUDGE,
                    verdict_json='{"resolved":true}',
                    resolved=True,
                    score=None,
                    source="command",
                    attempts=1,
                    wall_s=12.5,
                ),
                ev.CellRecovered(
                    attempt=1,
                    store_available=True,
                    spend=ev.SpendFigures(
                        sessions=1,
                        tokens_in=1000,
                        tokens_out=200,
                        tokens_reasoning=10,
                        cache_read=50,
                        cache_write=5,
                        cost_usd=0.125,
                    ),
                ),
            ],
        ),
        (
            f"capture/{spec.cell_id}/1",
            [_session("ses_solo", f"{rd}/ws", "solo", ["fix it", "fixed"], T0)],
        ),
    ]


def supervisor_cell(
    campaign: str = CAMPAIGN, *, ingested: bool = True, counts: bool = False
) -> list[tuple[str, list[Event]]]:
    """``counts``: the SupervisorOutcome carries the journal's counts (as arenad records
    them at run end since phase 2); else only the ingested journal has them."""
    spec = make_spec(campaign=campaign, instance_id="astropy-7", arm="SUP", supervisor=True)
    rd = f"/h/campaigns/{campaign}/rep-0/attempt-1/runs/astropy-7/SUP"
    journal = _journal(
        {"kind": "spawned", "id": "r", "label": "root", "role": "supervisor"},
        {
            "kind": "spawned",
            "id": "r:s0",
            "parent": "r",
            "label": "fix the parser",
            "role": "worker",
        },
        {"kind": "spawned", "id": "r:s1", "parent": "r", "label": "add a test", "role": "worker"},
        {"kind": "settled", "id": "r:s0", "status": "done"},
        {"kind": "settled", "id": "r:s1", "status": "done"},
    )
    state = json.dumps(
        {
            "status": "completed",
            "verdict": "delivered",
            "result": {"delivered": True, "spentTokens": 5000, "spentUsd": 1.5},
        }
    )
    requests = [
        (
            f"cell/{spec.cell_id}",
            [
                ev.CellSubmitted(spec=spec),
                *_run(rd, end=ev.RunCompleted(attempt=1, rc=0, wall_s=1234.5)),
                ev.ProvenanceRecorded(attempt=1, repo="/opt/loops", commit="feed" * 10),
                ev.SupervisorOutcome(
                    attempt=1,
                    sup_run_dir=f"{rd}/ws/.agent/supervisor/s1",
                    status="completed",
                    verdict="delivered",
                    delivered=True,
                    spent_tokens=5000,
                    spent_usd=1.5,
                    **(
                        {
                            "spawned": 3,
                            "workers": 2,
                            "settled": 2,
                            "subtasks": ["fix the parser", "add a test"],
                        }
                        if counts
                        else {}
                    ),
                ),
                _verified(rd),
                ev.JudgeVerdictRecorded(
                    attempt=1,
                    judge=JUDGE,
                    # A reference-shaped judge.json: its attempts and wallS are the figures.
                    verdict_json='{"resolved":true,"score":1,"attempts":2,"wallS":33.25}',
                    resolved=True,
                    score=1.0,
                    source="operator",
                ),
                ev.CellRecovered(
                    attempt=1,
                    store_available=True,
                    spend=ev.SpendFigures(
                        sessions=2,
                        cost_usd=0.25,  # the worker sessions' sum: on the worker lines
                        worker_tok_journal=0,
                        worker_cwds=["/w/b", "/w/a", "/w/b"],
                        worker_sessions=2,
                        worker_tok_sqlite=3000,
                        spent_tokens=5000,
                        spent_usd=1.5,
                    ),
                ),
            ],
        ),
        (
            f"capture/{spec.cell_id}/1",
            [
                _session("ses_a", "/w/a", "worker", ["part a", "done a"], T0 + 10),
                _session("ses_b", "/w/b", "worker", ["part b", "done b"], T0 + 20),
            ],
        ),
    ]
    if ingested:
        snapshot = ing.FileSnapshotted(
            source="supervisor", path="state.json", content=state, sha256="00" * 32, size=len(state)
        )
        requests.append(
            (f"ingest/{spec.cell_id}/1", [*journal, snapshot, ing.IngestionClosed(files={})])
        )
    return requests


async def _project(db: Path, out: Path, **kw: Any) -> dict[str, Any]:
    store = await SqliteEventStore.open(db)
    try:
        return await project_store(store, out, **kw)
    finally:
        await store.close()


def _project_lines(db: Path, out: Path, **kw: Any) -> list[str]:
    asyncio.run(_project(db, out, **kw))
    return out.read_text(encoding="utf-8").splitlines()


async def _home(db: Path) -> str:
    store = await SqliteEventStore.open(db)
    try:
        return await home_id(store)
    finally:
        await store.close()


async def _recorded_at(db: Path, stream: str, tag: str) -> int:
    store = await SqliteEventStore.open(db)
    try:
        return next(r.recorded_at_ms for r in await store.read_stream(stream) if r.tag == tag)
    finally:
        await store.close()


def _expect(line: str, expected: dict[str, Any]) -> None:
    # Bytes, so key order is checked too; then the parsed form for a readable diff.
    assert json.loads(line) == expected
    assert line == js_stringify(expected)
    assert validate_rollout_line(json.loads(line)) == []


# --------------------------------------------------------------------------- the two lines


def test_the_solo_line_field_by_field(tmp_path: Path) -> None:
    log = Log(tmp_path / "events.db")
    log.add(*solo_cell())
    (line,) = _project_lines(log.db, tmp_path / "ledger.jsonl")
    spec = make_spec(campaign=CAMPAIGN, instance_id="astropy-7", arm="SOLO")
    home = asyncio.run(_home(log.db))
    run_id = f"arenad:{home}:{CAMPAIGN}"
    rd = f"/h/campaigns/{CAMPAIGN}/rep-0/attempt-1/runs/astropy-7/SOLO"
    recovered = asyncio.run(_recorded_at(log.db, f"cell/{spec.cell_id}", "cell.recovered"))
    _expect(
        line,
        {
            "schema": "tangle.rollout.v1",
            # UUIDv5 over stable keys (the reference mints randomUUID: not reproducible).
            "rollout_id": rollout_id(run_id, spec.cell_id, 1, "agent", "ses_solo"),
            "parent_rollout_id": None,
            # arenad:<home id>:<campaign>: the campaign and the home only (issue 15 #4).
            "run_id": run_id,
            "experiment_id": None,
            # candidateId(generation, candidateIndex), from the campaign's name (#3).
            "candidate_id": "gen0-cand2",
            "generation": 0,
            "candidate_index": 2,
            # A solo eval run is role agent (schema: agent = solo eval run).
            "role": "agent",
            # task: suite/instance_id/split from the spec; seed null (arenad records none);
            # rep = cell.rep.
            "task": {
                "suite": "swe-bench-verified",
                "instance_id": "astropy-7",
                "split": "search",
                "seed": None,
                "rep": 0,
            },
            # splitModelRef(model) at the first "/"; profile_commit = the solo identity's
            # provenance commit (toArmIdentity: "cli").
            "policy": {
                "harness": "opencode",
                "harness_version": None,
                "model": "scripted",
                "provider": "local",
                "profile_commit": "cli",
                "sampling": None,
            },
            # readOpencodeSessionMessages of the captured session.
            "messages": [
                {"role": "user", "content": "fix it"},
                {"role": "assistant", "content": "fixed"},
            ],
            "tool_defs": [],
            "outcome": {
                # composite/score when a number, else resolved as 1/0 — on a scored run.
                "reward": 1,
                "realness_gated": False,
                "reward_source": JUDGE,
                "verdict": {"resolved": True},  # the judge.json document
                "metrics": {
                    "resolved": True,  # artifact.resolved
                    "verify_pass": True,  # artifact.verifyPass
                    "verify_rc": 0,
                    "patch_lines": 4,  # artifact.patchLines
                    "patch_sha256": "cd" * 32,
                    "scored": True,
                    "not_scored_reason": None,
                    "rc": 0,
                    "attempt": 1,
                    "sessions": 1,
                },
                # artifact present and no cell.error: the run completed and counts.
                "is_completed": True,
                "is_truncated": False,
                "error": None,
            },
            # The session spend; wall_s = Math.round(2.5) = 3 (JS rounds .5 up, #8).
            "cost": {
                "usd": 0.125,
                "tokens_in": 1000,
                "tokens_out": 200,
                "tokens_reasoning": 10,
                "cache_read": 50,
                "cache_write": 5,
                "wall_s": 3,
            },
            "artifacts": {
                "patch_path": f"{rd}/p.patch",
                "run_dir": rd,
                "transcript_ref": "opencode:ses_solo",
            },
            # settle-time capture, at the recovery's recorded time; a transcript: no gap.
            "provenance": {"captured_at": iso_ms(recovered), "capture": "settle-time"},
        },
    )


def test_the_supervisor_line_and_its_workers_field_by_field(tmp_path: Path) -> None:
    log = Log(tmp_path / "events.db")
    log.add(*supervisor_cell())
    sup_line, worker_b, worker_a = _project_lines(log.db, tmp_path / "ledger.jsonl")
    spec = make_spec(campaign=CAMPAIGN, instance_id="astropy-7", arm="SUP", supervisor=True)
    home = asyncio.run(_home(log.db))
    run_id = f"arenad:{home}:{CAMPAIGN}"
    rd = f"/h/campaigns/{CAMPAIGN}/rep-0/attempt-1/runs/astropy-7/SUP"
    captured_at = iso_ms(
        asyncio.run(_recorded_at(log.db, f"cell/{spec.cell_id}", "cell.recovered"))
    )
    sup_id = rollout_id(run_id, spec.cell_id, 1, "supervisor", None)
    identity = {"candidate_id": "gen0-cand2", "generation": 0, "candidate_index": 2}
    task = {
        "suite": "swe-bench-verified",
        "instance_id": "astropy-7",
        "split": "search",
        "seed": None,
        "rep": 0,
    }
    _expect(
        sup_line,
        {
            "schema": "tangle.rollout.v1",
            "rollout_id": sup_id,
            "parent_rollout_id": None,
            "run_id": run_id,
            "experiment_id": None,
            **identity,
            "role": "supervisor",
            "task": task,
            # harness pi-loops; resolvedModel split at "/": the reference's is the cell's
            # worker model (issue 29, finding 9), never the driver's;
            # profile_commit = artifact.commit (the loops checkout's HEAD).
            "policy": {
                "harness": "pi-loops",
                "harness_version": None,
                "model": "worker",
                "provider": "local",
                "profile_commit": "feed" * 10,
                "sampling": None,
            },
            "messages": [],
            "tool_defs": [],
            "outcome": {
                "reward": 1,  # judgeScores composite (the verdict's score)
                "realness_gated": False,
                "reward_source": JUDGE,
                "verdict": {"resolved": True, "score": 1, "attempts": 2, "wallS": 33.25},
                # The reference's metrics, in its order, then arenad's run figures.
                "metrics": {
                    "resolved": True,
                    "verify_pass": True,
                    "patch_lines": 4,
                    "judge_attempts": 2,  # artifact.judgeAttempts (judge.json attempts)
                    "judge_wall_s": 33.25,  # artifact.judgeWallS (judge.json wallS)
                    "spent_tokens": 5000,  # state.json result.spentTokens
                    "spent_usd": 1.5,  # state.json result.spentUsd
                    "recovered_tokens": 8000,  # the episode total: spent + worker tokens
                    "sup_status": "completed",  # result.sup_status
                    "sup_verdict": "delivered",
                    "spawned": 3,  # journal spawned events
                    "workers": 2,  # spawned events not labelled root
                    "settled": 2,  # journal settled events
                    "subtasks": ["fix the parser", "add a test"],  # worker labels [:100]
                    "cached": False,  # cell.cached: no result served from a cache
                    "scored": True,
                    "not_scored_reason": None,
                    "rc": 0,
                    "attempt": 1,
                },
                "is_completed": True,
                "is_truncated": False,  # sup_status !== "running", in time
                "error": None,
            },
            # usd = the episode's own receipt (the driver's spentUsd), not the workers' sum;
            # the brain's token split is not recorded; wall_s = Math.round(1234.5) = 1235.
            "cost": {
                "usd": 1.5,
                "tokens_in": None,
                "tokens_out": None,
                "tokens_reasoning": None,
                "cache_read": None,
                "cache_write": None,
                "wall_s": 1235,
            },
            "artifacts": {
                "patch_path": f"{rd}/p.patch",
                "run_dir": rd,
                "transcript_ref": f"{rd}/brain.jsonl",
            },
            "provenance": {"captured_at": captured_at, "capture": "settle-time", "gap": BRAIN_GAP},
        },
    )

    def worker(cwd: str, sid: str, texts: list[str]) -> dict[str, Any]:
        return {
            "schema": "tangle.rollout.v1",
            "rollout_id": rollout_id(run_id, spec.cell_id, 1, "worker", sid),
            "parent_rollout_id": sup_id,  # the supervisor's id
            "run_id": run_id,
            "experiment_id": None,
            **identity,
            "role": "worker",
            "task": task,
            # harness opencode; model/provider from the session's model.
            "policy": {
                "harness": "opencode",
                "harness_version": None,
                "model": "glm-5",
                "provider": "zai",
                "profile_commit": "feed" * 10,
                "sampling": None,
            },
            "messages": [
                {"role": "user", "content": texts[0]},
                {"role": "assistant", "content": texts[1]},
            ],
            "tool_defs": [],
            "outcome": {
                "reward": 1,  # inherited from the episode
                "realness_gated": False,
                "reward_source": f"{JUDGE}/inherited",
                "verdict": None,
                "metrics": {
                    "worker_cwd": cwd,
                    "session_agent": "build",
                    "session_parent_id": None,
                    "has_session": True,
                    "unreadable": 0,
                },
                "is_completed": True,  # a session with messages
                "is_truncated": False,
                "error": None,
            },
            # The session row; wall_s = Math.round((updated - created) / 1000).
            "cost": {
                "usd": 0.125,
                "tokens_in": 1000,
                "tokens_out": 200,
                "tokens_reasoning": 10,
                "cache_read": 50,
                "cache_write": 5,
                "wall_s": 3,
            },
            "artifacts": {"patch_path": None, "run_dir": rd, "transcript_ref": f"opencode:{sid}"},
            "provenance": {"captured_at": captured_at, "capture": "settle-time"},
        }

    # Worker lines per deduplicated workerCwds entry, first seen first: /w/b, then /w/a.
    _expect(worker_b, worker("/w/b", "ses_b", ["part b", "done b"]))
    _expect(worker_a, worker("/w/a", "ses_a", ["part a", "done a"]))


# --------------------------------------------------------------------------- the findings


def test_a_verdict_on_an_unscored_run_is_no_reward_and_no_resolved_instance(tmp_path: Path) -> None:
    log = Log(tmp_path / "events.db")
    log.add(*solo_cell(scored=False))
    (line,) = map(json.loads, _project_lines(log.db, tmp_path / "ledger.jsonl"))
    outcome = line["outcome"]
    # The reference judges a completed run only: an unscored one has no reward at all.
    assert outcome["reward"] is None and outcome["reward_source"] is None
    assert outcome["metrics"]["resolved"] is None and outcome["metrics"]["scored"] is False
    assert outcome["verdict"] == {"resolved": True}  # the judge's document is kept
    assert outcome["is_completed"] is False and outcome["is_truncated"] is True

    async def resolution() -> Any:
        store = await SqliteEventStore.open(log.db)
        try:
            spec = make_spec(campaign=CAMPAIGN, instance_id="astropy-7", arm="SOLO")
            return cell_resolution(await store.read_stream(f"cell/{spec.cell_id}"))
        finally:
            await store.close()

    # Toward the proposer's resolved fraction it is an unresolved instance, not a resolved one.
    assert asyncio.run(resolution()).status == "unresolved"


def test_supervisor_figures_are_null_when_nothing_was_ingested(tmp_path: Path) -> None:
    log = Log(tmp_path / "events.db")
    log.add(*supervisor_cell(ingested=False))
    sup = json.loads(_project_lines(log.db, tmp_path / "ledger.jsonl")[0])
    metrics = sup["outcome"]["metrics"]
    assert [metrics[k] for k in ("spawned", "workers", "settled", "subtasks")] == [None] * 4
    assert metrics["recovered_tokens"] == 8000 and sup["cost"]["usd"] == 1.5


def test_the_journal_counts_recorded_at_run_end_are_preferred(tmp_path: Path) -> None:
    folded = tmp_path / "folded"
    folded.mkdir()
    log = Log(folded / "events.db")
    log.add(*supervisor_cell())
    expected = json.loads(_project_lines(log.db, folded / "ledger.jsonl")[0])
    # Recorded on the SupervisorOutcome, with no journal ingested: the same figures.
    recorded = tmp_path / "recorded"
    recorded.mkdir()
    log = Log(recorded / "events.db")
    log.add(*supervisor_cell(ingested=False, counts=True))
    sup = json.loads(_project_lines(log.db, recorded / "ledger.jsonl")[0])
    keys = ("spawned", "workers", "settled", "subtasks")
    metrics = sup["outcome"]["metrics"]
    assert [metrics[k] for k in keys] == [expected["outcome"]["metrics"][k] for k in keys]
    assert [metrics[k] for k in keys] == [3, 2, 2, ["fix the parser", "add a test"]]


def _with_tool_named(session: cap.AgentSessionCaptured, name: object) -> cap.AgentSessionCaptured:
    """The session with one more assistant message: a tool call named ``name``."""
    mid = f"msg_{session.session_id}_tool"
    message = cap.MessageRow(id=mid, time_created=T0 + 99, data=json.dumps({"role": "assistant"}))
    part = {"type": "tool", "callID": "c1", "tool": name, "state": {"output": "ok"}}
    return msgspec.structs.replace(
        session,
        messages=[*session.messages, message],
        parts=[*session.parts, cap.PartRow(id=f"prt_{mid}", message_id=mid, data=json.dumps(part))],
    )


@pytest.mark.parametrize("kept", [False, True], ids=["folded-here", "kept-at-capture"])
@pytest.mark.parametrize("name", [42, {"x": [1]}, True])
def test_a_hostile_tool_name_makes_a_labeled_gap_not_a_failed_projection(
    tmp_path: Path, name: object, kept: bool
) -> None:
    requests = solo_cell()
    (cell_stream_name, cell_events), (capture_stream_name, [session]) = requests
    hostile = _with_tool_named(session, name)
    log = Log(tmp_path / "events.db")
    log.add(
        (cell_stream_name, cell_events),
        (capture_stream_name, [with_kept_fold(hostile) if kept else hostile]),
        *supervisor_cell(),
    )
    lines = [json.loads(x) for x in _project_lines(log.db, tmp_path / "ledger.jsonl")]
    solo = next(x for x in lines if x["role"] == "agent")
    shown = json.dumps(name, separators=(",", ":"))
    assert solo["messages"] == []
    assert solo["provenance"]["gap"] == (
        f"opencode session ses_solo: a tool part's name is {shown}, not a string"
    )
    assert solo["outcome"]["metrics"]["sessions"] == 1  # the session was captured
    # The other cells' lines are as ever, and a plain string name is no gap.
    assert [x["role"] for x in lines] == ["agent", "supervisor", "worker", "worker"]
    log2 = Log(tmp_path / "plain.db")
    plain_session = _with_tool_named(session, "bash")
    log2.add(
        (cell_stream_name, cell_events),
        (capture_stream_name, [with_kept_fold(plain_session) if kept else plain_session]),
    )
    (plain,) = [json.loads(x) for x in _project_lines(log2.db, tmp_path / "plain.jsonl")]
    assert "gap" not in plain["provenance"] and plain["messages"][-1]["name"] == "bash"


def test_a_supervisor_cell_with_no_worker_cwd_has_no_phantom_worker_line(tmp_path: Path) -> None:
    spec = make_spec(campaign=CAMPAIGN, instance_id="i-1", arm="SUP", supervisor=True)
    rd = "/h/r"
    log = Log(tmp_path / "events.db")
    log.add(
        (
            f"cell/{spec.cell_id}",
            [
                ev.CellSubmitted(spec=spec),
                *_run(rd, end=ev.RunCompleted(attempt=1, rc=0, wall_s=1.0)),
                _verified(rd),
                ev.CellRecovered(attempt=1, store_available=False, spend=ev.SpendFigures()),
            ],
        ),
        (
            f"capture/{spec.cell_id}/1",
            [cap.AgentStoreUnavailable(attempt=1, store_path="/x", error="gone")],
        ),
    )
    out = tmp_path / "ledger.jsonl"
    stats = asyncio.run(_project(log.db, out))
    assert [json.loads(x)["role"] for x in out.read_text().splitlines()] == ["supervisor"]
    assert stats["opencodeDbAvailable"] is False and stats["workerCwdsMissed"] == 0


def test_cells_are_ordered_by_rep_as_a_number(tmp_path: Path) -> None:
    log = Log(tmp_path / "events.db")
    log.add(*solo_cell(rep=10), *solo_cell(rep=2))
    reps = [json.loads(x)["task"]["rep"] for x in _project_lines(log.db, tmp_path / "l.jsonl")]
    assert reps == [2, 10]


def test_run_ids_of_a_campaign_never_change_when_another_campaign_arrives(tmp_path: Path) -> None:
    log = Log(tmp_path / "events.db")
    log.add(*solo_cell(), *supervisor_cell())
    before = _project_lines(log.db, tmp_path / "1.jsonl")
    log.add(*solo_cell("other"), *supervisor_cell("zzz"))
    after = _project_lines(log.db, tmp_path / "2.jsonl")
    assert [x for x in after if f':{CAMPAIGN}"' in x] == before
    other = json.loads(
        next(x for x in after if '"instance_id":"astropy-7"' in x and ':other"' in x)
    )
    assert other["candidate_id"] is None and other["generation"] is None  # not a candidate name
    assert other["run_id"].endswith(":other")


class _Reads(EventStore):
    """A store that notes every stream read (to show what a projection touches)."""

    def __init__(self, inner: EventStore) -> None:
        self.inner = inner
        self.read: list[str] = []

    async def append_many(self, requests: Sequence[AppendRequest]) -> list[list[Recorded]]:
        return await self.inner.append_many(requests)

    async def read_stream(self, stream: str, after_version: int = 0) -> list[Recorded]:
        self.read.append(stream)
        return await self.inner.read_stream(stream, after_version)

    async def read_streams(self, streams: Sequence[str]) -> list[Recorded]:
        self.read.extend(streams)
        return await self.inner.read_streams(streams)

    def read_all(self, after_seq: int = 0, batch_size: int = 2000, tags: Any = None) -> Any:
        # Only the home id reads here: the log's first row, not a campaign's stream.
        return self.inner.read_all(after_seq, batch_size, tags)

    async def stream_version(self, stream: str) -> int:
        return await self.inner.stream_version(stream)

    async def last_seq(self) -> int:
        return await self.inner.last_seq()

    async def streams(self, prefix: str) -> list[str]:
        return await self.inner.streams(prefix)

    async def wait_for_new(self, after_seq: int, timeout_s: float) -> None:
        await self.inner.wait_for_new(after_seq, timeout_s)

    async def close(self) -> None:
        await self.inner.close()


def test_one_campaign_projects_alone_and_reads_no_other_campaign(tmp_path: Path) -> None:
    log = Log(tmp_path / "events.db")
    log.add(*solo_cell(), *supervisor_cell(), *solo_cell("other"), *supervisor_cell("other"))
    whole = _project_lines(log.db, tmp_path / "all.jsonl")

    async def one() -> tuple[list[str], dict[str, Any]]:
        inner = await SqliteEventStore.open(log.db)
        store = _Reads(inner)
        try:
            stats = await project_store(store, tmp_path / "one.jsonl", campaign=CAMPAIGN)
            return store.read, stats
        finally:
            await store.close()

    read, stats = asyncio.run(one())
    assert read and all(f"/{CAMPAIGN}:" in s for s in read)  # never "other"'s streams
    assert stats["lines"] == 4  # agent, supervisor, two workers
    # Byte for byte the whole ledger's lines of that campaign.
    assert (tmp_path / "one.jsonl").read_text().splitlines() == [
        x for x in whole if f':{CAMPAIGN}"' in x
    ]


def test_explicit_candidate_keys_label_the_lines_and_join_the_proposer(tmp_path: Path) -> None:
    (tmp_path / "c.toml").write_text(
        """
name = "tuned-prompt"
[candidate]
generation = 3
index = 4
id = "g3-tuned"
[materializer]
kind = "git"
source = "./repo"
[[instances]]
instance_id = "astropy-7"
base_commit = "0123456789abcdef0123456789abcdef01234567"
problem_statement = "fix"
verify_cmd = "true"
[[arms]]
name = "SOLO"
kind = "solo"
model = "local/scripted"
"""
    )
    (spec,) = load_campaign(tmp_path / "c.toml").cells
    assert spec.candidate is not None and spec.candidate.id == "g3-tuned"
    # Without an id, the proposer's name form.
    (tmp_path / "d.toml").write_text(
        (tmp_path / "c.toml").read_text().replace('id = "g3-tuned"\n', "")
    )
    assert load_campaign(tmp_path / "d.toml").cells[0].candidate.id == "gen3-cand4"

    rd = "/h/r"
    log = Log(tmp_path / "events.db")
    log.add(
        (
            f"cell/{spec.cell_id}",
            [
                ev.CellSubmitted(spec=spec),
                *_run(rd, end=ev.RunCompleted(attempt=1, rc=0, wall_s=1.0)),
                _verified(rd),
                ev.JudgeVerdictRecorded(
                    attempt=1,
                    judge=JUDGE,
                    verdict_json='{"resolved":true}',
                    resolved=True,
                    score=None,
                ),
                ev.CellRecovered(attempt=1, store_available=True, spend=ev.SpendFigures()),
            ],
        ),
        (
            "proposer/shot/gen3-cand4-shot1.json",
            [
                cap.ProposerShotCaptured(
                    path="/h/proposer-shots/gen3-cand4-shot1.json",
                    author=None,
                    generation=3,
                    candidate_index=4,
                    shot=1,
                    content=json.dumps({"receipt": {"exitCode": 0}}),
                )
            ],
        ),
    )
    agent, proposer = map(json.loads, _project_lines(log.db, tmp_path / "l.jsonl"))
    assert (agent["candidate_id"], agent["generation"], agent["candidate_index"]) == (
        "g3-tuned",
        3,
        4,
    )
    # The proposer line carries the id its candidate's cells carry: the two join on it.
    assert proposer["candidate_id"] == "g3-tuned" and proposer["outcome"]["reward"] == 1
    assert proposer["run_id"] == agent["run_id"].rsplit(":", 1)[0]  # arenad:<home id>
