"""`arenad report` as a user runs it: the real CLI in a subprocess over a real home."""

from __future__ import annotations

import asyncio
import json
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from arenad.home import Home, open_store
from tests.conftest import DemoRun
from tests.report.arena_log import build_arena

ARENAD = str(Path(sys.executable).parent / "arenad")


def arenad(home: Path, *args: str, code: int = 0) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [ARENAD, "--home", str(home), *args], capture_output=True, text=True, timeout=600
    )
    assert done.returncode == code, done.stderr
    return done


async def _last_seq(home: Path) -> int:
    async with open_store(Home(home)) as store:
        return await store.last_seq()


@pytest.fixture
def home(tmp_path: Path) -> Path:
    asyncio.run(build_arena(tmp_path / "home"))
    return tmp_path / "home"


def test_json_is_the_report_and_the_same_every_time(home: Path) -> None:
    first = arenad(home, "report", "--json").stdout
    assert arenad(home, "report", "--json").stdout == first
    doc = json.loads(first)
    alpha = doc["arms"][0]
    # Two campaigns: each one's arms apart, named by campaign.
    assert (alpha["arm"], alpha["resolved"], alpha["infra_failed"]) == ("arena/ALPHA", 5, 1)
    assert alpha["pass_at_k"] == {"1": 0.75, "2": 2 / 3}
    assert alpha["cost_usd"] is None
    (pair,) = [p for p in doc["pairs"] if (p["a"], p["b"]) == ("arena/ALPHA", "arena/BETA")]
    assert (pair["mcnemar_p"], pair["diff"], pair["diff_ci95"]) == (0.625, 0.5, [-0.125, 1.0])


def test_the_campaign_option_repeats(home: Path) -> None:
    one = json.loads(arenad(home, "report", "--json", "--campaign", "side").stdout)
    assert [a["arm"] for a in one["arms"]] == ["GAMMA"] and one["pairs"] == []
    both = arenad(home, "report", "--json", "--campaign", "side", "--campaign", "arena")
    assert both.stdout == arenad(home, "report", "--json").stdout


def test_the_table_and_the_page(home: Path, tmp_path: Path) -> None:
    page = tmp_path / "report.html"
    done = arenad(home, "report", "--html", str(page))
    for expected in ("Outcomes", "ALPHA", "71.4%", "[27.6, 94.2]", "≥$0.8750 (1 unknown)"):
        assert expected in done.stdout, expected
    text = page.read_text()
    assert text.startswith("<!DOCTYPE html>") and text.count("<svg") == 3
    assert "<script" not in text


def test_user_errors_are_one_line_and_write_nothing(home: Path, tmp_path: Path) -> None:
    before = asyncio.run(_last_seq(home))
    done = arenad(home, "report", "--campaign", "nope", code=2)
    assert (done.stdout, done.stderr) == (
        "",
        "arenad: no such campaign: nope (see `arenad status`)\n",
    )
    missing = tmp_path / "no-dir" / "r.html"
    done = arenad(home, "report", "--html", str(missing), code=2)
    assert done.stderr == f"arenad: cannot write {missing}: No such file or directory\n"
    assert done.stdout == ""
    empty = arenad(tmp_path / "nothing", "report", code=2)
    assert empty.stderr.startswith("arenad: no arenad store at ")
    assert asyncio.run(_last_seq(home)) == before


def _close(a: float | None, b: float) -> bool:
    return a is not None and math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)


@pytest.mark.slow
def test_the_report_agrees_with_status_on_a_real_demo(demo_run: DemoRun) -> None:
    home = demo_run.home
    status: list[dict[str, Any]] = json.loads(arenad(home, "status", "--json").stdout)["cells"]
    report = json.loads(arenad(home, "report", "--json").stdout)
    (arm,) = report["arms"]
    assert arm["arm"] == "SOLO" and arm["cells"] == len(status)
    # Every demo cell ran once and was recovered: each status row is one run.
    assert all(row["state"] == "recovered" for row in status)
    assert arm["scored"] == sum(bool(row["scored"]) for row in status)
    assert arm["resolved"] == sum(bool(row["scored"] and row["verify_pass"]) for row in status)
    assert arm["resolved"] > 0 and arm["infra_failed"] == 0
    assert arm["tokens_in"] == sum(row["tokens_in"] for row in status)
    assert arm["tokens_out"] == sum(row["tokens_out"] for row in status)
    assert _close(arm["cost_usd"], math.fsum(row["cost_usd"] for row in status))
    walls = sorted(row["wall_s"] for row in status)
    assert arm["wall_s_median"] == pytest.approx(
        (walls[(len(walls) - 1) // 2] + walls[len(walls) // 2]) / 2
    )
    instances = {row["instance_id"] for row in status}
    assert arm["instances"] == len(instances) and len(report["instances"]) == len(instances)


def test_as_of_shows_an_earlier_count_and_says_so(home: Path) -> None:
    now = json.loads(arenad(home, "report", "--json").stdout)
    then = json.loads(arenad(home, "report", "--json", "--as-of", "20").stdout)
    assert then["as_of_seq"] == 20 and now["as_of_seq"] is None
    cells = sum(a["cells"] for a in then["arms"])
    assert 0 < cells < sum(a["cells"] for a in now["arms"])
    assert "as the log stood at event 20" in arenad(home, "report", "--as-of", "20").stdout


def test_as_of_past_the_log_is_exit_2_in_one_line(home: Path) -> None:
    done = arenad(home, "report", "--as-of", "99999", code=2)
    assert done.stderr.strip().count("\n") == 0 and "--as-of 99999" in done.stderr
    assert "Traceback" not in done.stderr


def test_the_terminal_report_fits_columns_and_folds_nothing(home: Path) -> None:
    # COLUMNS is honoured off a terminal too; a table too wide prints as one block per row
    # (rich would otherwise fold its names and figures into "…").
    for width in (80, 60):
        done = subprocess.run(
            [ARENAD, "--home", str(home), "report"],
            capture_output=True,
            text=True,
            timeout=600,
            env={**os.environ, "COLUMNS": str(width)},
        )
        assert done.returncode == 0, done.stderr
        lines = done.stdout.splitlines()
        assert max(len(line) for line in lines) <= width, done.stdout
        assert "…" not in done.stdout
        for figure in ("arena/ALPHA", "71.4%", "[27.6, 94.2]", "@1=75.0% @2=66.7%", "0.625"):
            assert figure in done.stdout, figure
    # Off a terminal without COLUMNS the tables come whole.
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    whole = subprocess.run(
        [ARENAD, "--home", str(home), "report"], capture_output=True, text=True, env=env
    )
    assert "┃ arm" in whole.stdout and "…" not in whole.stdout
