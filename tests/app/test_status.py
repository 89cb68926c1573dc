"""`arenad status` that pages (issue 29): --state, --limit, --summary, and a reason column
that keeps the cause (cut in its middle, or whole with --wide); error text that names its
stage once."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import pytest

from arenad.app.log import init_home, status
from arenad.app.views import REASON_WIDTH, _cut, status_table
from arenad.errors import UserError
from arenad.home import Home, open_store
from arenad.materialize import MaterializeError
from arenad.runs.commands import CommandError
from events import cell as ev
from events.base import Event
from events.cell import CellSubmitted
from events.streams import cell_stream
from tests.events.samples import make_spec

REPO_ROOT = Path(__file__).resolve().parents[2]
CAUSE = "Error: No such image: swebench/sweb.eval.x86_64.astropy__astropy-12907:latest"


def _docker_failure() -> MaterializeError:
    stderr = CAUSE
    err = CommandError("create-fail", ["docker", "create", "--name", "c1", "img"], 1, stderr)
    return MaterializeError("create-fail", str(err))


def test_the_stage_is_named_once() -> None:
    exc = _docker_failure()
    assert str(exc).count("create-fail") == 1
    assert str(exc).startswith("create-fail: docker create")
    assert exc.message.startswith("docker create")
    assert str(MaterializeError("clone-fail", "no such repository")) == (
        "clone-fail: no such repository"
    )


def test_the_reason_is_cut_in_its_middle_keeping_the_cause() -> None:
    text = str(_docker_failure())
    cut = _cut(text, REASON_WIDTH)
    assert len(cut) == REASON_WIDTH
    assert cut.startswith("create-fail: docker") and cut.endswith(CAUSE[-30:])
    assert _cut("short", REASON_WIDTH) == "short"


def _fill(home: Home, failed: int, submitted: int) -> None:
    async def go() -> None:
        await init_home(home)
        async with open_store(home) as store:
            for i in range(failed + submitted):
                spec = make_spec(instance_id=f"i{i:03d}")
                events: list[Event] = [CellSubmitted(spec=spec)]
                if i < failed:
                    events.append(
                        ev.CellFailed(
                            attempt=1,
                            stage="create-fail",
                            error=str(_docker_failure()),
                            classification="infrastructure",
                        )
                    )
                await store.append(cell_stream(spec.cell_id), 0, events)

    asyncio.run(go())


def test_state_limit_and_summary(tmp_path: Path) -> None:
    home = Home(tmp_path / "home")
    _fill(home, failed=3, submitted=5)
    only = asyncio.run(status(home, state="failed"))
    assert [r["state"] for r in only["cells"]] == ["failed"] * 3 and not only["more"]
    first = asyncio.run(status(home, limit=2))
    assert len(first["cells"]) == 2 and first["more"]
    summary = asyncio.run(status(home, summary=True))
    assert summary["cells"] == [] and summary["counts"] == {"failed": 3, "submitted": 5}
    assert summary["campaigns"] == []  # no spend fold: fast at any size
    text = status_table(
        summary["count_list"],
        [],
        by_campaign=summary["by_campaign"],
        by_arm=summary["by_arm"],
    )
    assert text.splitlines() == [
        "states: failed 3, submitted 5",
        "campaign demo: 8 cell(s): failed 3, submitted 5",
        "  arm SOLO: 8 cell(s), resolved 0 of 0 decided, scored 0: infra_failed 3, pending 5",
    ]
    table = status_table(first["count_list"], first["cells"], more=True)
    assert table.splitlines()[-1] == "... more cells not shown (the first 2; raise --limit)"
    wide = status_table(only["count_list"], only["cells"], wide=True)
    assert CAUSE in wide and str(_docker_failure()) in wide
    with pytest.raises(UserError, match="--state must be one of submitted"):
        asyncio.run(status(home, state="nope"))
    with pytest.raises(UserError, match="--limit must be at least 1"):
        asyncio.run(status(home, limit=0))


def test_the_cli(tmp_path: Path) -> None:
    home = Home(tmp_path / "home")
    _fill(home, failed=2, submitted=1)

    def arenad(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "cli", "--home", str(home.root), "status", *args],
            capture_output=True, text=True, cwd=REPO_ROOT, check=False,
        )  # fmt: skip

    out = arenad("--state", "failed", "--limit", "1")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[-1].startswith("... more cells not shown")
    assert sum("create-fail" in line for line in lines) == 1
    assert CAUSE[-20:] in out.stdout
    bad = arenad("--state", "nope")
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1


def test_a_supervisor_rows_cost_names_its_record_and_its_workers() -> None:
    # The cost column is the cost of record: a supervisor's driver total, the captured
    # worker sessions beside it under their name; a solo row has one figure.
    base = {
        "arm": "A",
        "rep": 0,
        "attempt": 1,
        "state": "recovered",
        "paused": False,
        "wall_s": 1.0,
        "scored": True,
        "verify_pass": True,
        "tokens_in": 1,
        "tokens_out": 1,
    }
    rows = [
        {
            **base,
            "cell_id": "c:i1:A:0",
            "cost_usd": 0.0934,
            "driver_usd": 0.02,
            "workers_usd": 0.0934,
        },
        {**base, "cell_id": "c:i2:A:0", "cost_usd": 0.5},
    ]
    text = status_table([("recovered", 2)], rows)
    (sup,) = [line for line in text.splitlines() if line.startswith("c:i1")]
    (solo,) = [line for line in text.splitlines() if line.startswith("c:i2")]
    assert "0.0200 (workers 0.0934)" in sup
    assert "0.5000" in solo and "workers" not in solo
