"""The run-dir documents that are projections of the log, and their writing.

- ``result.json`` (supervisor cells, once recovered): the reference's SupervisorArmResult minus
  ``ws``, plus ``scored`` / ``not_scored_reason`` (the reference writes it only for a run that
  counted; arenad writes it for every recovered run, so it says whether it counts), in
  ``JSON.stringify(v, null, 1)`` bytes.
- ``judge.json``: the attempt's ``JudgeVerdictRecorded.verdict_json`` verbatim.

Each is a pure function of the cell's events (same log, same bytes), so a lost or
deleted document is written again from the log (the daemon at start, ``arenad
export-artifacts``); writing is atomic (temp file, fsync, rename).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from arenad.atomic import write_atomically
from arenad.cell import supervisor_figures as figures
from arenad.cell.kinds import kind_of_arm
from arenad.cell.machine import CellState, CellStatus
from arenad.js import js_round, js_stringify_indented
from arenad.runs.executor import Tools
from events import cell as ev
from events.base import Event, Recorded

RESULT_JSON = "result.json"
JUDGE_JSON = "judge.json"


def has_result_json(state: CellState) -> bool:
    """Whether the cell's current attempt has a result.json (a recovered supervisor run)."""
    return kind_of_arm(state.spec.arm).result_document and state.status == CellStatus.RECOVERED


def result_json(state: CellState, ingested: Sequence[Recorded | Event]) -> dict[str, Any]:
    """The reference's SupervisorArmResult (minus ``ws``) of a recovered attempt, from events,
    with whether it counts."""
    summary = figures.recorded_counts(state.supervisor) or figures.summarize(ingested)
    verified = state.verified
    prov = state.provenance
    recovered = state.recovered
    sp = recovered.spend if recovered is not None else ev.SpendFigures()
    return {
        "arm": state.spec.arm.name,
        "iid": state.spec.instance.instance_id,
        "driver_rc": state.run_rc,
        # The reference's Math.round (halves up), not Python's round (halves to even).
        "wall_s": js_round(state.wall_s) if state.wall_s is not None else None,
        "patch_lines": verified.patch_lines if verified else None,
        "verify_rc": verified.verify_rc if verified else None,
        "verify_pass": verified.verify_pass if verified else None,
        "scored": verified.scored if verified else None,
        "not_scored_reason": verified.not_scored_reason if verified else None,
        "sup_status": summary.status,
        "sup_verdict": summary.verdict,
        "delivered": summary.delivered,
        "spentTokens": summary.spent_tokens,
        "spentUsd": summary.spent_usd,
        "spawned": summary.spawned,
        "workers": summary.workers,
        "settled": summary.settled,
        "subtasks": summary.subtasks,
        "patchPath": verified.patch_path if verified else None,
        "provenance": (
            {"repo": prov.repo, "commit": prov.commit, "envKnobs": prov.env_knobs} if prov else None
        ),
        "recoveredSpend": {
            "workerTokJournal": sp.worker_tok_journal,
            "workerCwds": sp.worker_cwds,
            "workerSessions": sp.worker_sessions,
            "workerTokSqlite": sp.worker_tok_sqlite,
            "workerTokIn": sp.worker_tok_in,
            "workerTokOut": sp.worker_tok_out,
        },
    }


def result_json_bytes(state: CellState, ingested: Sequence[Recorded | Event]) -> bytes:
    """result.json's bytes: ``JSON.stringify(doc, null, 1)`` (``8``, never ``8.0``)."""
    return js_stringify_indented(result_json(state, ingested), 1).encode()


def run_documents(state: CellState, ingested: Sequence[Recorded | Event]) -> dict[str, bytes]:
    """Every run-dir document of the cell's current attempt that the log determines, by
    file name (``ingested``: the attempt's ingest stream, read only for result.json)."""
    docs: dict[str, bytes] = {}
    if has_result_json(state):
        docs[RESULT_JSON] = result_json_bytes(state, ingested)
    verdict = state.verdict
    if verdict is not None and verdict.attempt == state.attempt:
        docs[JUDGE_JSON] = verdict.verdict_json.encode()
    return docs


def write_documents_step(tools: Tools, run_dir: str, docs: dict[str, bytes]) -> list[str]:
    """Site step: write each document into the run dir (created if missing), atomically;
    the paths written."""
    written = []
    for name, data in docs.items():
        path = Path(run_dir) / name
        write_atomically(path, data)
        written.append(str(path))
    return written
