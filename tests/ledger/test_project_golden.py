"""The projection's exact bytes over a log that exercises every branch of the cell lines.

The golden file was written by the projection as it stood before the per-section builders
(one task/policy/cost builder for every line kind) replaced the per-role near-copies: the
refactor must not move a byte. Regenerate only for an intended change of output:

    .venv/bin/python -m tests.ledger.test_project_golden

Regenerated once since, for issue 15, each changed value traced to the reference backfill
(shared/seeds/003) and nothing else moved:

- ``cost.wall_s`` of the agent/supervisor lines is ``Math.round`` of the run's wall time
  (``wall_s = Math.round((Date.now() - t0) / 1000)``): 1000.25 → 1000, 2599.5 → 2600,
  7.5 → 8 (41.0 and 3 print the same);
- the supervisor line: ``cost.usd`` is the episode's receipt, the driver's spentUsd
  (2.25), not the worker sessions' sum (3.5, on the worker lines); ``recovered_tokens``
  is the episode total spent + worker tokens (777 + 12345), not the workers' alone;
  ``workers`` counts the journal's non-root spawns, unknown (null) with nothing ingested,
  not the matched sessions (3); ``cached`` is false (no result comes from a cache);
- worker lines follow the deduplicated ``workerCwds`` in first-seen order (/w/2, /w/1,
  /w/3), not the directories sorted;
- the store-unavailable supervisor cell that knew no worker cwd has no worker line (the
  phantom ``worker_cwd: null`` line is gone: no cwd, no line).
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from arenad.ledger import service
from arenad.ledger.service import project_store
from arenad.store.base import AppendRequest
from arenad.store.sqlite import SqliteEventStore
from events import capture as cap
from events import cell as ev
from events.base import Event
from events.specs import CellSpec, CommandArm, JudgeSpec
from tests.events.samples import make_spec
from tests.recovery.opencode_fixture import with_kept_fold

GOLDEN = Path(__file__).with_name("golden_cells.jsonl")
T0 = 1_700_000_000_000


def _clock() -> Callable[[], int]:
    state = {"t": T0}

    def tick() -> int:
        state["t"] += 1234
        return state["t"]

    return tick


def _session(
    sid: str,
    parent: str | None,
    cwd: str,
    purpose: str,
    texts: list[str],
    *,
    attempt: int = 1,
    model: str | None = '{"id":"glm-5","providerID":"zai"}',
    created: int = T0,
) -> cap.AgentSessionCaptured:
    row: dict[str, Any] = {
        "id": sid,
        "parent_id": parent,
        "directory": cwd,
        "agent": "build",
        "model": model,
        "time_created": created,
        "time_updated": created + 2500,
        "cost": 0.1 + 0.2,
        "tokens_input": 1000,
        "tokens_output": 200,
        "tokens_reasoning": 30,
        "tokens_cache_read": 4000,
        "tokens_cache_write": 0,
    }
    messages = []
    parts = []
    for i, text in enumerate(texts):
        mid = f"msg_{sid}_{i:02d}"
        role = "user" if i % 2 == 0 else "assistant"
        messages.append(
            cap.MessageRow(id=mid, time_created=created + i, data=json.dumps({"role": role}))
        )
        parts.append(
            cap.PartRow(
                id=f"prt_{sid}_{i:02d}_a",
                message_id=mid,
                data=json.dumps({"type": "text", "text": text}, ensure_ascii=False),
            )
        )
        if role == "assistant":
            parts.append(
                cap.PartRow(
                    id=f"prt_{sid}_{i:02d}_b",
                    message_id=mid,
                    data=json.dumps(
                        {
                            "type": "tool",
                            "callID": f"call_{i}",
                            "tool": "bash",
                            "state": {"input": {"cmd": "ls"}, "output": {"n": 1.0}},
                        }
                    ),
                )
            )
    return cap.AgentSessionCaptured(
        attempt=attempt,
        purpose=purpose,  # type: ignore[arg-type]
        store_path="/h/xdg/opencode.db",
        session_id=sid,
        parent_id=parent,
        directory=cwd,
        row=row,
        messages=messages,
        parts=parts,
        unreadable=["prt_bad"] if sid.endswith("x") else [],
    )


def _started(attempt: int) -> ev.RunStarted:
    return ev.RunStarted(
        attempt=attempt,
        argv=["x"],
        cwd="/",
        pid=1,
        pgid=1,
        started_at_ms=T0,
        deadline_ms=T0 + 1,
        timeout_s=1.0,
        kill_grace_s=1.0,
    )


def _materialized(attempt: int, run_dir: str) -> ev.CellMaterialized:
    return ev.CellMaterialized(
        attempt=attempt,
        run_dir=run_dir,
        workspace=f"{run_dir}/ws",
        head="0" * 40,
        clean=True,
        materializer="git",
    )


def _verified(attempt: int, run_dir: str, *, scored: bool = True) -> ev.CellVerified:
    return ev.CellVerified(
        attempt=attempt,
        scored=scored,
        not_scored_reason=None if scored else "timed out",
        patch_path=f"{run_dir}/p.patch",
        patch_lines=12,
        patch_sha256="ab" * 32,
        verify_rc=0 if scored else 124,
        verify_pass=scored,
    )


def _cells() -> list[tuple[CellSpec, list[Event], list[Event]]]:
    """(spec, cell stream events after CellSubmitted, capture/<cell>/1 events)."""
    solo = make_spec(instance_id="astropy__astropy-1", arm="SOLO")
    sd = "/h/campaigns/demo/rep-0/attempt-1/runs/astropy__astropy-1/SOLO"
    command = CellSpec(
        campaign="demo",
        instance=solo.instance,
        arm=CommandArm(name="CLI", argv=["agent", "{ws}"]),
        rep=1,
        materializer=solo.materializer,
        experiment_id="exp-7",
        judge=JudgeSpec(command="judge"),
    )
    cd = "/h/campaigns/demo/rep-1/attempt-1/runs/astropy__astropy-1/CLI"
    retried = make_spec(instance_id="django__django-2", arm="SOLO", rep=1)
    rd1 = "/h/campaigns/demo/rep-1/attempt-1/runs/django__django-2/SOLO"
    rd2 = "/h/campaigns/demo/rep-1/attempt-2/runs/django__django-2/SOLO"
    early = make_spec(instance_id="flask-3", arm="SOLO")
    sup = make_spec(instance_id="sympy__sympy-4", arm="SUP", supervisor=True)
    pd = "/h/campaigns/demo/rep-0/attempt-1/runs/sympy__sympy-4/SUP"
    sup2 = make_spec(instance_id="sympy__sympy-5", arm="SUP", supervisor=True)
    pd2 = "/h/campaigns/demo/rep-0/attempt-1/runs/sympy__sympy-5/SUP"
    empty = make_spec(instance_id="zz-6", arm="SOLO")
    ed = "/h/campaigns/demo/rep-0/attempt-1/runs/zz-6/SOLO"
    return [
        (
            solo,
            [
                _materialized(1, sd),
                _started(1),
                ev.ProvenanceRecorded(attempt=1, repo="/srv/agent", commit="c0ffee" * 6),
                ev.RunCompleted(attempt=1, rc=0, wall_s=41.0),
                _verified(1, sd),
                ev.JudgeVerdictRecorded(
                    attempt=1,
                    judge="swe-arena-official-judge",
                    verdict_json='{"resolved":true,"score":0.5,"note":"é"}',
                    resolved=True,
                    score=0.5,
                    source="command",
                ),
                ev.CellRecovered(
                    attempt=1,
                    store_available=True,
                    spend=ev.SpendFigures(
                        sessions=2,
                        tokens_in=2000,
                        tokens_out=400,
                        tokens_reasoning=60,
                        cache_read=8000,
                        cache_write=0,
                        cost_usd=0.6000000000000001,
                    ),
                ),
            ],
            [
                _session(
                    "ses_b_child", "ses_a_root", sd, "solo", ["sub", "done ✓"], created=T0 + 9
                ),
                _session("ses_a_root", None, sd, "solo", ["fix it", "fixed", "thanks"]),
            ],
        ),
        (
            command,
            [
                _materialized(1, cd),
                _started(1),
                ev.RunTimedOut(attempt=1, wall_s=1000.25),
                _verified(1, cd, scored=False),
                ev.JudgeVerdictRecorded(
                    attempt=1,
                    judge="j",
                    verdict_json="not json",
                    resolved=None,
                    score=None,
                ),
                ev.CellRecovered(
                    attempt=1,
                    store_available=False,
                    gap="no store",
                    spend=ev.SpendFigures(),
                ),
            ],
            [cap.AgentStoreUnavailable(attempt=1, store_path="/x/oc.db", error="no such file")],
        ),
        (
            retried,
            [
                _materialized(1, rd1),
                _started(1),
                ev.CellFailed(
                    attempt=1, stage="run", error="agent crashed", classification="agent"
                ),
                ev.CellRetried(attempt=2, reason="again"),
                _materialized(2, rd2),
                _started(2),
                ev.RunCompleted(attempt=2, rc=1, wall_s=3),
                _verified(2, rd2),
                ev.JudgeVerdictRecorded(
                    attempt=2,
                    judge="swe-arena-official-judge",
                    verdict_json='{"resolved":false}',
                    resolved=False,
                    score=None,
                ),
                ev.CellRecovered(attempt=2, store_available=True, spend=ev.SpendFigures()),
            ],
            [],
        ),
        (
            early,
            [
                ev.CellFailed(
                    attempt=1,
                    stage="materialize",
                    error="clone failed",
                    classification="infrastructure",
                )
            ],
            [],
        ),
        (
            sup,
            [
                _materialized(1, pd),
                _started(1),
                ev.RunCompleted(attempt=1, rc=0, wall_s=2599.5),
                _verified(1, pd),
                ev.SupervisorOutcome(
                    attempt=1,
                    sup_run_dir=f"{pd}/ws/.agent/supervisor/s1",
                    status="running",
                    verdict="no-winner",
                    delivered=False,
                    spent_tokens=None,
                    spent_usd=2.25,
                ),
                ev.JudgeVerdictRecorded(
                    attempt=1,
                    judge="swe-arena-official-judge",
                    verdict_json='{"resolved":false,"score":0}',
                    resolved=False,
                    score=0.0,
                ),
                ev.CellRecovered(
                    attempt=1,
                    store_available=True,
                    spend=ev.SpendFigures(
                        cost_usd=3.5,
                        worker_cwds=["/w/2", "/w/1", "/w/2", "/w/3"],
                        worker_sessions=3,
                        worker_tok_sqlite=12345,
                        spent_tokens=777,
                        spent_usd=9.0,
                    ),
                ),
            ],
            [
                _session("ses_w2", None, "/w/2", "worker", ["go", "went"], created=T0 + 5),
                _session("ses_w1x", None, "/w/1", "worker", ["a", "b", "c", "d"]),
                _session("ses_w1b", None, "/w/1", "worker", [], created=T0 + 1, model=None),
                cap.WorkerCwdUnmatched(attempt=1, cwd="/w/3"),
                cap.WorkerCwdUnmatched(attempt=1, cwd="/w/3"),
            ],
        ),
        (
            sup2,
            [
                _materialized(1, pd2),
                _started(1),
                ev.RunAborted(attempt=1, reason="operator", wall_s=None, rc=None),
                _verified(1, pd2, scored=False),
                ev.CellRecovered(attempt=1, store_available=False, spend=ev.SpendFigures()),
            ],
            [cap.AgentStoreUnavailable(attempt=1, store_path="/w/oc.db", error="locked")],
        ),
        (
            empty,
            [
                _materialized(1, ed),
                _started(1),
                ev.RunCompleted(attempt=1, rc=0, wall_s=7.5),
                _verified(1, ed),
                ev.CellRecovered(attempt=1, store_available=True, spend=ev.SpendFigures()),
            ],
            [_session("ses_e", None, ed, "solo", [])],
        ),
    ]


async def build_log(db: Path, *, kept: bool = False) -> None:
    """The log; ``kept``: the sessions carry the fold recovery keeps (else they are
    captures recorded before it was kept, and the projection folds their rows)."""
    store = await SqliteEventStore.open(db, clock=_clock())
    try:
        for spec, cell_events, captures in _cells():
            if kept:
                captures = [
                    with_kept_fold(c) if isinstance(c, cap.AgentSessionCaptured) else c
                    for c in captures
                ]
            requests = [
                AppendRequest(f"cell/{spec.cell_id}", 0, [ev.CellSubmitted(spec=spec)]),
            ]
            await store.append_many(requests)
            # One append per event: every event gets its own recorded time.
            for i, event in enumerate(cell_events):
                await store.append(f"cell/{spec.cell_id}", i + 1, [event])
            if captures:
                await store.append(f"capture/{spec.cell_id}/1", 0, captures)
    finally:
        await store.close()


async def project(db: Path, out: Path, jobs: int = 1) -> dict[str, Any]:
    store = await SqliteEventStore.open(db)
    try:
        return await project_store(store, out, run_id="golden-run", jobs=jobs)
    finally:
        await store.close()


# In one process, then shared with worker processes two cells a batch, so that every
# process projects several batches and their counts are summed: the same bytes. And the
# same bytes whether the captures kept their sessions' folds or the projection folds them.
@pytest.mark.parametrize("kept", [False, True], ids=["folded-here", "kept-at-capture"])
@pytest.mark.parametrize("jobs", [1, 2, 3])
def test_cell_lines_match_the_golden_bytes(
    tmp_path: Path, jobs: int, kept: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(service, "READ_BATCH_CELLS", 2)
    db, out = tmp_path / "events.db", tmp_path / "ledger.jsonl"
    asyncio.run(build_log(db, kept=kept))
    stats = asyncio.run(project(db, out, jobs))
    golden = GOLDEN.read_text(encoding="utf-8").split("\n", 1)
    assert json.loads(golden[0]) == stats
    assert out.read_text(encoding="utf-8") == golden[1]


def _regenerate(tmp: Path) -> None:
    db, out = tmp / "events.db", tmp / "ledger.jsonl"
    asyncio.run(build_log(db))
    stats = asyncio.run(project(db, out))
    # First line: the stats object; then the ledger's bytes.
    GOLDEN.write_text(json.dumps(stats) + "\n" + out.read_text(encoding="utf-8"), "utf-8")


if __name__ == "__main__":
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        _regenerate(Path(d))
    sys.stdout.write(f"wrote {GOLDEN}\n")
