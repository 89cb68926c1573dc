"""Supervisor figures folded over ingested journal lines: the reference's label cut, and which
labels an event can hold."""

from __future__ import annotations

import json

import msgspec

from arenad.cell import supervisor_figures as figures
from events import cell as ev
from events.base import Event
from events.ingest import LineIngested


def _journal(*labels: str) -> list[Event]:
    lines = [
        json.dumps({"kind": "spawned", "id": f"s{i}", "label": x}) for i, x in enumerate(labels)
    ]
    return [
        LineIngested(
            source="supervisor",
            path="journal.jsonl",
            offset=i * 1000,
            length=len(raw.encode()) + 1,
            raw=raw,
        )
        for i, raw in enumerate(lines)
    ]


def test_subtask_labels_are_cut_at_100_utf16_units_like_the_seed() -> None:
    summary = figures.summarize(_journal("root", "😀" * 60, "é" * 150))
    assert summary.spawned == 3 and summary.workers == 2
    assert summary.subtasks == ["😀" * 50, "é" * 100]  # label.slice(0, 100)
    assert figures.storable(summary.subtasks)


def test_a_label_an_event_cannot_hold_is_left_to_the_fold() -> None:
    split = figures.summarize(_journal("a" * 99 + "😀")).subtasks
    assert split == ["a" * 99 + "\ud83d"]  # the reference's cut: a lone high surrogate
    assert not figures.storable(split)
    outcome = ev.SupervisorOutcome(
        attempt=1,
        sup_run_dir=None,
        status="completed",
        verdict=None,
        delivered=None,
        spent_tokens=None,
        spent_usd=None,
        spawned=1,
        workers=1,
        settled=0,
        subtasks=None,
    )
    assert figures.recorded_counts(outcome) is None
    full = msgspec.structs.replace(outcome, subtasks=["x"])
    counts = figures.recorded_counts(full)
    assert counts is not None and (counts.spawned, counts.subtasks) == (1, ["x"])
