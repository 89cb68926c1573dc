"""A capped campaign with several cells at once, with a real daemon, the real opencode CLI
against the scripted model (issue 29, finding 7: a $0.50 cap ended at $0.81 with runs in
flight): with the prior ``[budget] expected_usd_per_attempt`` the first cells start together,
the recorded spend stays within the cap plus the bound docs/operations.md states ("Budget
reservations"), and the cells never started are held (submitted), not failed."""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from arenad.app import init_home
from arenad.app.submit import submit_campaign
from arenad.daemon.daemon import EXIT_AT_CAP, DaemonOptions, run_daemon
from arenad.home import Home
from events import cell as ev
from events.control import BudgetReached, CampaignSubmitted
from tests.conftest import make_repo
from tests.daemon.support import read_all, status_json
from tests.daemon.test_budget import CELL_USD, _script
from tests.opencode_support import RunningModel

INSTANCES = tuple(f"add-{n}" for n in range(1, 7))
PARALLEL = 3


def _campaign(path: Path, repo: Path, base: str, opencode: Path, budget: str) -> Path:
    lines = [f'name = "{path.stem}"', f"max_parallel = {PARALLEL}", budget]
    lines += ["[materializer]", 'kind = "git"', f"source = {json.dumps(str(repo))}"]
    for iid in INSTANCES:
        lines += [
            "[[instances]]",
            f'instance_id = "{iid}"',
            f'base_commit = "{base}"',
            'problem_statement = "[add] add() in add.py is wrong; fix it."',
            "verify_cmd = \"python3 -c 'from add import add; assert add(2, 3) == 5'\"",
        ]
    lines += [
        "[[arms]]",
        'name = "SOLO"',
        'kind = "solo"',
        'model = "scripted/fixer"',
        "timeout_s = 120",
        "kill_grace_s = 1",
        f"opencode_bin = {json.dumps(str(opencode))}",
    ]
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.mark.slow
def test_a_prior_lets_cells_start_together_and_the_cap_holds_within_the_bound(
    tmp_path: Path, opencode_bin: Path, scripted_model: Callable[[str], RunningModel]
) -> None:
    cap, prior = 2.5 * CELL_USD, CELL_USD
    home = Home(tmp_path / "home")
    repo = tmp_path / "repo"
    base = make_repo(repo, {"add.py": "def add(a, b):\n    return a - b\n"})
    # The final step waits a little, so the runs of the cells started together overlap.
    model = scripted_model(_script(delay_s=2.0))
    env = {
        **os.environ,
        "OPENCODE_CONFIG_CONTENT": json.dumps(model.opencode_config(provider_id="scripted")),
    }
    budget = f"[budget]\nmax_usd = {cap}\nexpected_usd_per_attempt = {prior}"
    camp = _campaign(tmp_path / "pri.toml", repo, base, opencode_bin, budget)

    async def go() -> int:
        await init_home(home)
        await submit_campaign(home, camp)
        return await run_daemon(home, DaemonOptions(max_parallel=PARALLEL, until_idle=True), env)

    assert asyncio.run(go()) == EXIT_AT_CAP
    recorded = read_all(home.root)
    [submitted] = [r.event for r in recorded if isinstance(r.event, CampaignSubmitted)]
    assert submitted.expected_usd_per_attempt == prior  # the fold reads it from the log

    cells: dict[str, list[object]] = {}
    for r in recorded:
        if r.stream.startswith("cell/pri:"):
            cells.setdefault(r.stream.removeprefix("cell/"), []).append(r.event)
    ran = [c for c, events in cells.items() if any(isinstance(e, ev.RunStarted) for e in events)]
    held = sorted(set(cells) - set(ran))
    # The cells that ran finished; the others were never started and are held, not failed.
    for cell in ran:
        assert isinstance(cells[cell][-1], ev.CellRecovered), cells[cell]
    for cell in held:
        assert [type(e) for e in cells[cell]] == [ev.CellSubmitted]
    assert held, "the cap stopped nothing"

    # The prior reserved for the cells being set up: two (2 x prior <= cap < 3 x prior)
    # started together, before either run ended (without a prior: one at a time).
    seq = {
        (r.stream.removeprefix("cell/"), type(r.event)): r.seq
        for r in recorded
        if r.stream.startswith("cell/pri:")
    }
    first_end = min(seq[(c, ev.RunCompleted)] for c in ran)
    together = [c for c in ran if seq[(c, ev.RunStarted)] < first_end]
    assert len(together) == 2, together

    # The bound: the cap + the overruns beyond the expectation (none: the prior is the
    # true cost) + a lone last start's expectation.
    spent = 0.0
    for cell in ran:
        [recovered] = [e for e in cells[cell] if isinstance(e, ev.CellRecovered)]
        assert recovered.spend.cost_usd is not None
        spent += recovered.spend.cost_usd
    assert spent == pytest.approx(len(ran) * CELL_USD, rel=1e-9)
    assert cap <= spent <= cap + prior + 1e-12
    [reached] = [r.event for r in recorded if isinstance(r.event, BudgetReached)]
    assert reached.max_usd == cap and reached.action == "hold"
    doc = status_json(home.root)
    assert doc["counts"] == {"recovered": len(ran), "submitted": len(held)}
    [figures] = doc["campaigns"]
    assert figures["spent_usd"] == pytest.approx(spent, abs=1e-12)
    assert (figures["at_cap"], figures["unknown_attempts"]) == (True, 0)
