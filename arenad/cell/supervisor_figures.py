"""Supervisor figures as pure functions of the ingested events (no file is read).

The reference's ``parseSupervisorArtifacts`` (state.json summary, journal counts) and
the ``recoverSupSpend`` journal half (worker cwds, settled worker tokens), over
the ``LineIngested`` / ``FileSnapshotted`` events of an attempt's ingest stream.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import msgspec

from arenad.js import js_slice
from events.base import Event, Recorded
from events.cell import SupervisorOutcome
from events.ingest import FileSnapshotted, LineIngested

SUPERVISOR_SOURCE = "supervisor"


class SupervisorSummary(msgspec.Struct, frozen=True, kw_only=True):
    status: str | None = None
    verdict: str | None = None
    delivered: bool | None = None
    spent_tokens: int | None = None
    spent_usd: float | None = None
    spawned: int = 0
    workers: int = 0
    settled: int = 0
    subtasks: list[str] = []


def _events(items: Iterable[Event | Recorded]) -> Iterator[Event]:
    for item in items:
        yield item.event if isinstance(item, Recorded) else item


def _objects(
    items: Iterable[Event | Recorded], path_ok: Callable[[str], bool]
) -> Iterator[dict[str, Any]]:
    for e in _events(items):
        if not (isinstance(e, LineIngested) and e.source == SUPERVISOR_SOURCE):
            continue
        if e.encoding != "utf-8" or not path_ok(e.path) or not e.raw.strip():
            continue
        try:
            obj = json.loads(e.raw)
        except ValueError:
            continue
        if isinstance(obj, dict):
            yield obj


def _is_worker_file(path: str) -> bool:
    return (
        path.startswith("workers/")
        and path.endswith(".ndjson")
        and not path.endswith(".inbox.ndjson")
    )


def last_state(items: Iterable[Event | Recorded]) -> dict[str, Any] | None:
    """The last state.json snapshot, parsed; ``{}`` when it is corrupt, None when absent."""
    last: FileSnapshotted | None = None
    for e in _events(items):
        is_state = isinstance(e, FileSnapshotted) and e.path == "state.json"
        if is_state and isinstance(e, FileSnapshotted) and e.source == SUPERVISOR_SOURCE:
            last = e
    if last is None:
        return None
    try:
        obj = json.loads(last.content)
    except ValueError:
        return {}
    return obj if isinstance(obj, dict) else {}


def state_status(items: Iterable[Event | Recorded]) -> str | None:
    state = last_state(items) or {}
    status = state.get("status")
    return status if isinstance(status, str) else None


def _str(v: Any) -> str | None:
    return v if isinstance(v, str) else None


def _num(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def summarize(items: Iterable[Event | Recorded]) -> SupervisorSummary:
    """The reference's parseSupervisorArtifacts over the ingested events."""
    events = list(_events(items))
    state = last_state(events) or {}
    raw_result = state.get("result")
    result: dict[str, Any] = raw_result if isinstance(raw_result, dict) else {}

    spawned = workers = settled = 0
    subtasks: list[str] = []
    for o in _objects(events, lambda p: p == "journal.jsonl"):
        kind = o.get("kind")
        label = o.get("label") if isinstance(o.get("label"), str) else ""
        if kind == "spawned":
            spawned += 1
            if label and label != "root":
                workers += 1
                # The reference's label.slice(0, 100): UTF-16 code units, not code points.
                subtasks.append(js_slice(label, 100))
        elif kind == "settled":
            settled += 1
    tokens = _num(result.get("spentTokens"))
    usd = _num(result.get("spentUsd"))
    delivered = result.get("delivered")
    return SupervisorSummary(
        status=_str(state.get("status")),
        verdict=_str(state.get("verdict")),
        delivered=delivered if isinstance(delivered, bool) else None,
        spent_tokens=int(tokens) if tokens is not None else None,
        spent_usd=float(usd) if usd is not None else None,
        spawned=spawned,
        workers=workers,
        settled=settled,
        subtasks=subtasks,
    )


def recorded_counts(outcome: SupervisorOutcome | None) -> SupervisorSummary | None:
    """The journal counts the run's end recorded (``SupervisorOutcome``), as a summary;
    None when it recorded none (an older arenad, nothing ingested, or a label that could
    not be stored): the caller folds the ingested journal then."""
    if outcome is None:
        return None
    spawned, workers, settled = outcome.spawned, outcome.workers, outcome.settled
    if spawned is None or workers is None or settled is None or outcome.subtasks is None:
        return None
    return SupervisorSummary(
        status=outcome.status,
        verdict=outcome.verdict,
        delivered=outcome.delivered,
        spent_tokens=outcome.spent_tokens,
        spent_usd=outcome.spent_usd,
        spawned=spawned,
        workers=workers,
        settled=settled,
        subtasks=list(outcome.subtasks),
    )


def storable(labels: Iterable[str]) -> bool:
    """Whether every label is valid Unicode (an event's text must be: a label the journal
    escaped as a lone surrogate, or one the 100-unit cut split, is not)."""
    try:
        for label in labels:
            label.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def worker_cwds(items: Iterable[Event | Recorded]) -> list[str]:
    """``started.cwd`` of the worker files' lines, deduplicated, first-seen order."""
    cwds: list[str] = []
    for o in _objects(items, _is_worker_file):
        cwd = o.get("cwd")
        if o.get("kind") == "started" and isinstance(cwd, str):
            cwds.append(cwd)
    return list(dict.fromkeys(cwds))


def worker_tok_journal(items: Iterable[Event | Recorded]) -> int:
    """Σ settled ``spend.tokens.input + output`` over the worker files."""
    total = 0
    for o in _objects(items, _is_worker_file):
        if o.get("kind") != "settled":
            continue
        spend = o.get("spend")
        tokens = spend.get("tokens") if isinstance(spend, dict) else None
        if not isinstance(tokens, dict):
            continue
        for key in ("input", "output"):
            v = tokens.get(key)
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                total += int(v)
    return total
