"""The head's rule for observation batches: appended only if they start at the log's offsets.

Pure: the batches are made from events here; tests/executors/ray/test_executor.py takes real ones
from a node.
"""

from __future__ import annotations

from arenad.executors.ray.batches import Batch, BatchGate, batch_events, make_batch
from arenad.ingest.offsets import Positions, closed_files, fold_positions
from events.base import Event
from events.ingest import FileSnapshotted, FileTruncated, IngestionClosed, LineIngested


def _line(path: str, offset: int, raw: str) -> LineIngested:
    return LineIngested(source="s", path=path, offset=offset, length=len(raw), raw=raw)


def _batches() -> list[Batch]:
    """Three batches as a node makes them, each from where the previous one left off."""
    groups: list[list[Event]] = [
        [_line("a", 0, "a1"), _line("b", 0, "b1"), _line("a", 3, "a2")],
        [
            _line("b", 3, "b2"),
            FileTruncated(source="s", path="a", previous_offset=6, new_size=0, reason="shrunk"),
            _line("a", 0, "x"),
        ],
        [FileSnapshotted(source="s", path="st", content="{}", sha256="h", size=2)],
    ]
    files = Positions().files
    out = []
    for seq, events in enumerate(groups, 1):
        batch, files = make_batch(seq, events, files)
        out.append(batch)
    closing = [IngestionClosed(files=closed_files(files))]
    out.append(make_batch(len(groups) + 1, closing, files)[0])
    return out


def _feed(order: list[int]) -> tuple[list[Event], int]:
    batches = _batches()
    gate = BatchGate(Positions())
    log: list[Event] = []
    ignored = 0
    for n in order:
        batch = batches[n]
        if gate.admits(batch):
            events = batch_events(batch)
            log.extend(events)
            gate.record(events)
        else:
            ignored += 1
    return log, ignored


def _in_order() -> list[Event]:
    return [e for b in _batches() for e in batch_events(b)]


def test_batches_carry_where_each_file_starts_and_ends() -> None:
    first, second, third, closing = _batches()
    assert [(s.path, s.start, s.end) for s in first.spans] == [("a", 0, 6), ("b", 0, 3)]
    assert [(s.path, s.start, s.end) for s in second.spans] == [("a", 6, 2), ("b", 3, 6)]
    # Every known file, touched or not: a batch cannot overtake one about another file.
    assert [(s.path, s.start, s.start_sha, s.end, s.end_sha) for s in third.spans] == [
        ("a", 2, None, 2, None),
        ("b", 6, None, 6, None),
        ("st", 0, None, 2, "h"),
    ]
    assert [(s.path, s.start, s.end) for s in closing.spans] == [
        ("a", 2, 2),
        ("b", 6, 6),
        ("st", 2, 2),
    ]
    assert closing.closes and not third.closes


def test_a_duplicated_batch_is_ignored() -> None:
    log, ignored = _feed([0, 0, 1, 0, 1, 2, 2, 3, 3])
    assert log == _in_order() and ignored == 5
    assert fold_positions(log).closed


def test_a_batch_that_overtook_another_is_ignored_until_its_turn() -> None:
    # The closing batch first, a later one before an earlier one, about another file too.
    log, ignored = _feed([3, 1, 2, 0, 2, 3, 1, 2, 3])
    assert log == _in_order() and ignored == 5


def test_a_restarted_head_resumes_from_the_logged_positions() -> None:
    batches = _batches()
    logged = batch_events(batches[0])
    gate = BatchGate(fold_positions(logged))
    assert not gate.admits(batches[0])
    assert gate.admits(batches[1])
