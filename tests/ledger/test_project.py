"""The rollout ledger projection: a real SQLite log in, validated deterministic lines out."""

from __future__ import annotations

import asyncio
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from arenad.ledger.project import BRAIN_GAP, new_stats
from arenad.ledger.rollout import validate_rollout_line
from arenad.ledger.service import project_store
from arenad.store.base import AppendRequest
from arenad.store.sqlite import SqliteEventStore
from events import capture as cap
from events import cell as ev
from events.base import Event
from tests.conftest import DemoRun
from tests.events.samples import make_spec

T0 = 1_700_000_000_000


def _clock() -> Any:
    state = {"t": T0}

    def tick() -> int:
        state["t"] += 1000
        return state["t"]

    return tick


def _session(sid: str, parent: str | None, cwd: str, purpose: str, texts: list[str]) -> Event:
    row = {
        "id": sid,
        "parent_id": parent,
        "directory": cwd,
        "agent": "build",
        "model": json.dumps({"id": "scripted", "providerID": "local"}),
        "time_created": T0,
        "time_updated": T0 + 4500,
        "cost": 0.25,
        "tokens_input": 100,
        "tokens_output": 20,
    }
    messages = []
    parts = []
    for i, text in enumerate(texts):
        role = "user" if i % 2 == 0 else "assistant"
        mid = f"msg_{sid}_{i:02d}"
        messages.append(
            cap.MessageRow(id=mid, time_created=T0 + i, data=json.dumps({"role": role}))
        )
        parts.append(
            cap.PartRow(
                id=f"prt_{sid}_{i:02d}",
                message_id=mid,
                data=json.dumps({"type": "text", "text": text}),
            )
        )
    return cap.AgentSessionCaptured(
        attempt=1,
        purpose=purpose,  # type: ignore[arg-type]
        store_path="/h/oc/opencode.db",
        session_id=sid,
        parent_id=parent,
        directory=cwd,
        row=row,
        messages=messages,
        parts=parts,
    )


def _run_events(run_dir: str, *, spend: ev.SpendFigures, available: bool = True) -> list[Event]:
    return [
        ev.CellMaterialized(
            attempt=1,
            run_dir=run_dir,
            workspace=f"{run_dir}/ws",
            head="0" * 40,
            clean=True,
            materializer="git",
        ),
        ev.RunStarted(
            attempt=1,
            argv=["x"],
            cwd="/",
            pid=1,
            pgid=1,
            started_at_ms=T0,
            deadline_ms=T0 + 1,
            timeout_s=1.0,
            kill_grace_s=1.0,
        ),
        ev.RunCompleted(attempt=1, rc=0, wall_s=12.5),
        ev.CellVerified(
            attempt=1,
            scored=True,
            patch_path=f"{run_dir}/p.diff",
            patch_lines=3,
            verify_rc=0,
            verify_pass=True,
        ),
        ev.CellRecovered(attempt=1, store_available=available, spend=spend),
    ]


async def _build(db: Path, run_root: Path) -> None:
    store = await SqliteEventStore.open(db, clock=_clock())
    try:
        solo = make_spec(instance_id="bug-1", arm="SOLO")
        sup = make_spec(instance_id="bug-2", arm="SUP", supervisor=True)
        bare = make_spec(instance_id="bug-3", arm="SOLO")
        sd = str(run_root / "solo")
        await store.append_many(
            [
                AppendRequest(
                    f"cell/{solo.cell_id}",
                    0,
                    [
                        ev.CellSubmitted(spec=solo),
                        *_run_events(
                            sd, spend=ev.SpendFigures(sessions=2, tokens_in=200, cost_usd=0.5)
                        ),
                    ],
                ),
                AppendRequest(
                    f"capture/{solo.cell_id}/1",
                    0,
                    [
                        _session("ses_child", "ses_root", sd, "solo", ["sub task", "sub done"]),
                        _session("ses_root", None, sd, "solo", ["fix the bug", "fixed"]),
                    ],
                ),
                AppendRequest(
                    f"cell/{sup.cell_id}",
                    0,
                    [
                        ev.CellSubmitted(spec=sup),
                        *_run_events(
                            str(run_root / "sup"),
                            spend=ev.SpendFigures(
                                worker_cwds=["/w/a", "/w/b", "/w/c", "/w/d"], worker_sessions=2
                            ),
                        ),
                        ev.SupervisorOutcome(
                            attempt=1,
                            sup_run_dir=None,
                            status="done",
                            verdict="ok",
                            delivered=True,
                            spent_tokens=999,
                            spent_usd=1.5,
                        ),
                        ev.JudgeVerdictRecorded(
                            attempt=1,
                            judge="official",
                            verdict_json='{"resolved":true}',
                            resolved=True,
                            score=None,
                        ),
                    ],
                ),
                AppendRequest(
                    f"capture/{sup.cell_id}/1",
                    0,
                    [
                        _session("ses_w1", None, "/w/a", "worker", ["work", "done"]),
                        _session("ses_w1", None, "/w/a", "worker", ["work", "done"]),  # duplicate
                        _session("ses_w2", None, "/w/b", "worker", []),
                        cap.WorkerCwdUnmatched(attempt=1, cwd="/w/c"),
                        cap.AgentStoreUnavailable(attempt=1, store_path="/w/oc.db", error="locked"),
                    ],
                ),
                AppendRequest(f"cell/{bare.cell_id}", 0, [ev.CellSubmitted(spec=bare)]),
            ]
        )
    finally:
        await store.close()


async def _project(db: Path, out: Path, **kw: Any) -> dict[str, Any]:
    store = await SqliteEventStore.open(db)
    try:
        return await project_store(store, out, **kw)
    finally:
        await store.close()


@pytest.fixture
def log(tmp_path: Path) -> Path:
    db = tmp_path / "events.db"
    (tmp_path / "runs").mkdir()
    asyncio.run(_build(db, tmp_path / "runs"))
    return db


def _lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in path.read_text().splitlines()]


def test_lines_validate_and_map(log: Path, tmp_path: Path) -> None:
    out = tmp_path / "ledger.jsonl"
    stats = asyncio.run(_project(log, out, run_id="r1"))
    lines = _lines(out)
    assert all(validate_rollout_line(x) == [] for x in lines)
    assert [x["role"] for x in lines] == [
        "agent",
        "supervisor",
        "worker",
        "worker",
        "worker",
        "worker",
    ]
    assert list(stats) == list(new_stats())
    assert stats["byRole"] == {"agent": 1, "supervisor": 1, "worker": 4}
    assert stats["workerSessionsJoined"] == 1 and stats["workerSessionsEmpty"] == 1
    assert stats["workerCwdsMissed"] == 2 and stats["opencodeDbAvailable"] is False
    assert stats["rewardLabeled"] == 5 and stats["gapLines"] == 4

    agent, sup, w1, w2, w3, w4 = lines
    # Root session first, then the child.
    assert [m["content"] for m in agent["messages"]] == [
        "fix the bug",
        "fixed",
        "sub task",
        "sub done",
    ]
    assert agent["artifacts"]["transcript_ref"] == "opencode:ses_root"
    assert agent["outcome"]["reward"] is None and agent["outcome"]["reward_source"] is None
    # wall_s: the run's 12.5 s as the reference's Math.round(ms / 1000) gives it.
    assert agent["cost"]["usd"] == 0.5 and agent["cost"]["wall_s"] == 13
    assert agent["policy"]["provider"] == "local" and agent["policy"]["model"] == "scripted"
    assert agent["provenance"]["capture"] == "settle-time" and "gap" not in agent["provenance"]
    assert sup["outcome"]["reward"] == 1 and sup["outcome"]["verdict"] == {"resolved": True}
    assert sup["provenance"]["gap"] == BRAIN_GAP and sup["messages"] == []
    assert list(sup["outcome"]["metrics"])[:5] == [
        "resolved",
        "verify_pass",
        "patch_lines",
        "judge_attempts",
        "judge_wall_s",
    ]
    for w in (w1, w2, w3, w4):
        assert w["parent_rollout_id"] == sup["rollout_id"]
        assert w["outcome"]["reward_source"] == "official/inherited"
    assert w1["messages"] and w1["cost"]["wall_s"] == 5
    assert w2["provenance"]["gap"] == "opencode session ses_w2 has no readable message parts"
    assert w3["provenance"]["gap"] == "no opencode session found for worker cwd /w/c"
    assert w4["provenance"]["gap"] == "opencode store unavailable; worker cwd /w/d unrecoverable"
    assert len({x["rollout_id"] for x in lines}) == len(lines)


def test_deterministic_and_never_reads_run_dirs(log: Path, tmp_path: Path) -> None:
    a, b, c = tmp_path / "a.jsonl", tmp_path / "b.jsonl", tmp_path / "c.jsonl"
    asyncio.run(_project(log, a))
    asyncio.run(_project(log, b))
    shutil.rmtree(tmp_path / "runs")
    asyncio.run(_project(log, c))
    assert a.read_bytes() == b.read_bytes() == c.read_bytes()
    # arenad:<home id>:<campaign>: the home id is the log's first row hash, fixed.
    home = _lines(a)[0]["run_id"].split(":")[1]
    assert re.fullmatch("[0-9a-f]{16}", home)
    assert {x["run_id"] for x in _lines(a)} == {f"arenad:{home}:demo"}


def test_cell_filter(log: Path, tmp_path: Path) -> None:
    out = tmp_path / "one.jsonl"
    stats = asyncio.run(_project(log, out, cells=["demo:bug-1:SOLO:0"]))
    assert stats["lines"] == 1 and _lines(out)[0]["role"] == "agent"


@pytest.mark.slow
def test_demo_ledger_survives_rebuild_and_deleted_campaigns(
    tmp_path: Path, demo_run: DemoRun
) -> None:
    home = demo_run.copy(tmp_path / "h")
    exe = [str(Path(sys.executable).parent / "arenad"), "--home", str(home)]

    def arenad(*args: str) -> str:
        done = subprocess.run([*exe, *args], capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr
        return done.stdout

    first = tmp_path / "1.jsonl"
    stats = json.loads(arenad("project-ledger", str(first)))
    assert stats["lines"] >= 1
    arenad("rebuild")
    shutil.rmtree(home / "campaigns")
    second = tmp_path / "2.jsonl"
    arenad("project-ledger", str(second))
    assert first.read_bytes() == second.read_bytes()

    # An operator verdict labels the cell's reward; the ledger changes only there.
    cell_ids = sorted(
        r["stream"].removeprefix("cell/")
        for r in map(json.loads, arenad("events", "--json").splitlines())
        if r["stream"].startswith("cell/")
    )
    verdict = tmp_path / "judge.json"
    verdict.write_text('{"resolved": true, "judge": "op"}')
    arenad("record-verdict", cell_ids[0], str(verdict))
    third = tmp_path / "3.jsonl"
    labeled = json.loads(arenad("project-ledger", str(third)))
    assert labeled["rewardLabeled"] == stats["rewardLabeled"] + 1
    rewarded = [x for x in _lines(third) if x["outcome"]["reward"] is not None]
    assert rewarded[-1]["outcome"]["reward_source"] == "op"
    bad = tmp_path / "bad.json"
    bad.write_text("[1]")
    done = subprocess.run(
        [*exe, "record-verdict", cell_ids[0], str(bad)], capture_output=True, text=True
    )
    assert done.returncode == 2
