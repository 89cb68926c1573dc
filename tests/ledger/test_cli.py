"""The ledger commands as a user runs them: the real CLI in a subprocess, a real home."""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import sys
from pathlib import Path

from arenad.home import Home, open_store
from arenad.proposer.layout import claude_project_slug
from arenad.store.base import AppendRequest
from events import cell as ev
from tests.events.samples import make_spec
from tests.ledger.test_project import _run_events, _session
from tests.ledger.test_proposer import RECEIPT, _entries

ARENAD = str(Path(sys.executable).parent / "arenad")


def arenad(home: Path, *args: str, ok: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [ARENAD, "--home", str(home), *args], capture_output=True, text=True, timeout=120
    )
    if ok:
        assert done.returncode == 0, done.stderr
    return done


async def build_campaign(home: Path) -> None:
    """A solo and a supervisor cell, appended through the home's store (transitions
    checked, so ``arenad rebuild`` folds them again), with their captures."""
    solo = make_spec(instance_id="bug-1", arm="SOLO")
    sup = make_spec(instance_id="bug-2", arm="SUP", supervisor=True)
    verdict = ev.JudgeVerdictRecorded(
        attempt=1, judge="official", verdict_json='{"resolved":true}', resolved=True, score=None
    )
    solo_run = _run_events(str(home / "runs" / "solo"), spend=ev.SpendFigures(tokens_in=5))
    sup_run = _run_events(str(home / "runs" / "sup"), spend=ev.SpendFigures(worker_cwds=["/w"]))
    outcome = ev.SupervisorOutcome(
        attempt=1,
        sup_run_dir=None,
        status="done",
        verdict="winner",
        delivered=True,
        spent_tokens=9,
        spent_usd=0.5,
    )
    async with open_store(Home(home)) as store:
        await store.append_many(
            [
                AppendRequest(
                    f"cell/{solo.cell_id}",
                    0,
                    [ev.CellSubmitted(spec=solo), *solo_run[:4], verdict, solo_run[4]],
                ),
                AppendRequest(
                    f"capture/{solo.cell_id}/1",
                    0,
                    [_session("ses_1", None, "/s", "solo", ["fix", "fixed"])],
                ),
                AppendRequest(
                    f"cell/{sup.cell_id}",
                    0,
                    [ev.CellSubmitted(spec=sup), *sup_run[:3], outcome, *sup_run[3:]],
                ),
                AppendRequest(
                    f"capture/{sup.cell_id}/1",
                    0,
                    [_session("ses_w", None, "/w", "worker", ["work", "done"])],
                ),
            ]
        )


def test_ledger_survives_rebuild_and_the_loss_of_every_file(tmp_path: Path) -> None:
    home = tmp_path / "home"
    claude = tmp_path / "claude"
    arenad(home, "init")
    asyncio.run(build_campaign(home))
    shots = home / "proposer-shots" / "alice"
    shots.mkdir(parents=True)
    (shots / "gen0-cand1-shot1.json").write_text(json.dumps({"receipt": RECEIPT}))
    project = claude / claude_project_slug(str(home.resolve() / "proposer-wt/gen0-cand1-alice"))
    project.mkdir(parents=True)
    (project / "s.jsonl").write_text(_entries("2026-08-22T10:00:01.000Z", "m"))
    # The run dirs with the agents' opencode stores, as a campaign leaves them.
    for run in ("solo", "sup"):
        store_dir = home / "runs" / run / "xdg" / "data" / "opencode"
        store_dir.mkdir(parents=True)
        (store_dir / "opencode.db").write_bytes(b"SQLite format 3\x00")

    captured = arenad(home, "capture-proposer-shots", "--claude-projects-dir", str(claude))
    assert captured.stdout.startswith("1 receipt(s), 1 transcript(s) captured")
    again = arenad(home, "capture-proposer-shots", "--claude-projects-dir", str(claude))
    assert again.stdout.startswith("0 receipt(s), 0 transcript(s)")

    first, second, third = tmp_path / "1.jsonl", tmp_path / "2.jsonl", tmp_path / "3.jsonl"
    stats = json.loads(arenad(home, "project-ledger", str(first)).stdout)
    assert stats["byRole"] == {"agent": 1, "supervisor": 1, "worker": 1, "proposer": 1}
    assert stats["proposerShotsJoined"] == 1 and stats["rewardLabeled"] == 1
    arenad(home, "rebuild")
    arenad(home, "project-ledger", str(second))
    shutil.rmtree(home / "runs")
    shutil.rmtree(home / "proposer-shots")
    shutil.rmtree(claude)
    arenad(home, "project-ledger", str(third))
    # --jobs: here one batch, so one process (tests/ledger/test_workers.py shares
    # ledgers with workers).
    fourth = tmp_path / "4.jsonl"
    arenad(home, "project-ledger", str(fourth), "--jobs", "2")
    assert first.read_bytes() == second.read_bytes() == third.read_bytes() == fourth.read_bytes()


def test_an_invalid_line_exits_non_zero_naming_the_cell(tmp_path: Path) -> None:
    home = tmp_path / "home"
    arenad(home, "init")
    out = tmp_path / "ledger.jsonl"
    arenad(home, "project-ledger", str(out))
    assert out.read_bytes() == b""

    async def add_bad_cell() -> str:
        # An empty instance id is a legal spec but breaks the schema (task.instance_id).
        spec = make_spec(instance_id="")
        async with open_store(Home(home)) as store:
            await store.append(
                f"cell/{spec.cell_id}",
                0,
                [
                    ev.CellSubmitted(spec=spec),
                    ev.CellMaterialized(
                        attempt=1,
                        run_dir="/r",
                        workspace="/r/ws",
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
                        started_at_ms=1,
                        deadline_ms=2,
                        timeout_s=1.0,
                        kill_grace_s=1.0,
                    ),
                    ev.CellFailed(attempt=1, stage="run", error="x", classification="agent"),
                ],
            )
        return spec.cell_id

    cell_id = asyncio.run(add_bad_cell())
    done = arenad(home, "project-ledger", str(out), ok=False)
    assert done.returncode == 1
    assert f"cell {cell_id} attempt 1 agent line" in done.stderr
    assert "task.instance_id" in done.stderr
    assert out.read_bytes() == b""  # the ledger it would have replaced is untouched


def test_record_verdict_labels_the_reward_and_refuses_what_it_cannot_record(
    tmp_path: Path,
) -> None:
    home = tmp_path / "home"
    arenad(home, "init")
    asyncio.run(build_campaign(home))
    waiting = make_spec(instance_id="bug-3")

    async def submit_only() -> None:
        async with open_store(Home(home)) as store:
            await store.append(f"cell/{waiting.cell_id}", 0, [ev.CellSubmitted(spec=waiting)])

    asyncio.run(submit_only())
    sup = make_spec(instance_id="bug-2", arm="SUP", supervisor=True).cell_id
    verdict = tmp_path / "judge.json"
    verdict.write_text('{"resolved": false, "score": 0.25, "judge": "op"}')
    assert arenad(home, "record-verdict", sup, str(verdict)).stdout == (
        f"verdict recorded for {sup} attempt 1\n"
    )
    out = tmp_path / "ledger.jsonl"
    arenad(home, "project-ledger", str(out))
    lines = [json.loads(x) for x in out.read_text().splitlines()]
    (sup_line,) = [x for x in lines if x["role"] == "supervisor"]
    (worker,) = [x for x in lines if x["role"] == "worker"]
    assert sup_line["outcome"]["reward"] == 0.25 and sup_line["outcome"]["reward_source"] == "op"
    assert sup_line["outcome"]["verdict"] == {"resolved": False, "score": 0.25, "judge": "op"}
    assert worker["outcome"]["reward"] == 0.25
    assert worker["outcome"]["reward_source"] == "op/inherited"

    early = arenad(home, "record-verdict", waiting.cell_id, str(verdict), ok=False)
    assert early.returncode == 2
    assert f"{waiting.cell_id} is submitted (attempt 1)" in early.stderr
    verdict.write_text('{"resolved": "yes"}')
    bad = arenad(home, "record-verdict", sup, str(verdict), ok=False)
    assert bad.returncode == 2 and "'resolved' must be true, false or null" in bad.stderr
    unknown = arenad(home, "record-verdict", "demo:nope:SOLO:0", str(tmp_path), ok=False)
    assert unknown.returncode == 2


def test_project_ledger_of_one_campaign(tmp_path: Path) -> None:
    home = tmp_path / "home"
    arenad(home, "init")
    asyncio.run(build_campaign(home))
    whole, one = tmp_path / "all.jsonl", tmp_path / "one.jsonl"
    arenad(home, "project-ledger", str(whole))
    stats = json.loads(arenad(home, "project-ledger", str(one), "--campaign", "demo").stdout)
    assert stats["lines"] == 3 and one.read_bytes() == whole.read_bytes()
    missing = arenad(home, "project-ledger", str(one), "--campaign", "nope", ok=False)
    assert missing.returncode == 2
    assert missing.stderr.strip().splitlines()[-1].endswith("no such campaign: nope")
    assert one.read_bytes() == whole.read_bytes()  # nothing replaced
