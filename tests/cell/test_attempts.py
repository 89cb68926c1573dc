"""The attempts fold: one cell's events in, one frozen record per attempt out.

Unit tests read a real SQLite log (the report's hand-worked arena); the property walks the
cell machine at random (every generated log is one the machine accepts) and holds the fold
to the machine on the current attempt, to the log on every record's attempt, and to the
same answer whatever order the records come in. The last tests hold the readers to it: no
module outside the fold declares its own per-attempt fold of the run's events, and the
run-dir documents read an attempt of the fold, not the machine's current-attempt state.
"""

from __future__ import annotations

import ast
import asyncio
import random
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from arenad.cell.attempts import Attempt, attempt_key, attempt_of, attempts
from arenad.cell.machine import fold
from arenad.home import Home, open_store
from events import cell as ev
from events.base import Event, Recorded
from events.codec import event_tag
from events.ingest import LineIngested
from events.streams import capture_stream, cell_stream, ingest_stream
from tests.events.samples import make_spec
from tests.report.arena_log import T0, build_arena

REPO = Path(__file__).resolve().parents[2]
SPEC = make_spec(campaign="c", instance_id="i1", arm="SOLO", rep=0)
CELL = cell_stream(SPEC.cell_id)


def _records(events: list[tuple[str, Event]]) -> list[Recorded]:
    return [
        Recorded(seq, stream, seq, event_tag(e), 1, T0 + 1000 * seq, e)
        for seq, (stream, e) in enumerate(events, start=1)
    ]


async def _arena_cell(home: Path, instance: str, arm: str, rep: int) -> list[Recorded]:
    await build_arena(home)
    async with open_store(Home(home)) as store:
        return await store.read_stream(
            cell_stream(make_spec(campaign="arena", instance_id=instance, arm=arm, rep=rep).cell_id)
        )


def test_a_recovered_run_is_one_attempt_with_its_facts(tmp_path: Path) -> None:
    records = asyncio.run(_arena_cell(tmp_path / "home", "i2", "BETA", 0))
    (a,) = attempts(records)
    assert a.n == 1
    assert (a.first_seq, a.last_seq) == (records[0].seq, records[-1].seq)
    assert a.started is not None and a.materialized is not None
    assert a.run_dir == "/h/run-1" and a.wall_s == 5.0
    assert a.verified is not None and a.scored and a.verified.verify_pass is False
    assert a.verdict is not None and a.verdict.resolved is True
    assert a.spend is not None and a.spend.cost_usd == 0.25
    recovered_at = next(r.recorded_at_ms for r in records if isinstance(r.event, ev.CellRecovered))
    assert a.captured_at_ms == a.settled_at_ms == a.recovered_at_ms == recovered_at
    assert a.failed is None and a.error is None and a.ingested is None


def test_a_retry_opens_the_next_attempt_and_keeps_the_first(tmp_path: Path) -> None:
    # i4 BETA r1: attempt 1 failed at materialize (never ran), attempt 2 unresolved.
    records = asyncio.run(_arena_cell(tmp_path / "home", "i4", "BETA", 1))
    first, second = attempts(records)
    assert (first.n, second.n) == (1, 2)
    assert first.failed is not None and first.error == "clone failed"
    # It never started: it settled nothing and the ledger gives it no line.
    assert first.started is None and first.captured_at_ms is None
    assert first.settled_at_ms is None
    assert second.started is not None and second.recovered is not None
    assert first.last_seq < second.first_seq


def test_an_interrupted_run_settles_twice() -> None:
    # An aborted run's spend is recovered, then its failure recorded: the ledger's lines
    # are settled at the recovery, the report's spend point lands at the failure.
    events = [
        ev.CellSubmitted(spec=SPEC),
        _materialized(1),
        _started(1),
        ev.RunAborted(attempt=1, wall_s=3.0, reason="operator request", cause="operator"),
        ev.CellRecovered(attempt=1, store_available=True, spend=ev.SpendFigures(cost_usd=0.5)),
        ev.CellFailed(attempt=1, stage="run", error="aborted", classification="operator"),
    ]
    records = _records([(CELL, e) for e in events])
    assert fold(records) is not None  # the machine accepts it
    (a,) = attempts(records)
    assert a.captured_at_ms == records[-2].recorded_at_ms
    assert a.settled_at_ms == records[-1].recorded_at_ms
    assert a.recovered is not None and a.failed is not None


def _log(text: str) -> ev.TextExcerpt:
    return ev.TextExcerpt(text=text, kept_bytes=len(text), size=len(text), sha256="0" * 64)


def _verdict(n: int, resolved: bool) -> ev.JudgeVerdictRecorded:
    return ev.JudgeVerdictRecorded(
        attempt=n, judge="j", verdict_json="{}", resolved=resolved, score=None
    )


def test_a_reverify_keeps_every_verdict_and_the_newest_verify_log() -> None:
    # The view's cell page lists every verdict (the history a reverify leaves) and shows
    # the newest verify log; the ledger and the report read the newest verdict.
    events = [
        ev.CellSubmitted(spec=SPEC),
        _materialized(1),
        _started(1),
        ev.RunCompleted(attempt=1, rc=0, wall_s=1.0),
        ev.CellVerified(attempt=1, scored=True, verify_pass=False),
        ev.VerifyLogCaptured(attempt=1, log=_log("first")),
        _verdict(1, False),
        ev.CellVerified(attempt=1, scored=True, verify_pass=True),
        ev.VerifyLogCaptured(attempt=1, log=_log("second")),
        _verdict(1, True),
    ]
    (a,) = attempts(_records([(CELL, e) for e in events]))
    assert [v.resolved for v in a.verdicts] == [False, True]
    assert a.verdict == a.verdicts[-1]
    assert a.verify_log is not None and a.verify_log.log.text == "second"
    assert a.verified is not None and a.verified.verify_pass is True


def test_an_attempt_without_verdicts_has_none() -> None:
    (a,) = attempts(_records([(CELL, ev.CellSubmitted(spec=SPEC)), (CELL, _materialized(1))]))
    assert a.verdicts == () and a.verdict is None and a.verify_log is None


def _line(offset: int) -> LineIngested:
    return LineIngested(source="stdout", path="out.jsonl", offset=offset, length=2, raw="{}")


def test_ingested_lines_and_captures_join_the_attempt_their_stream_names() -> None:
    events = [
        (CELL, ev.CellSubmitted(spec=SPEC)),
        (CELL, _materialized(1)),
        (CELL, _started(1)),
        (ingest_stream(SPEC.cell_id, 1), _line(0)),
        (ingest_stream(SPEC.cell_id, 1), _line(3)),
    ]
    records = _records(events)
    (a,) = attempts(records)
    assert a.ingested == tuple(records[-2:])
    assert a.last_seq == records[-1].seq
    assert attempt_of(capture_stream(SPEC.cell_id, 3), _line(0)) == 3
    assert attempt_key(ingest_stream(SPEC.cell_id, 2), _line(0)) == (SPEC.cell_id, 2)
    assert attempt_key(CELL, ev.CellSubmitted(spec=SPEC)) == (SPEC.cell_id, 1)
    # A stream of no attempt, or a cell event naming none, belongs to no attempt.
    assert attempt_key("campaign/c", _line(0)) is None
    assert attempt_of(CELL, _line(0)) is None


def test_no_records_no_attempts() -> None:
    assert attempts([]) == ()


# --------------------------------------------------------------------------- property


def _materialized(n: int) -> ev.CellMaterialized:
    return ev.CellMaterialized(
        attempt=n,
        run_dir=f"/h/{n}",
        workspace=f"/h/{n}/ws",
        head="0" * 40,
        clean=True,
        materializer="git",
    )


def _started(n: int) -> ev.RunStarted:
    return ev.RunStarted(
        attempt=n,
        argv=["agent"],
        cwd="/h",
        pid=1,
        pgid=1,
        started_at_ms=T0,
        deadline_ms=T0 + 1,
        timeout_s=1.0,
        kill_grace_s=1.0,
    )


@st.composite
def _attempt_events(draw: st.DrawFn, n: int) -> tuple[list[tuple[str, Event]], bool]:
    """One attempt's events along a path the machine allows; whether it may be retried."""
    cell: list[Event] = []
    ingest: list[Event] = []
    path = draw(st.sampled_from(["fail-early", "materialized", "run"]))
    if path == "fail-early":
        cell.append(ev.CellFailed(attempt=n, stage="abort", error="x", classification="operator"))
        return [(CELL, e) for e in cell], True
    cell += [_materialized(n)] * draw(st.integers(1, 2))
    if draw(st.booleans()):
        cell.append(ev.ProvenanceRecorded(attempt=n, repo="r", commit=f"c{n}"))
    if path == "materialized":
        return [(CELL, e) for e in cell], True
    cell.append(_started(n))
    ingest += [_line(i) for i in range(draw(st.integers(0, 2)))]
    end = draw(st.sampled_from(["completed", "timed_out", "aborted", "lost"]))
    wall = draw(st.floats(0, 100, allow_nan=False))
    if end == "lost":  # the run never ended: the cell failed while running
        cell.append(ev.CellFailed(attempt=n, stage="run", error="lost", classification="agent"))
        return [(CELL, e) for e in cell] + [
            (ingest_stream(SPEC.cell_id, n), e) for e in ingest
        ], True
    cell.append(
        ev.RunCompleted(attempt=n, rc=draw(st.integers(0, 3)), wall_s=wall)
        if end == "completed"
        else ev.RunTimedOut(attempt=n, wall_s=wall)
        if end == "timed_out"
        else ev.RunAborted(attempt=n, wall_s=wall, reason="hang", cause="agent")
    )
    tail = draw(st.sampled_from(["verified", "failed", "open"]))
    if tail == "failed":
        cell.append(ev.CellFailed(attempt=n, stage="verify", error="v", classification="agent"))
    elif tail == "verified":
        scored = draw(st.booleans())
        cell.append(ev.CellVerified(attempt=n, scored=scored, verify_pass=draw(st.booleans())))
        for _ in range(draw(st.integers(0, 2))):
            resolved = draw(st.booleans())
            cell.append(
                ev.JudgeVerdictRecorded(
                    attempt=n, judge="j", verdict_json="{}", resolved=resolved, score=None
                )
            )
        if draw(st.booleans()):
            spend = ev.SpendFigures(cost_usd=draw(st.none() | st.floats(0, 5)))
            cell.append(ev.CellRecovered(attempt=n, store_available=True, spend=spend))
        else:
            return [(CELL, e) for e in cell] + [
                (ingest_stream(SPEC.cell_id, n), e) for e in ingest
            ], False
    placed = [(CELL, e) for e in cell]
    # Ingested lines are appended while the run goes: somewhere after its start.
    start = next(i for i, (_, e) in enumerate(placed) if isinstance(e, ev.RunStarted))
    for e in ingest:
        placed.insert(
            draw(st.integers(start + 1, len(placed))), (ingest_stream(SPEC.cell_id, n), e)
        )
    return placed, tail != "open"


@st.composite
def _cell_logs(draw: st.DrawFn) -> list[Recorded]:
    events: list[tuple[str, Event]] = [(CELL, ev.CellSubmitted(spec=SPEC))]
    n = 1
    while True:
        attempt, retryable = draw(_attempt_events(n))
        events += attempt
        if not retryable or n == 4 or not draw(st.booleans()):
            return _records(events)
        n += 1
        events.append((CELL, ev.CellRetried(attempt=n, reason="again")))


def _cell_only(records: list[Recorded]) -> list[Recorded]:
    return [r for r in records if r.stream == CELL]


@settings(max_examples=300, deadline=None)
@given(_cell_logs(), st.randoms(use_true_random=False))
def test_the_fold_agrees_with_the_machine_and_the_log(
    records: list[Recorded], rnd: random.Random
) -> None:
    state = fold(_cell_only(records))  # raises if the walk made a log the machine refuses
    assert state is not None
    done = attempts(records)
    # The same records in any order fold to the same attempts.
    shuffled = list(records)
    rnd.shuffle(shuffled)
    assert attempts(shuffled) == done
    # Every record of an attempt is inside its span; the attempts are 1..current, in order.
    assert [a.n for a in done] == list(range(1, state.attempt + 1))
    by_n = {a.n: a for a in done}
    for r in records:
        a = by_n[attempt_of(r.stream, r.event) or 0]
        assert a.first_seq <= r.seq <= a.last_seq
    # The current attempt is the machine's current attempt.
    current: Attempt = done[-1]
    assert current.n == state.attempt
    assert current.materialized == state.materialized
    assert current.started == state.run
    assert current.wall_s == state.wall_s
    assert (current.ended.rc if current.ended else None) == state.run_rc
    assert current.verified == state.verified
    assert current.verdict == state.verdict
    # Every verdict of an attempt, in log order; the newest is its verdict.
    for a in done:
        mine = [r.event for r in records if isinstance(r.event, ev.JudgeVerdictRecorded)]
        assert a.verdicts == tuple(v for v in mine if v.attempt == a.n)
        assert a.verdict == (a.verdicts[-1] if a.verdicts else None)
    assert current.recovered == state.recovered
    assert current.failed == state.failed
    assert current.provenance == state.provenance
    # Ingested lines are their attempt's, in log order; none ingested is None, not ().
    for a in done:
        mine = [r for r in records if r.stream == ingest_stream(SPEC.cell_id, a.n)]
        assert a.ingested == (tuple(mine) if mine else None)
        # An attempt that never started settled nothing.
        if a.started is None:
            assert a.captured_at_ms is None and a.settled_at_ms is None


# --------------------------------------------------------------------------- one fold

# Modules that fold a run's events per attempt for a reason of their own; any other module
# that does must read arenad.cell.attempts instead (as the ledger, the report, the export,
# the view's cell page and the run-dir documents do).
OWN_FOLDS = {
    # The cell machine: the current attempt's state, checked transition by transition.
    "arenad/cell/machine.py",
    "arenad/cell/attempts.py",
    # Incremental folds over the whole log, O(1) per event as the daemon feeds them: they
    # share the attempt routing (attempt_key) and the cost rule (run_cost).
    "arenad/budget/spend.py",
    "arenad/readmodels/progress.py",
    # The spend read model, kept in the append's transaction: one append's events at a time.
    "arenad/readmodels/spend.py",
}
RUN_FACTS = {"RunStarted"}
SETTLED_FACTS = {"RunCompleted", "CellVerified", "CellRecovered", "CellFailed"}


def _matched_classes(tree: ast.AST) -> set[str]:
    """Event classes a module branches on: ``case X()`` patterns and ``isinstance`` tests."""
    found: set[str] = set()

    def name(node: ast.expr) -> str | None:
        if isinstance(node, ast.Attribute):
            return node.attr
        return node.id if isinstance(node, ast.Name) else None

    for node in ast.walk(tree):
        if isinstance(node, ast.MatchClass) and (n := name(node.cls)) is not None:
            found.add(n)
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id == "isinstance"
            and len(node.args) == 2
        ):
            targets = [node.args[1]]
            while targets:
                t = targets.pop()
                if isinstance(t, ast.Tuple):
                    targets += t.elts
                elif isinstance(t, ast.BinOp):
                    targets += [t.left, t.right]
                elif (n := name(t)) is not None:
                    found.add(n)
    return found


def test_no_other_module_folds_attempts() -> None:
    folds = set()
    for path in sorted((REPO / "arenad").rglob("*.py")):
        classes = _matched_classes(ast.parse(path.read_text(), filename=str(path)))
        if classes & RUN_FACTS and classes & SETTLED_FACTS:
            folds.add(str(path.relative_to(REPO)))
    assert folds - OWN_FOLDS == set(), "read arenad.cell.attempts instead of folding attempts"
    # Each exception still folds (a stale entry would let a new fold in under its name).
    assert OWN_FOLDS - folds == set()


# The run-dir documents (result.json, judge.json), whoever writes them (the runner, the
# daemon at start, export-artifacts): a projection of one attempt of the fold.
DOCUMENTS = "arenad/arms/documents.py"


def test_the_run_dir_documents_read_the_fold() -> None:
    tree = ast.parse((REPO / DOCUMENTS).read_text(), filename=DOCUMENTS)
    imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert "arenad.cell.attempts" in imported
    assert "arenad.cell.machine" not in imported, "documents read an Attempt, not CellState"
