"""The run-dir documents as projections of the log: bytes from events alone, JS numbers,
whether the run counts, and atomic writes into real directories."""

from __future__ import annotations

import json
import os
from pathlib import Path

from arenad.arms.documents import (
    JUDGE_JSON,
    RESULT_JSON,
    result_json,
    result_json_bytes,
    run_documents,
    write_documents_step,
)
from arenad.cell.machine import CellState, fold
from arenad.runs.executor import Tools
from events import cell as ev
from events.base import Event
from tests.events.samples import make_spec, sample

TOOLS = Tools()


def _state(*, wall_s: float = 2.5, scored: bool = True, judged: bool = False) -> CellState:
    spec = make_spec(arm="SUP", supervisor=True)
    events: list[Event] = [
        ev.CellSubmitted(spec=spec, attempt=1, spec_sha256="ab" * 32),
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
    state = fold([(e, 1000 + i) for i, e in enumerate(events)])
    assert state is not None
    return state


def test_result_json_rounds_like_math_round_and_says_whether_it_counts() -> None:
    doc = result_json(_state(wall_s=2.5), [])
    assert doc["wall_s"] == 3  # Python's round(2.5) is 2
    assert doc["scored"] is True and doc["not_scored_reason"] is None
    unscored = result_json(_state(scored=False), [])
    assert unscored["scored"] is False
    assert unscored["not_scored_reason"] == "supervisor state is failed"


def test_result_json_bytes_are_json_stringify_with_indent_1() -> None:
    state = _state()
    data = result_json_bytes(state, [])
    assert data == result_json_bytes(state, [])  # same log, same bytes
    text = data.decode()
    assert text.startswith('{\n "arm": "SUP",\n "iid": "bug-1",\n "driver_rc": 0,\n "wall_s": 3,')
    assert not text.endswith("\n")  # JSON.stringify adds no newline
    assert json.loads(text) == result_json(state, [])


def test_run_documents_name_result_and_the_verdict_verbatim() -> None:
    docs = run_documents(_state(judged=True), [])
    assert set(docs) == {RESULT_JSON, JUDGE_JSON}
    assert docs[JUDGE_JSON] == b'{"resolved": true}\n'
    submitted: Event = ev.CellSubmitted(spec=make_spec(), attempt=1, spec_sha256="ab" * 32)
    solo = fold([(submitted, 1)])
    assert solo is not None and run_documents(solo, []) == {}


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
