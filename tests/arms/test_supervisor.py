"""The supervisor arm through a real `arenad daemon` subprocess, with the stand-in driver
(tests/fakes/supervisor-driver): live ingestion, derived figures, failure paths."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from arenad.arms import ArmContext, arm_for
from arenad.arms.documents import documented_attempt, result_json_bytes
from arenad.arms.supervisor import STORE_INIT_FAILED, join_driver_log_step
from arenad.campaign import load_campaign
from arenad.cell import supervisor_figures as figures
from arenad.gateway import process as gateway_process
from arenad.js import js_stringify_indented
from arenad.runs.executor import Tools
from arenad.sandbox.cellenv import cell_paths
from events import cell as ev
from events.base import Event
from events.ingest import (
    FileSnapshotted,
    FileTruncated,
    LineIngested,
    LineMalformed,
)
from tests.arms.support import (
    SUP_RUN,
    assert_closed_once,
    assert_files_ingested_exactly,
    daemon_until_idle,
    live_group_members,
    stream_events,
    supervisor_campaign,
    supervisor_files,
)
from tests.conftest import make_repo
from tests.daemon.support import env_with, read_all, submitted

CELL = "sup:i1:SUP:0"


def _run(
    tmp_path: Path, mode: str, *, timeout_s: float = 60, opencode_bin: Path | None = None
) -> tuple[Path, list[Event], list[Event]]:
    home = tmp_path / "home"
    repo = tmp_path / "repo"
    base = make_repo(repo, {"a.txt": "a\n"})
    loops = tmp_path / "loops"
    make_repo(loops, {"README": "loops\n"})
    camp = supervisor_campaign(
        tmp_path / "c.toml",
        name="sup",
        repo=repo,
        base=base,
        loops=loops,
        timeout_s=timeout_s,
        opencode_bin=opencode_bin,
    )
    submitted(home, camp)
    env = env_with(FAKE_SUP_MODE=mode, FAKE_SUP_PAUSE="0.2")
    records = daemon_until_idle(home, env, tmp_path / "daemon.err")
    return home, stream_events(records, f"cell/{CELL}"), stream_events(records, f"ingest/{CELL}/1")


def _one(events: list[Event], kind: type) -> Event:
    found = [e for e in events if isinstance(e, kind)]
    assert len(found) == 1, (kind, found)
    return found[0]


def test_completed_run_ingests_every_line_and_scores(tmp_path: Path) -> None:
    _home, cell, ingest = _run(tmp_path, "ok")
    started = _one(cell, ev.RunStarted)
    prov = _one(cell, ev.ProvenanceRecorded)
    assert cell.index(prov) < cell.index(started)
    assert len(prov.commit) == 40  # type: ignore[attr-defined]
    assert _one(cell, ev.RunCompleted).rc == 0  # type: ignore[attr-defined]
    outcome = _one(cell, ev.SupervisorOutcome)
    assert outcome.status == "completed" and outcome.delivered is True  # type: ignore[attr-defined]
    # The journal's counts, recorded at run end (the projection prefers them).
    assert (outcome.spawned, outcome.workers, outcome.settled) == (3, 2, 3)  # type: ignore[attr-defined]
    assert outcome.subtasks == ["w1", "w2"]  # type: ignore[attr-defined]
    assert _one(cell, ev.CellVerified).scored is True  # type: ignore[attr-defined]
    run_dir = Path(started.stdout_path).parent  # type: ignore[attr-defined]
    sup = run_dir / "ws" / SUP_RUN
    assert supervisor_files(sup) == [
        "journal.jsonl",
        "progress.ndjson",
        "workers/w1.ndjson",
        "workers/w2.ndjson",
    ]
    assert_files_ingested_exactly(ingest, sup, run_dir / "brain.jsonl")
    assert_closed_once(ingest, sup, run_dir / "brain.jsonl")
    assert not any(getattr(e, "path", "").endswith(".inbox.ndjson") for e in ingest)
    snaps = [e for e in ingest if isinstance(e, FileSnapshotted)]
    assert json.loads(snaps[-1].content)["status"] == "completed"
    summary = figures.summarize(ingest)
    assert (summary.spawned, summary.workers, summary.settled) == (3, 2, 3)
    assert summary.subtasks == ["w1", "w2"]
    ws = run_dir / "ws"
    clones = [str(ws / ".loops" / "clones" / w) for w in ("w1", "w2")]
    # First-seen order: the two workers start together, either may be ingested first.
    assert sorted(figures.worker_cwds(ingest)) == clones
    assert figures.worker_tok_journal(ingest) == 30
    recovered = _one(cell, ev.CellRecovered)
    spend = recovered.spend  # type: ignore[attr-defined]
    assert sorted(spend.worker_cwds) == clones and spend.worker_tok_journal == 30
    result = json.loads((run_dir / "result.json").read_text())
    assert result["sup_status"] == "completed" and result["workers"] == 2
    assert result["driver_rc"] == 0 and "ws" not in result
    params_text = (run_dir / "params.json").read_text()
    params = json.loads(params_text)
    assert params["budget"] == 40 and params["workspaceDir"] == str(ws)
    # JSON.stringify(params, null, 1): JS numbers, one-space indent, no trailing newline.
    assert params_text == js_stringify_indented(params, 1)
    assert '\n "maxUsd": 8,\n' in params_text and not params_text.endswith("\n")


def test_a_store_init_that_fails_is_reported_and_the_driver_still_runs(tmp_path: Path) -> None:
    _home, cell, _ingest = _run(tmp_path, "ok", opencode_bin=tmp_path / "no-such-opencode")
    assert _one(cell, ev.RunCompleted).rc == 0  # type: ignore[attr-defined]
    assert _one(cell, ev.CellVerified).scored is True  # type: ignore[attr-defined]
    run_dir = Path(_one(cell, ev.RunStarted).stdout_path).parent  # type: ignore[attr-defined]
    err = (run_dir / "driver.err").read_text()
    assert f"{STORE_INIT_FAILED} (exit 127)" in err
    # The reference's one driver.log: stdout then stderr, joined once the run ended.
    out = (run_dir / "driver.out").read_bytes()
    assert (run_dir / "driver.log").read_bytes() == out + err.encode()
    # Nothing created the store (the stand-in's workers here run no opencode): a gap.
    assert _one(cell, ev.CellRecovered).store_available is False  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("mode", "reason"),
    [("exit1", "driver exited 1"), ("failed", "supervisor state is failed")],
)
def test_not_scored(tmp_path: Path, mode: str, reason: str) -> None:
    _home, cell, _ingest = _run(tmp_path, mode)
    verified = _one(cell, ev.CellVerified)
    assert verified.scored is False  # type: ignore[attr-defined]
    assert reason in (verified.not_scored_reason or "")  # type: ignore[attr-defined]
    _one(cell, ev.CellRecovered)


def test_hang_times_out_kills_the_group_and_still_recovers(tmp_path: Path) -> None:
    _home, cell, ingest = _run(tmp_path, "hang", timeout_s=4)
    timed_out = _one(cell, ev.RunTimedOut)
    assert timed_out.rc == 124  # type: ignore[attr-defined]
    started = _one(cell, ev.RunStarted)
    # The whole process group is gone, not just the driver.
    assert live_group_members(started.pgid) == []  # type: ignore[attr-defined]
    verified = _one(cell, ev.CellVerified)
    assert verified.scored is False  # type: ignore[attr-defined]
    assert "timed out" in (verified.not_scored_reason or "")  # type: ignore[attr-defined]
    spend = _one(cell, ev.CellRecovered).spend  # type: ignore[attr-defined]
    assert spend.worker_tok_journal == 30 and len(spend.worker_cwds) == 2
    # The driver died mid-line: the trailing half line is ingested at run end, flagged partial.
    run_dir = Path(started.stdout_path).parent  # type: ignore[attr-defined]
    assert_files_ingested_exactly(ingest, run_dir / "ws" / SUP_RUN, run_dir / "brain.jsonl")
    partial = [e for e in ingest if isinstance(e, LineIngested | LineMalformed) and e.partial]
    assert [(e.path, e.raw) for e in partial] == [
        ("progress.ndjson", '{"kind":"progress","note":"never fin')
    ]
    assert isinstance(partial[0], LineMalformed)  # half a JSON object does not parse
    assert_closed_once(ingest, run_dir / "ws" / SUP_RUN, run_dir / "brain.jsonl")
    # state.json still says running: not completed, so never scored.
    assert _one(cell, ev.SupervisorOutcome).status == "running"  # type: ignore[attr-defined]


def test_malformed_line(tmp_path: Path) -> None:
    _home, cell, ingest = _run(tmp_path, "malformed")
    bad = [e for e in ingest if isinstance(e, LineMalformed)]
    assert [(b.path, b.raw) for b in bad] == [("journal.jsonl", "{not json")]
    # Recorded, not fatal: the run completes, the figures skip the line, nothing is lost.
    assert _one(cell, ev.CellVerified).scored is True  # type: ignore[attr-defined]
    summary = figures.summarize(ingest)
    assert (summary.spawned, summary.workers, summary.settled) == (3, 2, 3)
    run_dir = Path(_one(cell, ev.RunStarted).stdout_path).parent  # type: ignore[attr-defined]
    assert_files_ingested_exactly(ingest, run_dir / "ws" / SUP_RUN, run_dir / "brain.jsonl")


def test_truncated_file(tmp_path: Path) -> None:
    _home, cell, ingest = _run(tmp_path, "truncate")
    trunc = [e for e in ingest if isinstance(e, FileTruncated)]
    assert [(t.path, t.reason, t.new_size) for t in trunc] == [("progress.ndjson", "shrunk", 0)]
    after = [e for e in ingest if isinstance(e, LineIngested) and e.path == "progress.ndjson"]
    assert "after truncation" in after[-1].raw and after[-1].offset == 0
    # Everything before the truncation was ingested once; after it, the new content from 0.
    assert trunc[0].previous_offset == after[-2].offset + after[-2].length + 1
    run_dir = Path(_one(cell, ev.RunStarted).stdout_path).parent  # type: ignore[attr-defined]
    assert_files_ingested_exactly(ingest, run_dir / "ws" / SUP_RUN, run_dir / "brain.jsonl")
    assert _one(cell, ev.CellVerified).scored is True  # type: ignore[attr-defined]


def test_result_json_is_the_log_s_projection_and_a_restart_writes_it_again(
    tmp_path: Path,
) -> None:
    home, cell, ingest = _run(tmp_path, "ok")
    run_dir = Path(_one(cell, ev.RunStarted).stdout_path).parent  # type: ignore[attr-defined]
    original = (run_dir / "result.json").read_bytes()
    # What the runner wrote is the documents' projection of the attempts fold, from the log.
    streams = (f"cell/{CELL}", f"ingest/{CELL}/1")
    found = documented_attempt([r for r in read_all(home) if r.stream in streams], 1)
    assert found is not None
    assert original == result_json_bytes(*found)
    assert found[1].ingested is not None
    assert [r.event for r in found[1].ingested] == ingest
    doc = json.loads(original)
    assert doc["scored"] is True and doc["not_scored_reason"] is None
    assert isinstance(doc["wall_s"], int)
    # Lost (a daemon died after the recovery commit, or a user removed it): the next
    # daemon writes the same bytes from the log.
    (run_dir / "result.json").unlink()
    records = daemon_until_idle(home, env_with(), tmp_path / "daemon2.err")
    assert (run_dir / "result.json").read_bytes() == original
    assert stream_events(records, f"cell/{CELL}") == cell  # nothing appended to the cell


def test_an_unscored_run_s_result_json_says_so(tmp_path: Path) -> None:
    _home, cell, _ingest = _run(tmp_path, "failed")
    run_dir = Path(_one(cell, ev.RunStarted).stdout_path).parent  # type: ignore[attr-defined]
    doc = json.loads((run_dir / "result.json").read_text())
    assert doc["scored"] is False
    assert doc["not_scored_reason"] == "supervisor state is failed"


def test_driver_log_joins_stdout_then_stderr_idempotently(tmp_path: Path) -> None:
    (tmp_path / "driver.out").write_bytes(b"out 1\nout 2\n")
    (tmp_path / "driver.err").write_bytes(b"err \xff\n")
    join_driver_log_step(Tools(), str(tmp_path))
    join_driver_log_step(Tools(), str(tmp_path))  # a daemon that died before the end: again
    assert (tmp_path / "driver.log").read_bytes() == b"out 1\nout 2\nerr \xff\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["driver.err", "driver.log", "driver.out"]
    # A run an older arenad started wrote stdout to driver.log itself: left alone.
    old = tmp_path / "old"
    old.mkdir()
    (old / "driver.log").write_bytes(b"stdout only\n")
    (old / "driver.err").write_bytes(b"err\n")
    join_driver_log_step(Tools(), str(old))
    assert (old / "driver.log").read_bytes() == b"stdout only\n"


def test_an_unknown_provenance_fails_the_cell_and_launches_nothing(tmp_path: Path) -> None:
    home = tmp_path / "home"
    repo = tmp_path / "repo"
    base = make_repo(repo, {"a.txt": "a\n"})
    loops = tmp_path / "loops"  # a checkout that is not a git repository
    loops.mkdir()
    camp = supervisor_campaign(tmp_path / "c.toml", name="sup", repo=repo, base=base, loops=loops)
    submitted(home, camp)
    records = daemon_until_idle(home, env_with(FAKE_SUP_MODE="ok"), tmp_path / "daemon.err")
    cell = stream_events(records, f"cell/{CELL}")
    failed = _one(cell, ev.CellFailed)
    assert failed.stage == "provenance"  # type: ignore[attr-defined]
    assert failed.classification == "infrastructure"  # type: ignore[attr-defined]
    assert str(loops) in failed.error and "rev-parse" in failed.error  # type: ignore[attr-defined]
    assert not any(isinstance(e, (ev.RunStarted, ev.ProvenanceRecorded)) for e in cell)
    run_dir = Path(_one(cell, ev.CellMaterialized).run_dir)  # type: ignore[attr-defined]
    assert not (run_dir / "params.json").exists()  # not even the driver's inputs
    assert stream_events(records, f"ingest/{CELL}/1") == []


def test_prepare_removes_the_last_run_s_supervisor_state(tmp_path: Path) -> None:
    # The reference removes <ws>/.loops before a run; newer drivers keep the same state in
    # <ws>/.agent/supervisor: a rerun in the same workspace must read neither.
    repo, loops = tmp_path / "repo", tmp_path / "loops"
    base = make_repo(repo, {"a.txt": "a\n"})
    make_repo(loops, {"README": "loops\n"})
    camp = supervisor_campaign(tmp_path / "c.toml", name="sup", repo=repo, base=base, loops=loops)
    spec = load_campaign(camp).cells[0]
    run_dir, ws = tmp_path / "run", tmp_path / "run" / "ws"
    for stale in (".loops/supervisor/old/state.json", ".agent/supervisor/old/state.json"):
        (ws / stale).parent.mkdir(parents=True, exist_ok=True)
        (ws / stale).write_text("{}")
    (ws / ".agent" / "notes.md").write_text("the agent's own")
    ctx = ArmContext(
        spec=spec, cell_id=spec.cell_id, attempt=1, run_dir=run_dir, workspace=ws, env={}
    )
    arm_for(spec.arm).prepare(ctx)
    assert not (ws / ".loops").exists() and not (ws / ".agent" / "supervisor").exists()
    assert (ws / ".agent" / "notes.md").read_text() == "the agent's own"


@pytest.mark.parametrize(
    ("driver_model", "wrapped"), [("scripted/driver", False), ("elsewhere/driver", True)]
)
def test_with_the_gateway_the_workers_config_names_it_and_the_driver_when_its_provider_does(
    tmp_path: Path, driver_model: str, wrapped: bool
) -> None:
    """The cell's opencode config copy (which the workers inherit) names the gateway and
    the attempt's token; the driver loses the wrapper and the key variable only when its
    model's provider is one the config points (issue 31)."""
    repo, loops, home = tmp_path / "repo", tmp_path / "loops", tmp_path / "home"
    base = make_repo(repo, {"a.txt": "a\n"})
    make_repo(loops, {"README": "loops\n"})
    camp = supervisor_campaign(
        tmp_path / "c.toml",
        name="sup",
        repo=repo,
        base=base,
        loops=loops,
        driver_model=driver_model,
    )
    spec = load_campaign(camp).cells[0]
    assert spec.gateway.kind == "gateway"
    run_dir = tmp_path / "run"
    config_path = Path(cell_paths(run_dir).opencode_config)
    config_path.parent.mkdir(parents=True)
    provider = {"options": {"baseURL": "http://127.0.0.1:9/v1", "apiKey": "{env:SUP_KEY}"}}
    config_path.write_text(json.dumps({"provider": {"scripted": provider}}))
    env = {"SUP_KEY": "sk-never-in-the-cell", "PATH": "/usr/bin:/bin"}
    ctx = ArmContext(
        spec=spec,
        cell_id=spec.cell_id,
        attempt=1,
        run_dir=run_dir,
        workspace=run_dir / "ws",
        env=env,
        home_root=str(home),
    )
    try:
        command = arm_for(spec.arm).prepare(ctx)
        port = (home / "gateway" / "port").read_text().strip()
    finally:
        gateway_process.stop(home)
    options = json.loads(config_path.read_text())["provider"]["scripted"]["options"]
    assert options["baseURL"] == f"http://127.0.0.1:{port}/u/scripted/v1"
    assert options["apiKey"].startswith("agw-")
    assert command.uses_secrets is wrapped
    assert ("SUP_KEY" in command.env) is wrapped
    sources = [s.name for s in arm_for(spec.arm).watch_sources(ctx)]
    assert sources == ["supervisor", "brain", "gateway"]
