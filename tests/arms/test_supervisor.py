"""The supervisor arm through a real `arenad daemon` subprocess, with the stand-in driver
(tests/fakes/supervisor-driver): live ingestion, derived figures, failure paths."""

from __future__ import annotations

import base64
import json
import sys
from pathlib import Path

import pytest

from arenad.arms import supervisor_figures as figures
from events import cell as ev
from events.base import Event
from events.capture import WorkerCwdUnmatched
from events.ingest import (
    FileSnapshotted,
    FileTruncated,
    IngestionClosed,
    LineIngested,
    LineMalformed,
)
from tests.conftest import make_repo
from tests.daemon.support import cli, env_with, read_all, start_daemon

DRIVER = Path(__file__).resolve().parents[1] / "fakes" / "supervisor-driver"
CELL = "sup:i1:SUP:0"


def _campaign(tmp_path: Path, *, timeout_s: float = 60, knobs: str = "") -> Path:
    repo = tmp_path / "repo"
    base = make_repo(repo, {"a.txt": "a\n"})
    loops = tmp_path / "loops"
    make_repo(loops, {"README": "loops\n"})
    driver = json.dumps([sys.executable, str(DRIVER), "{ws}", "{params}"])
    text = f"""name = "sup"
split = "dev"
[materializer]
kind = "git"
source = {json.dumps(str(repo))}
[[instances]]
instance_id = "i1"
base_commit = "{base}"
problem_statement = "do the thing"
verify_cmd = "true"
[[arms]]
name = "SUP"
kind = "supervisor"
worker_model = "scripted/w"
driver_model = "scripted/d"
timeout_s = {timeout_s}
loops_repo = {json.dumps(str(loops))}
driver_cmd = {driver}
env_knobs = {{ DRIVER_CANCEL_TIMEOUT_MS = "1000"{knobs} }}
"""
    path = tmp_path / "c.toml"
    path.write_text(text)
    return path


def _run(
    tmp_path: Path, mode: str, *, timeout_s: float = 60
) -> tuple[Path, list[Event], list[Event]]:
    home = tmp_path / "home"
    camp = _campaign(tmp_path, timeout_s=timeout_s)
    assert cli(home, "init").returncode == 0
    out = cli(home, "submit", str(camp))
    assert out.returncode == 0, out.stderr
    env = env_with(FAKE_SUP_MODE=mode, FAKE_SUP_PAUSE="0.2")
    daemon = start_daemon(home, "--until-idle", env=env, stderr=tmp_path / "daemon.err")
    try:
        assert daemon.wait(timeout=120) == 0, (tmp_path / "daemon.err").read_text()
    finally:
        if daemon.poll() is None:
            daemon.kill()
            daemon.wait()
    records = read_all(home)
    cell = [r.event for r in records if r.stream == f"cell/{CELL}"]
    ingest = [r.event for r in records if r.stream == f"ingest/{CELL}/1"]
    return home, cell, ingest


def _one(events: list[Event], kind: type) -> Event:
    found = [e for e in events if isinstance(e, kind)]
    assert len(found) == 1, (kind, found)
    return found[0]


def _file_bytes(ingest: list[Event], source: str, path: str) -> bytes:
    out = b""
    for e in ingest:
        if isinstance(e, (LineIngested, LineMalformed)) and (e.source, e.path) == (source, path):
            raw = base64.b64decode(e.raw) if e.encoding == "base64" else e.raw.encode()
            out += raw + (b"" if e.partial else b"\n")
    return out


def test_completed_run_ingests_every_line_and_scores(tmp_path: Path) -> None:
    _home, cell, ingest = _run(tmp_path, "ok")
    started = _one(cell, ev.RunStarted)
    prov = _one(cell, ev.ProvenanceRecorded)
    assert cell.index(prov) < cell.index(started)
    assert len(prov.commit) == 40  # type: ignore[attr-defined]
    assert _one(cell, ev.RunCompleted).rc == 0  # type: ignore[attr-defined]
    outcome = _one(cell, ev.SupervisorOutcome)
    assert outcome.status == "completed" and outcome.delivered is True  # type: ignore[attr-defined]
    assert _one(cell, ev.CellVerified).scored is True  # type: ignore[attr-defined]
    run_dir = Path(started.stdout_path).parent  # type: ignore[attr-defined]
    sup = run_dir / "ws" / ".loops" / "supervisor" / "sup-1"
    for rel in ("journal.jsonl", "workers/w1.ndjson", "workers/w2.ndjson", "progress.ndjson"):
        assert _file_bytes(ingest, "supervisor", rel) == (sup / rel).read_bytes(), rel
    assert _file_bytes(ingest, "brain", "brain.jsonl") == (run_dir / "brain.jsonl").read_bytes()
    assert not any(getattr(e, "path", "").endswith(".inbox.ndjson") for e in ingest)
    snaps = [e for e in ingest if isinstance(e, FileSnapshotted)]
    assert json.loads(snaps[-1].content)["status"] == "completed"
    assert isinstance(ingest[-1], IngestionClosed)
    summary = figures.summarize(ingest)
    assert (summary.spawned, summary.workers, summary.settled) == (3, 2, 2)
    assert summary.subtasks == ["w1", "w2"]
    ws = run_dir / "ws"
    clones = [str(ws / ".loops" / "clones" / w) for w in ("w1", "w2")]
    assert figures.worker_cwds(ingest) == clones
    assert figures.worker_tok_journal(ingest) == 30
    recovered = _one(cell, ev.CellRecovered)
    spend = recovered.spend  # type: ignore[attr-defined]
    assert spend.worker_cwds == clones and spend.worker_tok_journal == 30
    result = json.loads((run_dir / "result.json").read_text())
    assert result["sup_status"] == "completed" and result["workers"] == 2
    assert result["driver_rc"] == 0 and "ws" not in result
    params = json.loads((run_dir / "params.json").read_text())
    assert params["budget"] == 40 and params["workspaceDir"] == str(ws)


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


def test_hang_times_out_and_still_recovers(tmp_path: Path) -> None:
    _home, cell, ingest = _run(tmp_path, "hang", timeout_s=4)
    _one(cell, ev.RunTimedOut)
    assert _one(cell, ev.CellVerified).scored is False  # type: ignore[attr-defined]
    spend = _one(cell, ev.CellRecovered).spend  # type: ignore[attr-defined]
    assert spend.worker_tok_journal == 30 and len(spend.worker_cwds) == 2
    assert isinstance(ingest[-1], IngestionClosed)


def test_malformed_line(tmp_path: Path) -> None:
    _home, _cell, ingest = _run(tmp_path, "malformed")
    bad = [e for e in ingest if isinstance(e, LineMalformed)]
    assert [(b.path, b.raw) for b in bad] == [("journal.jsonl", "{not json")]


def test_truncated_file(tmp_path: Path) -> None:
    _home, cell, ingest = _run(tmp_path, "truncate")
    trunc = [e for e in ingest if isinstance(e, FileTruncated)]
    assert [t.path for t in trunc] == ["progress.ndjson"]
    after = [e for e in ingest if isinstance(e, LineIngested) and e.path == "progress.ndjson"]
    assert "after truncation" in after[-1].raw and after[-1].offset == 0
    assert not any(isinstance(e, WorkerCwdUnmatched) for e in cell)
