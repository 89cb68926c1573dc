"""The runner's one table from exception to failure (issue 28): every guarded step has rows,
each row keeps the stage, retryability and wording the runner recorded before the table, and
an exception no row names propagates (to the daemon's crash record), never recorded as the
cell's failure."""

from __future__ import annotations

from pathlib import Path
from typing import Any, get_args

import pytest

from arenad.arms import ProvenanceError
from arenad.cell.retry import RetryPolicy
from arenad.daemon import failures, steps
from arenad.daemon.daemon import DaemonOptions
from arenad.daemon.failures import FAILURES, Failure, StepFailed, failure_for, guarded
from arenad.materialize import MaterializeError
from arenad.runs.groups import SpawnError
from arenad.sandbox.confine import SandboxError
from arenad.verdict.grade import GradeError
from events import cell as ev
from tests.conftest import make_repo
from tests.daemon.inprocess import init_and_submit, running_daemon
from tests.daemon.support import command_campaign

SPAWN = SpawnError(["agent"], "BlockingIOError: Resource temporarily unavailable")

# (step, exception) -> what the runner recorded for it before the table existed.
CASES: list[tuple[failures.Step, Exception, Failure]] = [
    (
        "materialize",
        MaterializeError("clone-fail", "no such repo"),
        Failure("clone-fail", True, "clone-fail: no such repo"),
    ),
    (
        "materialize",
        MaterializeError("config", "the git materializer needs materializer.source"),
        Failure("config", False, "config: the git materializer needs materializer.source"),
    ),
    ("materialize", OSError("disk full"), Failure("materialize", True, "OSError: disk full")),
    ("before_start", ProvenanceError("who?"), Failure("provenance", False, "who?")),
    (
        "before_start",
        PermissionError("denied"),
        Failure("provenance", True, "PermissionError: denied"),
    ),
    ("prepare", SandboxError("no bwrap"), Failure("launch", False, "no bwrap")),
    ("prepare", OSError("gone"), Failure("launch", True, "OSError: gone")),
    ("start", SPAWN, Failure("launch", True, str(SPAWN))),
    ("patch", ValueError("bad diff"), Failure("patch", False, "ValueError: bad diff")),
    ("patch", SPAWN, Failure("patch", False, f"SpawnError: {SPAWN}")),
    ("verify", GradeError("no checkout"), Failure("grade", True, "no checkout")),
    ("verify", SPAWN, Failure("verify", True, str(SPAWN))),
]


def test_every_guarded_step_has_rows_and_every_row_is_exercised() -> None:
    assert set(FAILURES) == set(get_args(failures.Step))
    assert all(FAILURES[step] for step in FAILURES)
    exercised = {
        (step, rule.catches)
        for step, exc, _ in CASES
        for rule in FAILURES[step]
        if isinstance(exc, rule.catches)
    }
    assert exercised == {(step, rule.catches) for step in FAILURES for rule in FAILURES[step]}


@pytest.mark.parametrize(("step", "exc", "expected"), CASES)
def test_a_named_exception_is_the_failure_recorded_before_the_table(
    step: failures.Step, exc: Exception, expected: Failure
) -> None:
    assert failure_for(step, exc) == expected


class _NotAnError(BaseException):
    pass


@pytest.mark.parametrize("step", get_args(failures.Step))
async def test_an_exception_no_row_names_propagates_unrecorded(step: failures.Step) -> None:
    recorded: list[Failure] = []

    async def record(failure: Failure) -> None:
        recorded.append(failure)

    # The patch step's catch-all row takes any Exception; a BaseException passes every row.
    unknown: BaseException = _NotAnError() if step == "patch" else RuntimeError("a bug")
    with pytest.raises(type(unknown)):
        async with guarded(step, record):
            raise unknown
    assert recorded == []


async def test_a_named_exception_is_recorded_then_stops_the_step() -> None:
    recorded: list[Failure] = []

    async def record(failure: Failure) -> None:
        recorded.append(failure)

    with pytest.raises(StepFailed):
        async with guarded("verify", record):
            raise GradeError("no checkout")
    assert recorded == [Failure("grade", True, "no checkout")]


async def test_a_step_raising_what_the_table_does_not_name_is_the_daemons_crash_record(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Through the real daemon: the runner does not record it as a step's failure; the
    daemon's crash record does (stage = the cell's status, a one-line reason)."""

    async def buggy(*args: Any, **kwargs: Any) -> Any:
        raise LookupError("a bug in verify")

    monkeypatch.setattr(steps, "verify_step", buggy)
    repo = tmp_path / "repo"
    base = make_repo(repo, {"a.txt": "a\n"})
    camp = command_campaign(
        tmp_path / "c.toml",
        name="unnamed",
        repo=repo,
        base=base,
        argv=["bash", "-c", "echo fixed > fix.txt"],
        verify_cmd="test -f fix.txt",
    )
    home = tmp_path / "home"
    await init_and_submit(home, camp)
    options = DaemonOptions(until_idle=True, retry=RetryPolicy(backoff_s=0.0))
    async with running_daemon(home, options) as daemon:
        await daemon.stopped(timeout_s=120)
        events = await daemon.events("unnamed:i1:CMD:0")
    (failed,) = [e for e in events if isinstance(e, ev.CellFailed)]
    assert failed.stage == "completed"
    assert failed.error.startswith("the daemon's step failed: LookupError: a bug in verify")
    assert not any(isinstance(e, ev.CellVerified) for e in events)
