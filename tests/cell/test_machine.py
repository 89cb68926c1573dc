"""The cell state machine: every (state, event) pair against the table, attempts,
and hypothesis properties of random event sequences."""

from __future__ import annotations

import itertools

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from arenad.cell.machine import (
    SIDE_EVENTS,
    TERMINAL,
    TRANSITIONS,
    CellState,
    CellStatus,
    apply,
    fold,
    next_status,
    refusal,
)
from arenad.errors import IllegalTransition
from arenad.readmodels.cells import decode_state, row_of
from events import cell as ev
from events.base import Event
from events.codec import EVENT_TYPES, event_tag
from tests.events.samples import make_spec, sample

S = CellStatus
NON_TERMINAL = frozenset(set(S) - {S.RECOVERED, S.FAILED})
RUN_ENDED = frozenset({S.COMPLETED, S.TIMED_OUT, S.ABORTED})

# The machine as the issue describes it, written out independently of the module.
EXPECTED_MOVES: dict[tuple[CellStatus | None, str], CellStatus] = {
    (None, "cell.submitted"): S.SUBMITTED,
    (S.SUBMITTED, "cell.materialized"): S.MATERIALIZED,
    (S.MATERIALIZED, "cell.materialized"): S.MATERIALIZED,
    (S.MATERIALIZED, "run.started"): S.RUNNING,
    (S.RUNNING, "run.completed"): S.COMPLETED,
    (S.RUNNING, "run.timed_out"): S.TIMED_OUT,
    (S.RUNNING, "run.aborted"): S.ABORTED,
    (S.COMPLETED, "cell.verified"): S.VERIFIED,
    (S.TIMED_OUT, "cell.verified"): S.VERIFIED,
    (S.ABORTED, "cell.verified"): S.VERIFIED,
    (S.VERIFIED, "cell.recovered"): S.RECOVERED,
    **{(state, "cell.failed"): S.FAILED for state in NON_TERMINAL},
    (S.RECOVERED, "cell.retried"): S.SUBMITTED,
    (S.FAILED, "cell.retried"): S.SUBMITTED,
    (S.MATERIALIZED, "cell.retried"): S.SUBMITTED,
}
EXPECTED_SIDE: dict[str, frozenset[CellStatus]] = {
    "cell.abort-requested": NON_TERMINAL,
    "cell.paused": frozenset(S),
    "cell.resumed": frozenset(S),
    "cell.hang-detected": frozenset({S.RUNNING}),
    "run.adopted": frozenset({S.RUNNING}),
    "cell.provenance": frozenset({S.SUBMITTED, S.MATERIALIZED, S.RUNNING}),
    "cell.supervisor-outcome": RUN_ENDED,
    "run.output-capped": RUN_ENDED,
    "cell.judge-verdict": frozenset({S.VERIFIED, S.RECOVERED}),
    "cell.patch-captured": frozenset({S.VERIFIED}),
    # ``arenad reverify`` (issue 29): a new verdict on a recovered attempt, its log's end.
    "cell.verify-log-captured": frozenset({S.VERIFIED, S.RECOVERED}),
    "cell.reverified": frozenset({S.RECOVERED}),
    # An interrupted run's spend (issue 29): only after an interruption (see below).
    "cell.recovered": frozenset({S.ABORTED}),
}

# A path of events into each state (attempt 1).
PATHS: dict[CellStatus | None, list[type[Event]]] = {
    None: [],
    S.SUBMITTED: [ev.CellSubmitted],
    S.MATERIALIZED: [ev.CellSubmitted, ev.CellMaterialized],
    S.RUNNING: [ev.CellSubmitted, ev.CellMaterialized, ev.RunStarted],
    S.COMPLETED: [ev.CellSubmitted, ev.CellMaterialized, ev.RunStarted, ev.RunCompleted],
    S.TIMED_OUT: [ev.CellSubmitted, ev.CellMaterialized, ev.RunStarted, ev.RunTimedOut],
    S.ABORTED: [ev.CellSubmitted, ev.CellMaterialized, ev.RunStarted, ev.RunAborted],
    S.VERIFIED: [
        ev.CellSubmitted,
        ev.CellMaterialized,
        ev.RunStarted,
        ev.RunCompleted,
        ev.CellVerified,
    ],
    S.RECOVERED: [
        ev.CellSubmitted,
        ev.CellMaterialized,
        ev.RunStarted,
        ev.RunCompleted,
        ev.CellVerified,
        ev.CellRecovered,
    ],
    S.FAILED: [ev.CellSubmitted, ev.CellFailed],
}
STATES: list[CellStatus | None] = [None, *S]
ALL_KINDS = list(EVENT_TYPES)


def state_in(status: CellStatus | None) -> CellState | None:
    state = fold([(sample(kind), 1000 + i) for i, kind in enumerate(PATHS[status])])
    assert (state.status if state else None) == status
    return state


def event_for(kind: type[Event], state: CellState | None) -> Event:
    """A sample of ``kind`` with the attempt this state would accept."""
    attempt = state.attempt if state is not None else 1
    return sample(kind, attempt + 1 if kind is ev.CellRetried else attempt)


def expected_after(status: CellStatus | None, tag: str) -> CellStatus | None:
    if (status, tag) in EXPECTED_MOVES:
        return EXPECTED_MOVES[(status, tag)]
    if status is not None and status in EXPECTED_SIDE.get(tag, frozenset()):
        return status
    return None


def test_the_table_is_the_issue_table() -> None:
    assert TRANSITIONS == EXPECTED_MOVES
    assert SIDE_EVENTS == EXPECTED_SIDE
    assert frozenset({S.RECOVERED, S.FAILED}) == TERMINAL


@pytest.mark.parametrize("status", STATES, ids=lambda s: str(s or "new"))
@pytest.mark.parametrize("kind", ALL_KINDS, ids=lambda k: str(k.__struct_config__.tag))
def test_every_state_event_pair(status: CellStatus | None, kind: type[Event]) -> None:
    state = state_in(status)
    event = event_for(kind, state)
    tag = event_tag(event)
    after = expected_after(status, tag)
    if status == S.ABORTED and tag == "cell.recovered":
        # Never after a run the agent's own abort ended; after an interrupted one, yes.
        with pytest.raises(IllegalTransition, match="not interrupted"):
            apply(state, event, 99_999)
        assert state is not None
        # The same rule, asked before appending (the property tests below rely on it).
        assert refusal(state, tag) == "a run that was not interrupted"
        state = msgspec.structs.replace(state, interrupted="shutdown")
        assert refusal(state, tag) is None
    assert next_status(status, tag) == after
    if after is None:
        with pytest.raises(IllegalTransition) as caught:
            apply(state, event, 99_999)
        assert caught.value.tag.startswith(tag)
        assert caught.value.state == status
        assert repr(tag) in str(caught.value)
        return
    new = apply(state, event, 99_999)
    assert new.status == after
    assert new.version == (state.version if state else 0) + 1
    assert new.updated_at_ms == 99_999
    if kind is ev.CellRetried:
        assert state is not None and new.attempt == state.attempt + 1
    elif state is not None:
        assert new.attempt == state.attempt
    # The input state is untouched (apply is pure; states are frozen).
    if not (status == S.ABORTED and tag == "cell.recovered"):
        assert state == state_in(status)


@pytest.mark.parametrize(
    "kind", [k for k in ALL_KINDS if "attempt" in k.__struct_fields__ and k is not ev.CellSubmitted]
)
def test_an_event_of_another_attempt_is_illegal(kind: type[Event]) -> None:
    for status in S:
        state = state_in(status)
        assert state is not None
        if expected_after(status, event_tag(sample(kind))) is None:
            continue
        right = 2 if kind is ev.CellRetried else 1
        for wrong in {right - 1, right + 1, right + 5} - {right}:
            with pytest.raises(IllegalTransition, match="attempt"):
                apply(state, sample(kind, wrong), 1)


def test_a_retry_opens_a_new_attempt_and_keeps_what_spans_attempts() -> None:
    state = fold(
        [
            (ev.CellSubmitted(spec=make_spec()), 1),
            (ev.CellPaused(), 2),
            (sample(ev.CellMaterialized, 1), 3),
            (
                ev.CellFailed(attempt=1, stage="run", error="x", classification="infrastructure"),
                4,
            ),
            (ev.CellRetried(attempt=2, reason="infra"), 5),
        ]
    )
    assert state is not None
    assert (state.status, state.attempt, state.version) == (S.SUBMITTED, 2, 5)
    assert state.paused and state.infra_failures == 1
    assert state.failed is None and state.workspace is None and state.ended_at_ms is None
    assert state.submitted_at_ms == 1 and state.updated_at_ms == 5
    # The new attempt runs the machine again, with its own attempt number.
    state = apply(state, sample(ev.CellMaterialized, 2), 6)
    assert state.status == S.MATERIALIZED and state.run_dir is not None
    with pytest.raises(IllegalTransition):
        apply(state, sample(ev.RunStarted, 1), 7)


def test_capped_outputs_belong_to_their_attempt() -> None:
    state = state_in(S.COMPLETED)
    assert state is not None and state.capped_outputs == ()
    capped = ev.RunOutputCapped(attempt=1, path="/r/oc.jsonl", cap_bytes=10)
    state = apply(state, capped, 2000)
    assert state.status == S.COMPLETED and state.capped_outputs == ("/r/oc.jsonl",)
    state = apply(apply(state, sample(ev.CellVerified, 1), 2001), sample(ev.CellRecovered, 1), 2)
    assert state.capped_outputs == ("/r/oc.jsonl",)
    state = apply(state, ev.CellRetried(attempt=2, reason="operator"), 2003)
    assert state.capped_outputs == ()


def test_fold_accepts_recorded_and_pairs_alike() -> None:
    from events.base import Recorded

    pairs = [(sample(kind), 10 * i) for i, kind in enumerate(PATHS[S.RECOVERED])]
    recorded = [
        Recorded(
            seq=i + 1,
            stream="cell/x",
            version=i + 1,
            tag=event_tag(e),
            schema_version=1,
            recorded_at_ms=at,
            event=e,
        )
        for i, (e, at) in enumerate(pairs)
    ]
    assert fold(pairs) == fold(recorded)
    assert fold([]) is None


# -- properties -------------------------------------------------------------------


def _reachable() -> set[CellStatus]:
    seen: set[CellStatus] = set()
    frontier: list[CellStatus | None] = [None]
    while frontier:
        status = frontier.pop()
        for (before, _), after in TRANSITIONS.items():
            if before == status and after not in seen:
                seen.add(after)
                frontier.append(after)
    return seen


REACHABLE = _reachable()
CELL_KINDS = [k for k in ALL_KINDS if k.__module__ == "events.cell"]

# Each step: an event kind (mostly cell events, a few foreign ones), an attempt
# offset (0 = the attempt the state expects; others are wrong), and a time step.
steps = st.lists(
    st.tuples(
        st.sampled_from(CELL_KINDS + [k for k in ALL_KINDS if k not in CELL_KINDS][:3]),
        st.sampled_from([0, 0, 0, 0, 0, 0, 1, -1]),
        st.integers(min_value=0, max_value=10_000),
    ),
    max_size=60,
)


def run_steps(
    raw: list[tuple[type[Event], int, int]],
) -> tuple[list[tuple[Event, int]], list[tuple[Event, int]]]:
    """Feed the steps through apply, checking each against the table; return the
    accepted (event, at_ms) pairs and every pair generated, refused ones included."""
    state: CellState | None = None
    accepted: list[tuple[Event, int]] = []
    generated: list[tuple[Event, int]] = []
    refused = 0
    now = 1_000
    for kind, offset, dt in raw:
        now += dt
        base = state.attempt if state is not None else 1
        attempt = base + (1 if kind is ev.CellRetried else 0) + offset
        if kind is ev.CellSubmitted:
            attempt = 1 if offset >= 0 else 0  # any attempt >= 1 may open a cell
        event = sample(kind, attempt)
        generated.append((event, now))
        # Whether the event carries the attempt the machine is due to accept.
        due = attempt >= 1 if kind is ev.CellSubmitted else offset == 0
        due = due or "attempt" not in kind.__struct_fields__
        tag = event_tag(event)
        before = state.status if state is not None else None
        try:
            new = apply(state, event, now)
        except IllegalTransition:
            refused += 1
            # Refused only when the table forbids it, the attempt is not the one due, or
            # the state's one extra rule (refusal) says why.
            assert (
                next_status(before, tag) is None
                or not due
                or (state is not None and refusal(state, tag) is not None)
            )
            continue
        assert due
        assert new.status == next_status(before, tag)
        assert new.status in REACHABLE
        assert new.version == (state.version if state else 0) + 1
        if state is not None:
            assert new.attempt == state.attempt + (1 if kind is ev.CellRetried else 0)
            assert new.submitted_at_ms == state.submitted_at_ms
            if state.terminal:
                assert new.terminal or kind is ev.CellRetried
        state = new
        accepted.append((event, now))
    assert len(generated) == len(accepted) + refused
    return accepted, generated


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(steps)
def test_random_sequences_never_fold_into_an_illegal_state(
    raw: list[tuple[type[Event], int, int]],
) -> None:
    accepted, generated = run_steps(raw)
    final = fold(accepted)
    if final is not None:
        assert final.status in REACHABLE
        assert final.version == len(accepted)
        # A state always survives its stored form (the read model keeps it as JSON).
        assert decode_state(msgspec.json.encode(final)) == final
        assert row_of(final, 1)[7] == str(final.status)
    if len(generated) > len(accepted):
        # Folding the raw sequence, refused events included, raises rather than
        # producing a state.
        with pytest.raises(IllegalTransition):
            fold(generated)
    else:
        assert fold(generated) == final


@settings(max_examples=200)
@given(steps, st.integers(min_value=0, max_value=60))
def test_folding_all_at_once_equals_folding_incrementally(
    raw: list[tuple[type[Event], int, int]], cut: int
) -> None:
    accepted, _ = run_steps(raw)
    whole = fold(accepted)
    cut = min(cut, len(accepted))
    state = fold(accepted[:cut])
    for event, at in accepted[cut:]:
        state = apply(state, event, at)
    assert state == whole
    # And one step at a time through the stored form, as the projector does.
    stepped: CellState | None = None
    for event, at in accepted:
        stepped = apply(stepped, event, at)
        stepped = decode_state(msgspec.json.encode(stepped))
    assert stepped == whole


@settings(max_examples=200)
@given(steps)
def test_attempt_numbers_are_monotonic(raw: list[tuple[type[Event], int, int]]) -> None:
    accepted, _ = run_steps(raw)
    attempts: list[int] = []
    state: CellState | None = None
    for event, at in accepted:
        state = apply(state, event, at)
        attempts.append(state.attempt)
    assert attempts == sorted(attempts)
    assert all(b - a in (0, 1) for a, b in itertools.pairwise(attempts))
    retries = sum(1 for event, _ in accepted if isinstance(event, ev.CellRetried))
    if attempts:
        assert attempts[-1] == attempts[0] + retries


@given(steps)
def test_an_illegal_event_in_a_sequence_makes_fold_raise(
    raw: list[tuple[type[Event], int, int]],
) -> None:
    accepted, _ = run_steps(raw)
    # Insert an event no state accepts after the first: a second submission.
    if accepted:
        poisoned = [accepted[0], (ev.CellSubmitted(spec=make_spec()), 0), *accepted[1:]]
        with pytest.raises(IllegalTransition):
            fold(poisoned)
