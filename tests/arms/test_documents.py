"""The run-dir documents as projections of the log: bytes from the attempts fold alone, JS
numbers, whether the run counts, which attempt they are of, and atomic writes into real
directories."""

from __future__ import annotations

import json
import os
from pathlib import Path

from arenad.arms.documents import (
    JUDGE_JSON,
    RESULT_JSON,
    document_streams,
    documented_attempt,
    has_result_json,
    result_json,
    result_json_bytes,
    run_documents,
    write_documents_step,
)
from arenad.cell.attempts import Attempt
from arenad.cell.kinds import kind_of_arm
from arenad.cell.machine import CellStatus, fold
from arenad.runs.executor import Tools
from events import cell as ev
from events.base import Event, Recorded
from events.ingest import FileSnapshotted
from events.specs import CellSpec
from events.streams import ingest_stream
from tests.events.samples import make_spec, sample

TOOLS = Tools()


SUP = make_spec(arm="SUP", supervisor=True)


def _events(*, wall_s: float = 2.5, scored: bool = True, judged: bool = False) -> list[Event]:
    events: list[Event] = [
        ev.CellSubmitted(spec=SUP, attempt=1, spec_sha256="ab" * 32),
        sample(ev.CellMaterialized),
        sample(ev.ProvenanceRecorded),
        sample(ev.RunStarted),
        ev.RunCompleted(attempt=1, rc=0, wall_s=wall_s),
        ev.CellVerified(
            attempt=1,
            scored=scored,
            not_scored_reason=None if scored else "supervisor state is failed",
            patch_path="/h/p.patch",
            patch_lines=3,
            patch_sha256="cd" * 32,
            verify_rc=0,
            verify_pass=True,
            verify_log="/h/verify.log",
        ),
        ev.CellRecovered(attempt=1, store_available=False, spend=ev.SpendFigures()),
    ]
    if judged:
        events.append(
            ev.JudgeVerdictRecorded(
                attempt=1, judge="j", verdict_json='{"resolved": true}\n', resolved=True, score=1.0
            )
        )
    return events


def _records(events: list[Event], spec: CellSpec = SUP) -> list[Recorded]:
    stream = f"cell/{spec.cell_id}"
    return [Recorded(i, stream, i, "x", 1, 1000 + i, e) for i, e in enumerate(events, 1)]


def _attempt(
    *, wall_s: float = 2.5, scored: bool = True, judged: bool = False
) -> tuple[CellSpec, Attempt]:
    found = documented_attempt(_records(_events(wall_s=wall_s, scored=scored, judged=judged)), 1)
    assert found is not None
    return found


def test_result_json_rounds_like_math_round_and_says_whether_it_counts() -> None:
    doc = result_json(*_attempt(wall_s=2.5))
    assert doc["wall_s"] == 3  # Python's round(2.5) is 2
    assert doc["scored"] is True and doc["not_scored_reason"] is None
    unscored = result_json(*_attempt(scored=False))
    assert unscored["scored"] is False
    assert unscored["not_scored_reason"] == "supervisor state is failed"


def test_result_json_bytes_are_json_stringify_with_indent_1() -> None:
    spec, attempt = _attempt()
    data = result_json_bytes(spec, attempt)
    assert data == result_json_bytes(spec, attempt)  # same log, same bytes
    text = data.decode()
    assert text.startswith('{\n "arm": "SUP",\n "iid": "bug-1",\n "driver_rc": 0,\n "wall_s": 3,')
    assert not text.endswith("\n")  # JSON.stringify adds no newline
    assert json.loads(text) == result_json(spec, attempt)


def test_run_documents_name_result_and_the_verdict_verbatim() -> None:
    docs = run_documents(*_attempt(judged=True))
    assert set(docs) == {RESULT_JSON, JUDGE_JSON}
    assert docs[JUDGE_JSON] == b'{"resolved": true}\n'
    solo_spec = make_spec()
    submitted: Event = ev.CellSubmitted(spec=solo_spec, attempt=1, spec_sha256="ab" * 32)
    solo = documented_attempt(_records([submitted], solo_spec), 1)
    assert solo is not None and run_documents(*solo) == {}


def test_documents_are_written_atomically_into_a_run_dir_made_again(tmp_path: Path) -> None:
    run_dir = tmp_path / "gone" / "run"
    assert not run_dir.exists()
    written = write_documents_step(TOOLS, str(run_dir), {RESULT_JSON: b"{}"})
    assert written == [str(run_dir / RESULT_JSON)]
    assert (run_dir / RESULT_JSON).read_bytes() == b"{}"
    assert os.listdir(run_dir) == [RESULT_JSON]  # no temporary left behind
    assert (run_dir / RESULT_JSON).stat().st_mode & 0o777 == 0o644
    write_documents_step(TOOLS, str(run_dir), {RESULT_JSON: b"[]"})  # replaced whole
    assert (run_dir / RESULT_JSON).read_bytes() == b"[]" and os.listdir(run_dir) == [RESULT_JSON]


def _snapshot(status: str) -> FileSnapshotted:
    content = json.dumps({"status": status, "verdict": "ok", "result": {"spentTokens": 8}})
    return FileSnapshotted(
        source="supervisor", path="state.json", content=content, sha256="ef" * 32, size=1
    )


def test_result_json_folds_the_attempt_s_journal_from_its_ingest_stream() -> None:
    # No SupervisorOutcome recorded: the journal's state.json is read, from the streams
    # document_streams names (the cell's and the attempt's ingest stream), in any order.
    streams = document_streams(SUP.cell_id, 1, kind_of_arm(SUP.arm))
    assert streams == [f"cell/{SUP.cell_id}", ingest_stream(SUP.cell_id, 1)]
    cell = _records(_events())
    ingest = [
        Recorded(100 + i, streams[1], i, "x", 1, 2000, _snapshot(s))
        for i, s in enumerate(("running", "completed"))
    ]
    found = documented_attempt([*reversed(ingest), *reversed(cell)], 1)
    assert found is not None
    doc = result_json(*found)
    assert (doc["sup_status"], doc["sup_verdict"], doc["spentTokens"]) == ("completed", "ok", 8)
    assert result_json_bytes(*found) == result_json_bytes(*_found(cell + ingest))
    # A kind without result.json reads no ingest stream for its documents.
    solo = make_spec()
    assert document_streams(solo.cell_id, 1, kind_of_arm(solo.arm)) == [f"cell/{solo.cell_id}"]


def _found(records: list[Recorded], n: int = 1) -> tuple[CellSpec, Attempt]:
    found = documented_attempt(records, n)
    assert found is not None
    return found


def test_result_json_is_had_exactly_when_the_machine_says_recovered() -> None:
    # After every event of a recovered run, of an interrupted run whose spend was
    # recovered before it failed, and of a retried cell: the fold's attempt has a
    # result.json exactly when the cell machine's current attempt is recovered.
    interrupted: list[Event] = [
        *_events()[:4],
        ev.RunAborted(attempt=1, rc=130, wall_s=1.0, reason="abort", cause="operator"),
        ev.CellRecovered(attempt=1, store_available=False, spend=ev.SpendFigures()),
        ev.CellFailed(
            attempt=1,
            stage="interrupted",
            error="run interrupted by the operator",
            classification="operator",
        ),
    ]
    retried: list[Event] = [
        *_events(judged=True),
        ev.CellRetried(attempt=2, reason="again"),
        sample(ev.CellMaterialized, 2),
        sample(ev.RunStarted, 2),
    ]
    for events in (_events(judged=True), interrupted, retried):
        for end in range(1, len(events) + 1):
            records = _records(events[:end])
            state = fold(records)
            assert state is not None
            spec, attempt = _found(records, state.attempt)
            expected = state.status == CellStatus.RECOVERED
            assert has_result_json(spec, attempt) is expected, (end, state.status)
            # judge.json: the current attempt's verdict only (a retry's attempt has none).
            docs = run_documents(spec, attempt)
            assert (JUDGE_JSON in docs) is (state.verdict is not None), (end, state.status)
