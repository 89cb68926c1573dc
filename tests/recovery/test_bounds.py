"""Spend the agent cannot forge (issue 27, finding 2): every figure read from where the
agent writes is bounded; a value out of bounds is a labeled gap with the value kept as
text; and no fold over the log (budget, progress, report, the cells read model, the CLI's
tables) crashes on, or adds, any recorded value, including what an older arenad recorded.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from arenad.app.campaigns import CampaignFigures
from arenad.app.views import campaigns_table, spend_text, status_table
from arenad.budget.cap import is_reached
from arenad.budget.spend import SpendFold
from arenad.cell.machine import fold
from arenad.cell.spend import run_cost, run_tokens
from arenad.readmodels.cells import COLUMNS, row_of
from arenad.readmodels.progress import ProgressFold
from arenad.recovery.bounds import (
    MAX_ATTEMPT_USD,
    MAX_SESSION_TOKENS,
    MAX_SESSION_USD,
    attempt_usd,
    out_of_bounds,
)
from arenad.recovery.capture import COMMAND_STORE_GAP, recover_tree, spend_figures
from arenad.recovery.opencode_spend import session_spend
from arenad.recovery.usage import checked_usage
from arenad.report.project import build_report, cell_facts
from arenad.report.render import json_bytes, terminal
from arenad.runs.executor import Tools
from events import cell as ev
from events.base import Event, Recorded
from events.capture import AgentSessionCaptured, MessageRow, PartRow
from events.codec import decode_event, encode_event, event_tag, event_version
from events.control import CampaignSubmitted
from events.ingest import LineIngested
from tests.events.samples import make_spec
from tests.recovery.opencode_fixture import StoreWriter
from tests.report.arena_log import run_events

# What a forged store or stream has held (the issue's -1000, 1e300, 1e30 tokens), and
# their neighbours.
EXTREME: list[Any] = [
    -1000.0,
    -1,
    1e300,
    -1e300,
    math.inf,
    -math.inf,
    math.nan,
    1e30,
    10**30,
    2**63,
    2**63 - 1,
    1e18,
    5e-324,
    -0.0,
    0,
    MAX_SESSION_USD,
    MAX_SESSION_USD * 1.0000001,
    MAX_SESSION_TOKENS + 1,
    True,
    "12",
    None,
]
numbers = st.one_of(
    st.sampled_from(EXTREME),
    st.floats(allow_nan=True, allow_infinity=True),
    st.integers(min_value=-(2**70), max_value=2**70),
)


def _session(sid: str, row: dict[str, Any], parts: list[dict[str, Any]] = ()) -> Any:
    return AgentSessionCaptured(
        attempt=1,
        purpose="solo",
        store_path="/s",
        session_id=sid,
        parent_id=None,
        directory="/w",
        row={"id": sid, **row},
        messages=[MessageRow(id="m", time_created=1, data="{}")],
        parts=[
            PartRow(id=f"p{i}", message_id="m", data=json.dumps(p)) for i, p in enumerate(parts)
        ],
    )


def _columns(cost: Any, tokens: Any = 10) -> dict[str, Any]:
    return {
        "cost": cost,
        "tokens_input": tokens,
        "tokens_output": 2,
        "tokens_reasoning": 0,
        "tokens_cache_read": 0,
        "tokens_cache_write": 0,
    }


# --------------------------------------------------------------------------- recording


@pytest.mark.parametrize(
    ("cost", "raw", "reason"),
    [
        (-1000.0, "-1000.0", "negative"),
        (1e300, "1e+300", "over the ceiling of 1000"),
        (math.inf, "inf", "not a finite number"),
    ],
)
def test_a_forged_session_cost_is_a_labeled_gap(cost: float, raw: str, reason: str) -> None:
    good = _session("ses_good", _columns(0.5))
    bad = _session("ses_bad", _columns(cost))
    figures, found = spend_figures([good, bad])
    # Unknown, never the good session's 0.5 presented as the whole, never the forged value.
    assert figures.cost_usd is None
    assert (figures.sessions, figures.tokens_in, figures.tokens_out) == (2, 20, 4)
    assert [(r.source, r.where, r.field, r.raw, r.reason) for r in found] == [
        ("store", "session ses_bad", "cost", raw, reason)
    ]


def test_overflowing_tokens_are_unknown_and_kept_as_text() -> None:
    figures, found = spend_figures([_session("s", _columns(0.25, tokens=1e30))])
    assert figures.tokens_in is None and figures.cost_usd == 0.25
    assert [(r.field, r.raw) for r in found] == [("tokens_input", "1e+30")]
    # A huge integer column (SQLite INTEGER holds up to 2**63 - 1) too.
    figures, found = spend_figures([_session("s", _columns(0.25, tokens=2**63 - 1))])
    assert figures.tokens_in is None and found[0].raw == str(2**63 - 1)


def test_step_finish_parts_are_bounded_each_and_summed_within_the_ceiling() -> None:
    # A store without the usage columns: its step-finish parts are summed.
    def step(cost: Any) -> dict[str, Any]:
        return {"type": "step-finish", "cost": cost, "tokens": {"input": 1, "output": 1}}

    spend = session_spend(_session("s", {}, [step(0.5), step(-3.0), step(0.25)]))
    assert "usd" in spend.unknown and spend.rejected[0].where == "session s part p1"
    # Each step within bounds, the sum past the session's ceiling: unknown too.
    spend = session_spend(_session("s", {}, [step(MAX_SESSION_USD)] * 2))
    assert "usd" in spend.unknown
    assert spend.rejected[0].field == "cost (sum of its steps)"


def test_a_command_arms_store_is_never_spend_of_record(tmp_path: Path) -> None:
    store = StoreWriter(tmp_path / "opencode.db")
    store.session("ses_forged", "/w", usage=(-500.0, 10, 2, 0, 0, 0))
    store.close()
    for purpose, cost in (("command", None), ("solo", None)):
        captures, recovered = recover_tree(
            Tools(),
            str(tmp_path / "opencode.db"),
            "c:i:CMD:0",
            1,
            purpose,
            None,  # type: ignore[arg-type]
        )
        assert recovered.store_available and recovered.spend.cost_usd == cost
        assert len(captures[0].events) == 1  # the session is kept as evidence either way
        if purpose == "command":
            assert recovered.spend_gap == COMMAND_STORE_GAP and recovered.rejected == []
        else:
            assert recovered.spend_gap is not None and recovered.rejected[0].raw == "-500.0"
    # A legitimate cost in a command arm's store is unknown all the same.
    store = StoreWriter(tmp_path / "ok.db")
    store.session("ses_ok", "/w", usage=(0.5, 10, 2, 0, 0, 0))
    store.close()
    _, recovered = recover_tree(Tools(), str(tmp_path / "ok.db"), "c:i:CMD:0", 1, "command", None)
    assert recovered.spend.cost_usd is None and recovered.spend.sessions == 1


def _line(offset: int, obj: dict[str, Any]) -> LineIngested:
    raw = json.dumps(obj)
    return LineIngested(
        source="stdout", path="oc.jsonl", offset=offset, length=len(raw), raw=raw, kind=obj["type"]
    )


def test_a_stream_step_out_of_bounds_leaves_the_usage_unknown() -> None:
    def finish(cost: Any, tokens: Any) -> dict[str, Any]:
        return {"type": "step_finish", "part": {"cost": cost, "tokens": {"input": tokens}}}

    usage, found = checked_usage([_line(0, finish(0.01, 10)), _line(100, finish(0.02, 20))])
    assert usage is not None and usage.tokens_in == 30 and found == []
    usage, found = checked_usage([_line(0, finish(0.01, 10)), _line(100, finish(1e308, 1e30))])
    assert usage is None
    assert [(r.source, r.where, r.field, r.raw) for r in found] == [
        ("stream", "step 2", "tokens.input", "1e+30"),
        ("stream", "step 2", "cost", "1e+308"),
    ]


@settings(max_examples=200, suppress_health_check=[HealthCheck.too_slow])
@given(cost=numbers, tokens=numbers, parts=st.lists(numbers, max_size=4))
def test_recording_never_crashes_and_keeps_only_figures_in_bounds(
    cost: Any, tokens: Any, parts: list[Any]
) -> None:
    steps = [{"type": "step-finish", "cost": c, "tokens": {"input": c}} for c in parts]
    sessions = [_session("a", _columns(cost, tokens)), _session("b", {}, steps)]
    figures, found = spend_figures(sessions)
    recovered = ev.CellRecovered(attempt=1, store_available=True, spend=figures, rejected=found)
    # What is recorded decodes to the same event: no inf or nan ever reaches the log.
    payload = encode_event(recovered)
    assert decode_event(payload, event_tag(recovered), event_version(recovered)) == recovered
    if figures.cost_usd is not None:
        assert 0 <= figures.cost_usd <= 2 * MAX_SESSION_USD
    for n in (figures.tokens_in, figures.tokens_out):
        assert n is None or 0 <= n <= 2 * MAX_SESSION_TOKENS
    for r in found:
        assert isinstance(r.raw, str) and len(r.raw) <= 100


# --------------------------------------------------------------------------- the folds


def _recorded(items: list[tuple[str, Event]]) -> list[Recorded]:
    out = []
    for seq, (stream, event) in enumerate(items, start=1):
        # Through the codec, as a store would hand it back.
        decoded = decode_event(encode_event(event), event_tag(event), event_version(event))
        out.append(Recorded(seq, stream, seq, event_tag(event), event_version(event), seq, decoded))
    return out


def _cell_log(
    campaign: str, iid: str, arm: str, cost: Any, tokens: Any, supervisor: bool
) -> list[tuple[str, Event]]:
    spec = make_spec(campaign=campaign, instance_id=iid, arm=arm, supervisor=supervisor)
    stream = f"cell/{spec.cell_id}"
    events = run_events(1, "pass", wall_s=1.0, cost=0.0, tokens=(0, 0))
    recovered = events[-1]
    assert isinstance(recovered, ev.CellRecovered)
    spend = ev.SpendFigures(
        cost_usd=cost if not isinstance(cost, bool | str) else None,
        tokens_in=tokens if isinstance(tokens, int) and not isinstance(tokens, bool) else None,
        tokens_out=1,
        spent_usd=cost if supervisor and not isinstance(cost, bool | str) else None,
    )
    events[-1] = msgspec.structs.replace(recovered, spend=spend)
    live = [
        (
            f"ingest/{spec.cell_id}/1",
            _line(0, {"type": "step_finish", "part": {"cost": cost, "tokens": {}}}),
        )
        for _ in [0]
        if not isinstance(cost, float) or math.isfinite(cost)
    ]
    return [(stream, ev.CellSubmitted(spec=spec)), *live, *((stream, e) for e in events)]


@settings(max_examples=100, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(
    values=st.lists(st.tuples(numbers, numbers, st.booleans()), min_size=1, max_size=4),
    running=numbers,
)
def test_no_fold_crashes_on_or_adds_any_recorded_value(
    values: list[tuple[Any, Any, bool]], running: Any
) -> None:
    kinds = {"SOLO": "solo", "SUP": "supervisor"}
    items: list[tuple[str, Event]] = [
        (
            "campaign/c",
            CampaignSubmitted(
                name="c", source_path="/c.toml", spec_sha256="0", cell_ids=[], arm_kinds=kinds
            ),
        )
    ]
    for i, (cost, tokens, supervisor) in enumerate(values):
        arm = "SUP" if supervisor else "SOLO"
        items += _cell_log("c", f"i{i}", arm, cost, tokens, supervisor)
    # One attempt still running, its stream's step cost the only figure.
    spec = make_spec(campaign="c", instance_id="live", arm="SOLO")
    started = run_events(1, "pass", wall_s=1.0, cost=0.0, tokens=(0, 0))[:2]
    items += [(f"cell/{spec.cell_id}", ev.CellSubmitted(spec=spec))]
    items += [(f"cell/{spec.cell_id}", e) for e in started]
    if not isinstance(running, float) or math.isfinite(running):
        step = {"type": "step_finish", "part": {"cost": running, "tokens": {}}}
        items += [(f"ingest/{spec.cell_id}/1", _line(0, step))]
    log = _recorded(items)

    spend = SpendFold()
    spend.apply_all(log)
    figures = spend.campaign("c")
    for usd in (figures.spent_usd, figures.recovered_usd, figures.live_usd):
        assert math.isfinite(usd) and 0 <= usd <= (len(values) + 1) * MAX_ATTEMPT_USD
    assert isinstance(is_reached(figures.spent_usd, 1.0), bool)

    progress = ProgressFold()
    progress.apply_all(log)
    total = progress.snapshot().total
    assert math.isfinite(total.cost_usd) and total.cost_usd >= 0

    by_cell: dict[str, list[Recorded]] = {}
    for r in log:
        if r.stream.startswith("cell/"):
            by_cell.setdefault(r.stream, []).append(r)
    facts = [f for f in (cell_facts(rs) for rs in by_cell.values()) if f is not None]
    report = build_report(facts, ["c"])
    json.loads(json_bytes(report))
    terminal(report)
    for rs in by_cell.values():
        state = fold(rs)
        assert state is not None
        row = dict(zip(COLUMNS, row_of(state, rs[-1].seq), strict=True))
        for value in (row["tokens_in"], row["tokens_out"], row["cost_usd"]):  # SQLite's
            assert value is None or (
                not isinstance(value, bool) and 0 <= value < 2**63 and math.isfinite(value)
            )
        kind = "supervisor" if "SUP" in state.cell_id else "solo"
        cost = run_cost(kind, state.recovered, None)
        assert cost is None or 0 <= cost <= MAX_ATTEMPT_USD
        assert all(n is None or n >= 0 for n in run_tokens(state.recovered))

    shown = CampaignFigures(
        name="c",
        cells={"recovered": len(values)},
        total=len(values),
        spent_usd=figures.spent_usd,
        recovered_usd=figures.recovered_usd,
        live_usd=figures.live_usd,
        attempts=figures.attempts,
        running=figures.running,
        unknown_attempts=figures.unknown_attempts,
        cap_usd=1.0,
        abort_running=False,
        at_cap=is_reached(figures.spent_usd, 1.0),
        submitted_at_ms=1,
        last_event_ms=2,
    )
    spend_text(shown)
    campaigns_table([shown])
    status_table([("recovered", len(values))], [], [shown])


def test_the_bounds_say_why() -> None:
    assert out_of_bounds(math.nan, 1.0) == "not a finite number"
    assert out_of_bounds(-0.5, 1.0) == "negative"
    assert out_of_bounds(2, 1.0) == "over the ceiling of 1"
    assert out_of_bounds(1.0, 1.0) is None and out_of_bounds(-0.0, 1.0) is None
    assert attempt_usd(1e300) is None and attempt_usd(-1000) is None and attempt_usd(3) == 3.0


def test_a_command_arm_without_a_store_records_no_store_failure(tmp_path: Path) -> None:
    # Issue 29: every command cell logged capture.store-unavailable for a store it never
    # had. No capture event; the CellRecovered says there was none, labelled.
    captures, recovered = recover_tree(
        Tools(), str(tmp_path / "none.db"), "c:i:CMD:0", 1, "command", None
    )
    assert captures == []
    assert (recovered.store_available, recovered.store_path) == (False, None)
    assert recovered.gap is not None and "kept none" in recovered.gap
    assert recovered.spend_gap == COMMAND_STORE_GAP
    # A solo arm's store is the daemon's to expect: its absence is a recorded failure.
    captures, recovered = recover_tree(
        Tools(), str(tmp_path / "none.db"), "c:i:SOLO:0", 1, "solo", None
    )
    assert len(captures) == 1 and not recovered.store_available
