"""Which cells are overdue at a given time: a pure rule over a cell's state."""

from __future__ import annotations

from arenad.cell.machine import CellState, fold
from arenad.cell.overdue import STEP_LIMITS_S, overdue
from events import cell as ev
from events.base import Event
from tests.events.samples import make_spec, sample

T0 = 1_700_000_000_000


def _state(*events: tuple[Event, int]) -> CellState:
    submitted = ev.CellSubmitted(spec=make_spec(), attempt=1)
    state = fold([(submitted, T0 - 10_000), *events])
    assert state is not None
    return state


def test_a_submitted_cell_waits_for_a_slot_and_is_never_overdue() -> None:
    assert overdue(_state(), T0 + 86_400_000) is None


def test_a_materialized_cell_is_overdue_once_its_spawn_should_have_happened() -> None:
    state = _state((sample(ev.CellMaterialized, 1), T0))
    limit_ms = round((STEP_LIMITS_S["spawn"] + STEP_LIMITS_S["append"]) * 1000)
    assert overdue(state, T0 + limit_ms) is None
    late = overdue(state, T0 + limit_ms + 1000)
    assert late is not None and late.state == "materialized" and late.waiting_for == "spawn"
    assert late.for_s == (limit_ms + 1000) / 1000


def test_a_running_cell_is_overdue_only_past_its_deadline_and_grace() -> None:
    started = sample(ev.RunStarted, 1)  # started T0, deadline T0 + 120 s, grace 1 s
    state = _state((sample(ev.CellMaterialized, 1), T0 - 1000), (started, T0))
    bound = started.deadline_ms + round((started.kill_grace_s + STEP_LIMITS_S["run"]) * 1000)
    assert overdue(state, bound) is None
    late = overdue(state, bound + 1)
    assert late is not None and late.state == "running" and late.limit_s == 181.0


def test_a_paused_or_finished_cell_is_not_overdue() -> None:
    materialized = (sample(ev.CellMaterialized, 1), T0)
    paused = _state(materialized, (ev.CellPaused(), T0))
    assert overdue(paused, T0 + 86_400_000) is None


def test_an_ended_run_has_its_verify_timeout_on_top_of_the_steps() -> None:
    state = _state(
        (sample(ev.CellMaterialized, 1), T0 - 2000),
        (sample(ev.RunStarted, 1), T0 - 1000),
        (sample(ev.RunCompleted, 1), T0),
    )
    late = overdue(state, T0 + 86_400_000)
    assert late is not None and late.state == "completed"
    assert late.limit_s >= state.spec.verify_timeout_s + STEP_LIMITS_S["verify"]
    assert overdue(state, T0 + round(state.spec.verify_timeout_s * 1000)) is None
