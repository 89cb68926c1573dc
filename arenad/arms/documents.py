"""The run-dir documents that are projections of the log, and their writing.

- ``result.json`` (supervisor cells, once recovered): the reference's SupervisorArmResult minus
  ``ws``, plus ``scored`` / ``not_scored_reason`` (the reference writes it only for a run that
  counted; arenad writes it for every recovered run, so it says whether it counts), in
  ``JSON.stringify(v, null, 1)`` bytes.
- ``judge.json``: the attempt's ``JudgeVerdictRecorded.verdict_json`` verbatim.

Each is a pure function of the cell's spec and one attempt as the attempts fold
(:mod:`arenad.cell.attempts`) records it, the fold the ledger, the report and the view
read: same log, same bytes. The log records are those of :func:`document_streams` (the
cell's stream, and the attempt's ingest stream when the kind writes result.json), so a
lost or deleted document is written again from the log (the runner after the recovery
commit, the daemon at start, ``arenad export-artifacts``) by the same function from the
same records; writing is atomic (temp file, fsync, rename).
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from arenad.atomic import write_atomically
from arenad.cell import supervisor_figures as figures
from arenad.cell.attempts import Attempt, attempts
from arenad.cell.kinds import ArmKind, kind_of_arm
from arenad.js import js_round, js_stringify_indented
from arenad.runs.executor import Tools
from events import cell as ev
from events.base import Recorded
from events.specs import CellSpec
from events.streams import cell_stream, ingest_stream

RESULT_JSON = "result.json"
JUDGE_JSON = "judge.json"


def document_streams(cell_id: str, attempt: int, kind: ArmKind) -> list[str]:
    """The streams an attempt's documents are folded from: the cell's, and the attempt's
    ingest stream only for a kind that writes result.json (its journal's counts; a judge's
    verdict is on the cell stream, and the capture stream holds nothing a document says)."""
    streams = [cell_stream(cell_id)]
    if kind.result_document:
        streams.append(ingest_stream(cell_id, attempt))
    return streams


def documented_attempt(records: Iterable[Recorded], n: int) -> tuple[CellSpec, Attempt] | None:
    """The cell's spec and its attempt ``n`` from the records of :func:`document_streams`;
    None when they hold no submission or no record of that attempt."""
    recs = list(records)
    spec = next((r.event.spec for r in recs if isinstance(r.event, ev.CellSubmitted)), None)
    attempt = next((a for a in attempts(recs) if a.n == n), None)
    return (spec, attempt) if spec is not None and attempt is not None else None


def has_result_json(spec: CellSpec, attempt: Attempt) -> bool:
    """Whether the attempt has a result.json: a recovered run of a kind that writes one
    (verified, its spend recovered, not failed: what the cell machine calls recovered; an
    interrupted run's spend is recovered unverified, and it fails)."""
    recovered = (
        attempt.verified is not None and attempt.recovered is not None and attempt.failed is None
    )
    return kind_of_arm(spec.arm).result_document and recovered


def result_json(spec: CellSpec, attempt: Attempt) -> dict[str, Any]:
    """The reference's SupervisorArmResult (minus ``ws``) of a recovered attempt, from events,
    with whether it counts (``attempt.ingested``: its journal, when no counts were recorded)."""
    summary = figures.recorded_counts(attempt.supervisor) or figures.summarize(
        attempt.ingested or ()
    )
    verified = attempt.verified
    prov = attempt.provenance
    sp = attempt.spend or ev.SpendFigures()
    wall_s = attempt.wall_s
    return {
        "arm": spec.arm.name,
        "iid": spec.instance.instance_id,
        "driver_rc": attempt.ended.rc if attempt.ended is not None else None,
        # The reference's Math.round (halves up), not Python's round (halves to even).
        "wall_s": js_round(wall_s) if wall_s is not None else None,
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


def result_json_bytes(spec: CellSpec, attempt: Attempt) -> bytes:
    """result.json's bytes: ``JSON.stringify(doc, null, 1)`` (``8``, never ``8.0``)."""
    return js_stringify_indented(result_json(spec, attempt), 1).encode()


def run_documents(spec: CellSpec, attempt: Attempt) -> dict[str, bytes]:
    """Every run-dir document of the attempt that the log determines, by file name."""
    docs: dict[str, bytes] = {}
    if has_result_json(spec, attempt):
        docs[RESULT_JSON] = result_json_bytes(spec, attempt)
    if attempt.verdict is not None:
        docs[JUDGE_JSON] = attempt.verdict.verdict_json.encode()
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
