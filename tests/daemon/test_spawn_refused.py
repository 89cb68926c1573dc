"""Issue 27, finding 5: a verify the machine refuses to start (EAGAIN, as a fork flood
outside any limit causes) is a retryable infrastructure failure with a one-line reason,
never a traceback, and the next attempt grades the cell."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from arenad.cell.retry import RetryPolicy
from arenad.daemon import steps
from arenad.daemon.daemon import DaemonOptions
from arenad.runs.groups import SpawnError
from events import cell as ev
from tests.conftest import make_repo
from tests.daemon.inprocess import init_and_submit, running_daemon
from tests.daemon.support import command_campaign

CELL = "eagain:i1:CMD:0"


async def test_a_verify_refused_by_the_machine_is_retried_with_a_one_line_reason(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = steps.verify_step
    calls = []

    async def refused_once(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        if len(calls) == 1:
            raise SpawnError(
                ["bash", "-c", "true"], "BlockingIOError: Resource temporarily unavailable"
            )
        return await real(*args, **kwargs)

    monkeypatch.setattr(steps, "verify_step", refused_once)
    repo = tmp_path / "repo"
    base = make_repo(repo, {"a.txt": "a\n"})
    camp = command_campaign(
        tmp_path / "c.toml",
        name="eagain",
        repo=repo,
        base=base,
        argv=["bash", "-c", "echo fixed > fix.txt"],
        verify_cmd="test -f fix.txt",
    )
    home = tmp_path / "home"
    await init_and_submit(home, camp)
    options = DaemonOptions(until_idle=True, retry=RetryPolicy(backoff_s=0.0))
    async with running_daemon(home, options) as daemon:
        assert await daemon.stopped(timeout_s=120) == 0
        events = await daemon.events(CELL)
    (failed,) = [e for e in events if isinstance(e, ev.CellFailed)]
    assert failed.classification == "infrastructure" and failed.retryable
    assert failed.stage == "verify"
    assert "Traceback" not in failed.error and "\n" not in failed.error
    assert "Resource temporarily unavailable" in failed.error
    verified = [e for e in events if isinstance(e, ev.CellVerified)]
    assert [(v.attempt, v.verify_pass) for v in verified] == [(2, True)]
