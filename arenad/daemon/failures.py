"""Which exception of which runner step is a recorded failure of the cell, and how.

One table, keyed by (step, exception class), gives the failure's stage, whether the retry
policy may make a new attempt of it, and how its reason is worded. An exception that no row
of its step names is not the cell's failure: it propagates to the daemon, which records the
runner's crash (never swallowed, never sent to the circuit breaker as the cell's outcome).

Rows of a step are tried in order, first match wins (``isinstance``, so a subclass matches).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Literal, NamedTuple

from arenad.arms import ProvenanceError
from arenad.materialize import MaterializeError
from arenad.runs.groups import SpawnError
from arenad.sandbox.confine import SandboxError
from arenad.verdict.grade import GradeError

# The runner's guarded steps, in the order a cell meets them.
Step = Literal["materialize", "before_start", "prepare", "start", "patch", "verify"]

# "message": the exception's own text (it names what failed); "typed": "Type: message" (an
# OSError's text alone does not say what it is).
Wording = Literal["message", "typed"]

# A stage that fails alike on every attempt (the campaign's config), whatever its row says.
FINAL_STAGES = frozenset({"config"})


class Rule(NamedTuple):
    catches: type[Exception]
    # None: the exception's own ``stage`` (MaterializeError's, the reference's labels).
    stage: str | None
    retryable: bool
    wording: Wording


class Failure(NamedTuple):
    """What the runner records as the cell's CellFailed."""

    stage: str
    retryable: bool
    error: str


FAILURES: Mapping[Step, tuple[Rule, ...]] = {
    "materialize": (
        Rule(MaterializeError, None, True, "message"),
        Rule(OSError, "materialize", True, "typed"),
    ),
    # An arm whose identity is unknown launches nothing: a new attempt would not know more.
    "before_start": (
        Rule(ProvenanceError, "provenance", False, "message"),
        Rule(OSError, "provenance", True, "typed"),
    ),
    # What the campaign asks cannot be confined here: a new attempt would fail alike.
    "prepare": (
        Rule(SandboxError, "launch", False, "message"),
        Rule(OSError, "launch", True, "typed"),
    ),
    "start": (Rule(SpawnError, "launch", True, "message"),),
    # Whatever stops the patch's extraction, the workspace is the attempt's evidence: it is
    # recorded as it is, never redone.
    "patch": (Rule(Exception, "patch", False, "typed"),),
    "verify": (
        Rule(GradeError, "grade", True, "message"),
        # The machine refused a process (EAGAIN: a fork flood elsewhere, a full table): not
        # the agent's result. One line, and a new attempt.
        Rule(SpawnError, "verify", True, "message"),
    ),
}


def failure_for(step: Step, exc: Exception) -> Failure | None:
    """The failure ``exc`` raised by ``step`` is recorded as, or None: not the cell's."""
    for rule in FAILURES[step]:
        if not isinstance(exc, rule.catches):
            continue
        stage = rule.stage if rule.stage is not None else str(getattr(exc, "stage", step))
        error = f"{type(exc).__name__}: {exc}" if rule.wording == "typed" else str(exc)
        return Failure(stage, rule.retryable and stage not in FINAL_STAGES, error)
    return None


class StepFailed(Exception):
    """The step's failure is recorded: the walk goes on from what the log now says."""


@contextlib.asynccontextmanager
async def guarded(step: Step, record: Callable[[Failure], Awaitable[None]]) -> AsyncIterator[None]:
    """Run the block as ``step``: an exception the table names is recorded (``record``) and
    becomes :class:`StepFailed`; any other propagates as it is."""
    try:
        yield
    except Exception as exc:
        failure = failure_for(step, exc)
        if failure is None:
            raise
        await record(failure)
        raise StepFailed(failure.stage) from exc
