"""A campaign's spend cap, with the real opencode CLI against the scripted model: the daemon
stops starting cells once the spend reaches the cap, the cells it never started stay
submitted, ``set-budget`` lets it go on, and the spend shown is the cells' recovered cost."""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from arenad.app import init_home
from arenad.app.submit import submit_campaign
from arenad.daemon.daemon import DaemonOptions, run_daemon
from arenad.home import Home
from events import cell as ev
from events.control import BudgetReached
from tests.conftest import make_repo
from tests.daemon.support import cli, read_all, status_json
from tests.opencode_support import RunningModel

PROMPT, CACHED, COMPLETION, REASONING = 900, 100, 40, 5
# opencode's cost of one step: (input x 3 + (output + reasoning) x 15 + cache read x 0.3) / 1e6
STEP_USD = ((PROMPT - CACHED) * 3.0 + COMPLETION * 15.0 + CACHED * 0.3) / 1e6
CELL_USD = 2 * STEP_USD  # two model calls per cell: the edit, then the final text
INSTANCES = ("add-1", "add-2", "add-3", "add-4")


def _script(delay_s: float = 0.0) -> str:
    cmd = "sed -i 's/a - b/a + b/' add.py"
    return f"""
final_text = "Done."
[usage]
prompt_tokens = {PROMPT}
completion_tokens = {COMPLETION}
cached_tokens = {CACHED}
reasoning_tokens = {REASONING}
[[models]]
id = "fixer"
cost = {{ input = 3.0, output = 15.0, cache_read = 0.3 }}
[[conversations]]
name = "add"
match = "[add]"
[[conversations.steps]]
text = "Fixing add.py."
[[conversations.steps.tool_calls]]
name = "bash"
arguments = {{ command = {json.dumps(cmd)}, description = "fix" }}
[[conversations.steps]]
delay_s = {delay_s}
text = "Fixed add.py."
"""


def _campaign(path: Path, repo: Path, base: str, opencode: Path, budget: str) -> Path:
    lines = [
        f'name = "{path.stem}"',
        "max_parallel = 1",
        budget,
        "[materializer]",
        'kind = "git"',
        f"source = {json.dumps(str(repo))}",
    ]
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


def _setup(
    tmp_path: Path,
    opencode_bin: Path,
    scripted_model: Callable[[str], RunningModel],
    *,
    name: str,
    budget: str,
    delay_s: float = 0.0,
) -> tuple[Home, dict[str, str]]:
    home = Home(tmp_path / "home")
    repo = tmp_path / "repo"
    base = make_repo(repo, {"add.py": "def add(a, b):\n    return a - b\n"})
    model = scripted_model(_script(delay_s))
    env = {
        **os.environ,
        "OPENCODE_CONFIG_CONTENT": json.dumps(model.opencode_config(provider_id="scripted")),
    }
    camp = _campaign(tmp_path / f"{name}.toml", repo, base, opencode_bin, budget)

    async def go() -> None:
        await init_home(home)
        await submit_campaign(home, camp)

    asyncio.run(go())
    return home, env


def _daemon(home: Home, env: dict[str, str]) -> None:
    asyncio.run(run_daemon(home, DaemonOptions(max_parallel=1, until_idle=True), env))


def _cells(home: Home, name: str) -> dict[str, list[object]]:
    out: dict[str, list[object]] = {}
    for r in read_all(home.root):
        if r.stream.startswith(f"cell/{name}:"):
            out.setdefault(r.stream.removeprefix("cell/"), []).append(r.event)
    return out


def _recovered_cost(events: list[object]) -> float:
    costs = [e.spend.cost_usd for e in events if isinstance(e, ev.CellRecovered)]
    assert all(c is not None for c in costs)
    return sum(c for c in costs if c is not None)


@pytest.mark.slow
def test_a_cap_stops_new_cells_and_set_budget_lets_them_run(
    tmp_path: Path, opencode_bin: Path, scripted_model: Callable[[str], RunningModel]
) -> None:
    cap = 1.5 * CELL_USD  # below the cost of two cells, above one
    home, env = _setup(
        tmp_path, opencode_bin, scripted_model, name="cap", budget=f"[budget]\nmax_usd = {cap}"
    )
    _daemon(home, env)

    cells = _cells(home, "cap")
    ids = [f"cap:{iid}:SOLO:0" for iid in INSTANCES]
    # One cell at a time: the first left the spend under the cap, the second crossed it
    # while it ran and finished; nothing more started.
    for cell in ids[:2]:
        assert isinstance(cells[cell][-1], ev.CellRecovered), cells[cell]
    for cell in ids[2:]:
        assert [type(e) for e in cells[cell]] == [ev.CellSubmitted]
    reached = [r.event for r in read_all(home.root) if isinstance(r.event, BudgetReached)]
    assert len(reached) == 1
    assert reached[0].max_usd == cap and reached[0].spent_usd >= cap
    assert reached[0].unknown_attempts == 0

    spent = sum(_recovered_cost(cells[c]) for c in ids[:2])
    assert spent == pytest.approx(2 * CELL_USD, rel=1e-9)
    doc = status_json(home.root)
    assert doc["counts"] == {"recovered": 2, "submitted": 2}  # not counted as failures
    [figures] = doc["campaigns"]
    assert figures["spent_usd"] == pytest.approx(spent, abs=1e-12)
    assert figures["recovered_usd"] == pytest.approx(spent, abs=1e-12)
    assert (figures["cap_usd"], figures["at_cap"], figures["unknown_attempts"]) == (cap, True, 0)
    table = cli(home.root, "status")
    assert f"spend cap: ${spent:.4f} of ${cap:g} cap (reached: no new cell starts)" in (
        table.stdout
    )

    # A raised cap lets the daemon go on.
    raised = cli(home.root, "set-budget", "cap", "1")
    assert raised.returncode == 0 and "spend cap $1" in raised.stdout
    _daemon(home, env)
    cells = _cells(home, "cap")
    for cell in ids:
        assert isinstance(cells[cell][-1], ev.CellRecovered), cells[cell]
    spent = sum(_recovered_cost(cells[c]) for c in ids)
    line = json.loads(cli(home.root, "campaigns", "--json").stdout)[0]
    assert line["spent_usd"] == pytest.approx(spent, abs=1e-12)
    assert line["cells"] == {"recovered": 4} and line["at_cap"] is False
    assert len([r for r in read_all(home.root) if isinstance(r.event, BudgetReached)]) == 1


@pytest.mark.slow
def test_abort_running_aborts_the_run_that_crossed_the_cap(
    tmp_path: Path, opencode_bin: Path, scripted_model: Callable[[str], RunningModel]
) -> None:
    # The second model call waits: the first step's cost (reported live, in the stream)
    # already crosses the cap, and the running cell is aborted before it finishes.
    home, env = _setup(
        tmp_path,
        opencode_bin,
        scripted_model,
        name="abrt",
        budget=f"[budget]\nmax_usd = {0.5 * STEP_USD}\nabort_running = true",
        delay_s=60,
    )
    _daemon(home, env)
    cells = _cells(home, "abrt")
    first = cells["abrt:add-1:SOLO:0"]
    aborted = [e for e in first if isinstance(e, ev.RunAborted)]
    assert len(aborted) == 1 and aborted[0].reason.startswith("campaign budget reached")
    # The cap is the operator's: the run is interrupted (issue 29), never verified nor
    # counted; its spend is recovered all the same, and it waits for `retry`.
    assert aborted[0].cause == "operator"
    assert not [e for e in first if isinstance(e, ev.CellVerified)]
    assert any(isinstance(e, ev.CellRecovered) for e in first)
    assert isinstance(first[-1], ev.CellFailed) and first[-1].stage == "interrupted"
    for iid in INSTANCES[1:]:
        assert [type(e) for e in cells[f"abrt:{iid}:SOLO:0"]] == [ev.CellSubmitted]
    [reached] = [r.event for r in read_all(home.root) if isinstance(r.event, BudgetReached)]
    assert reached.action == "abort" and reached.running == 1


# -- without a model: a command arm that prints opencode's step_finish lines ------------

# A step as opencode prints it (argv is a str.format template: braces doubled).
STEP = (
    '{{"type":"step_finish","part":{{"type":"step-finish","cost":0.4,'
    '"tokens":{{"input":1,"output":1,"reasoning":0,"cache":{{"read":0,"write":0}}}}}}}}'
)


def _command_home(tmp_path: Path, argv: list[str], extra: str = "") -> Home:
    from tests.daemon.support import command_campaign

    home = Home(tmp_path / "home")
    repo = tmp_path / "repo"
    base = make_repo(repo, {"a.txt": "a\n"})
    camp = command_campaign(
        tmp_path / "cmd.toml",
        name="cmd",
        repo=repo,
        base=base,
        argv=argv,
        instances=("i1", "i2", "i3"),
        extra=extra,
    )

    async def go() -> None:
        await init_home(home)
        await submit_campaign(home, camp)

    asyncio.run(go())
    return home


def test_the_daemons_max_usd_caps_every_campaign(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from arenad.daemon.daemon import EXIT_AT_CAP
    from events.control import DaemonStarted

    home = _command_home(tmp_path, ["bash", "-c", f"echo '{STEP}'"])
    options = DaemonOptions(max_parallel=1, until_idle=True, max_usd=0.3)
    # Idle at the cap with cells left: its own exit status and one paragraph saying so
    # (issue 29: it exited 0 with 68 cells never started).
    assert asyncio.run(run_daemon(home, options, dict(os.environ))) == EXIT_AT_CAP
    assert (
        "arenad daemon: idle at a spend cap: campaign cmd: $0.4000 spent of its $0.3 cap;"
        " 2 cell(s) never started, 2 of 3 unfinished."
    ) in capsys.readouterr().err
    cells = _cells(home, "cmd")
    # The first cell's live cost (its stream's step, as it was ingested) crossed the cap;
    # the others never started.
    assert [type(cells[f"cmd:i{n}:CMD:0"][-1]) for n in (1, 2, 3)] == [
        ev.CellRecovered,
        ev.CellSubmitted,
        ev.CellSubmitted,
    ]
    recorded = read_all(home.root)
    [reached] = [r.event for r in recorded if isinstance(r.event, BudgetReached)]
    assert (reached.source, reached.max_usd, reached.spent_usd) == ("daemon", 0.3, 0.4)
    assert [r.event.max_usd for r in recorded if isinstance(r.event, DaemonStarted)] == [0.3]
    # Recovered, a command arm's cost is unknown (as the report says), not the stream's:
    # the hold stays, as the log says the cap was reached.
    assert asyncio.run(run_daemon(home, options, dict(os.environ))) == EXIT_AT_CAP
    assert isinstance(_cells(home, "cmd")["cmd:i2:CMD:0"][-1], ev.CellSubmitted)
    # Without the daemon's cap the campaign has none: the next daemon runs the rest.
    assert asyncio.run(run_daemon(home, DaemonOptions(until_idle=True), dict(os.environ))) == 0
    assert isinstance(_cells(home, "cmd")["cmd:i3:CMD:0"][-1], ev.CellRecovered)
    [figures] = status_json(home.root)["campaigns"]
    assert (figures["unknown_attempts"], figures["cap_usd"]) == (3, None)


def test_unknown_cost_is_shown_as_unknown_and_never_reaches_a_cap(tmp_path: Path) -> None:
    home = _command_home(tmp_path, ["true"], extra="[budget]\nmax_usd = 0.01")
    asyncio.run(run_daemon(home, DaemonOptions(until_idle=True), dict(os.environ)))
    cells = _cells(home, "cmd")
    assert all(isinstance(events[-1], ev.CellRecovered) for events in cells.values())
    [figures] = status_json(home.root)["campaigns"]
    assert (figures["spent_usd"], figures["unknown_attempts"], figures["at_cap"]) == (0, 3, False)
    table = cli(home.root, "status").stdout
    assert "spend cmd: $0.0000 of $0.01 cap (+ 3 attempt(s) of unknown cost)" in table
    line = cli(home.root, "campaigns").stdout.splitlines()[1]
    assert "$0.0000 + 3 unknown" in line and "$0.01" in line
