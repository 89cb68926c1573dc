"""The supervisor arm through a real `arenad daemon` subprocess, with the stand-in driver
(tests/fakes/supervisor-driver): live ingestion, derived figures, failure paths."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from arenad.arms import supervisor_figures as figures
from arenad.arms.supervisor import STORE_INIT_FAILED
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
    submit,
    supervisor_campaign,
    supervisor_files,
)
from tests.conftest import make_repo
from tests.daemon.support import env_with

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
    submit(home, camp)
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
    assert spend.worker_cwds == clones and spend.worker_tok_journal == 30
    result = json.loads((run_dir / "result.json").read_text())
    assert result["sup_status"] == "completed" and result["workers"] == 2
    assert result["driver_rc"] == 0 and "ws" not in result
    params = json.loads((run_dir / "params.json").read_text())
    assert params["budget"] == 40 and params["workspaceDir"] == str(ws)


def test_a_store_init_that_fails_is_reported_and_the_driver_still_runs(tmp_path: Path) -> None:
    _home, cell, _ingest = _run(tmp_path, "ok", opencode_bin=tmp_path / "no-such-opencode")
    assert _one(cell, ev.RunCompleted).rc == 0  # type: ignore[attr-defined]
    assert _one(cell, ev.CellVerified).scored is True  # type: ignore[attr-defined]
    run_dir = Path(_one(cell, ev.RunStarted).stdout_path).parent  # type: ignore[attr-defined]
    err = (run_dir / "driver.err").read_text()
    assert f"{STORE_INIT_FAILED} (exit 127)" in err
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
