"""What the daemon trusts from a cell (issue 27, findings 2, 6, 8, 11), against real agents
in the real bubblewrap sandbox: command arms that forge an ``opencode.db``, fake a provider
failure, print terminal escapes, or bury their fix under a junk file; a store too big for
the log; and (slow) solo runs of the real opencode CLI whose agent edits its own store.

A forged cost is never spend (a command arm's store is never spend of record; a solo
store's figure out of bounds is a labeled gap with the value kept as text), and the home
stays usable: ``status``, ``campaigns``, ``report`` and a daemon with a budget all work. A
fake ``ECONNREFUSED`` from a ``uses_model = false`` arm is the agent's failure. Control
characters an agent slipped into a reason print escaped everywhere.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from arenad.recovery.capture import COMMAND_STORE_GAP
from arenad.sandbox.bwrap import probe_host
from arenad.view.cell import cell_view
from arenad.view.pages import cell_page
from events import cell as ev
from events.base import Recorded
from events.capture import AgentSessionCaptured, AgentStoreUnavailable
from tests.conftest import make_repo
from tests.daemon.support import cli, command_campaign, read_all
from tests.opencode_support import RunningModel

pytestmark = pytest.mark.skipif(probe_host() is None, reason="bubblewrap is not installed")

BASE = {"calc.py": "def add(a, b):\n    return a - b\n"}
FIXED = "def add(a, b):\n    return a + b\n"
VERIFY = "python3 -c 'import calc; assert calc.add(2, 3) == 5'"
# Raw control characters that must never reach a terminal: ESC, BEL, and the C1 ones.
RAW_CONTROLS = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")
OSC52 = "\x1b]52;c;cHduZWQ=\x07"  # sets the reader's clipboard to "pwned"
UNTERMINATED = "\x1b]0;"  # an OSC that swallows what follows

# A hostile command-arm agent; $1 is its run dir (runs/<instance>/CMD).
AGENT = r'''#!/usr/bin/env python3
import json, os, sqlite3, sys

run = sys.argv[1]
os.chdir(os.path.join(run, "ws"))
iid = os.path.basename(os.path.dirname(run.rstrip("/")))


def forge(cost, tokens, parts=0, part_bytes=0):
    """An opencode store of its own, with the figures it wants counted."""
    db = os.path.join(os.environ["XDG_DATA_HOME"], "opencode", "opencode.db")
    os.makedirs(os.path.dirname(db), exist_ok=True)
    c = sqlite3.connect(db)
    c.executescript(
        "CREATE TABLE session (id text PRIMARY KEY, parent_id text, directory text,"
        " title text, time_created integer, cost real, tokens_input integer,"
        " tokens_output integer, tokens_reasoning integer, tokens_cache_read integer,"
        " tokens_cache_write integer);"
        "CREATE TABLE message (id text PRIMARY KEY, session_id text, time_created integer,"
        " data text);"
        "CREATE TABLE part (id text PRIMARY KEY, message_id text, session_id text, data text);"
    )
    c.execute(
        "INSERT INTO session VALUES ('ses_forged', NULL, ?, 'forged', 1, ?, ?, 2, 0, 0, 0)",
        (os.getcwd(), cost, tokens),
    )
    c.execute("INSERT INTO message VALUES ('msg_1', 'ses_forged', 1, '{\"role\":\"user\"}')")
    for i in range(parts):
        data = json.dumps({"type": "text", "text": f"{i}" * part_bytes})
        c.execute("INSERT INTO part VALUES (?, 'msg_1', 'ses_forged', ?)", (f"prt_{i:03d}", data))
    c.commit()
    c.close()


def fix():
    with open("calc.py", "w") as f:
        f.write("def add(a, b):\n    return a + b\n")


if iid == "neg":
    forge(-500.0, 10)
    fix()
elif iid == "huge":
    forge(1e300, 1e30)
    # 700 kB of junk whose name sorts first: the fix is past the kept head.
    with open("0000-junk.txt", "w") as f:
        f.write(("junk " * 16 + "\n") * 9000)
    fix()
elif iid == "big-store":
    forge(0.5, 10, parts=10, part_bytes=60_000)
    fix()
elif iid in ("refused", "osc"):
    message = "Cannot connect to API: ECONNREFUSED 127.0.0.1:443"
    if iid == "osc":
        message = "\x1b]52;c;cHduZWQ=\x07" + message + " \x1b]0;"
    error = {"type": "error", "error": {"name": "APIError", "data": {"message": message}}}
    print(json.dumps(error), flush=True)
    # Lines with C1 controls, as JSON and as plain text (not JSON: kept as text too).
    print(json.dumps({"type": "note", "text": "\x9d52;c;cHduZWQ=\x9c"}, ensure_ascii=False))
    print("plain \x9b2J\x9d0;title", flush=True)
    print("Error: connect ECONNREFUSED 127.0.0.1:443", file=sys.stderr, flush=True)
    sys.exit(1)
'''


def _agent(tmp_path: Path) -> tuple[Path, Path]:
    tools = tmp_path / "tools"
    tools.mkdir(parents=True)
    agent = tools / "agent.py"
    agent.write_text(AGENT)
    agent.chmod(0o755)
    return tools, agent


def _campaign(
    tmp_path: Path, name: str, instances: tuple[str, ...], *, uses_model: bool = False
) -> Path:
    repo = tmp_path / f"repo-{name}"
    base = make_repo(repo, BASE)
    tools, agent = _agent(tmp_path / name)
    return command_campaign(
        tmp_path / f"{name}.toml",
        name=name,
        repo=repo,
        base=base,
        argv=[str(agent), "{run_dir}"],
        verify_cmd=VERIFY,
        instances=instances,
        uses_model=uses_model,
        extra=f"[sandbox]\nread_only = [{json.dumps(str(tools))}]\n",
    )


def _by_cell(records: list[Recorded]) -> dict[str, list[Any]]:
    out: dict[str, list[Any]] = {}
    for r in records:
        if r.stream.startswith("cell/"):
            out.setdefault(r.stream.removeprefix("cell/"), []).append(r.event)
    return out


def _one(events: list[Any], kind: type[Any]) -> Any:
    found = [e for e in events if isinstance(e, kind)]
    assert len(found) == 1, (kind, events)
    return found[0]


def _clean(text: str, where: str) -> None:
    raw = RAW_CONTROLS.findall(text)
    assert raw == [], f"{where} printed raw control characters {raw!r}"


def test_forged_stores_fake_failures_and_escapes_change_nothing_they_should_not(
    tmp_path: Path,
) -> None:
    home = tmp_path / "home"
    trust = _campaign(tmp_path, "trust", ("neg", "huge", "refused"))
    said = _campaign(tmp_path, "said", ("osc",), uses_model=True)
    assert cli(home, "init").returncode == 0
    for camp in (trust, said):
        out = cli(home, "submit", str(camp))
        assert out.returncode == 0, out.stderr
    daemon = cli(home, "daemon", "--until-idle", "--infra-retries", "0")
    assert daemon.returncode == 0, daemon.stderr
    records = read_all(home)
    cells = _by_cell(records)

    # A command arm's store, however forged, is never spend of record.
    for iid in ("neg", "huge"):
        events = cells[f"trust:{iid}:CMD:0"]
        recovered = _one(events, ev.CellRecovered)
        assert recovered.store_available and recovered.spend.sessions == 1
        assert recovered.spend.cost_usd is None and recovered.spend.tokens_in is None
        assert recovered.spend_gap == COMMAND_STORE_GAP
        assert _one(events, ev.CellVerified).verify_pass is True
    # The forged rows are kept as evidence, as they were read.
    rows = {
        r.event.row["cost"]: r.event.row["tokens_input"]
        for r in records
        if isinstance(r.event, AgentSessionCaptured)
    }
    assert rows == {-500.0: 10, 1e300: 1e30}

    # The junk file sorting first does not hide the fix: every file is listed first.
    huge = cells["trust:huge:CMD:0"]
    captured = _one(huge, ev.PatchCaptured)
    assert captured.patch.cut == "head" and "calc.py" not in captured.patch.text
    assert [f.path for f in captured.files] == ["0000-junk.txt", "calc.py"]
    assert captured.files[0].size > 512 * 1024 and captured.files[1].size < 400
    cell_records = [r for r in records if "trust:huge:CMD:0" in r.stream]
    view = cell_view(cell_records)
    assert view is not None
    page = cell_page(view)
    assert page.index("<code>calc.py</code>") < page.index('<pre class="diff">')

    # A uses_model = false arm's ECONNREFUSED (on stderr, and as a structured error on its
    # stdout) is its own failure: verified, not scored, never retried as infrastructure.
    refused = cells["trust:refused:CMD:0"]
    assert not any(isinstance(e, ev.CellFailed | ev.CellRetried) for e in refused)
    verified = _one(refused, ev.CellVerified)
    assert (verified.scored, verified.not_scored_reason) == (False, "agent exited 1")
    report = cli(home, "report", "--campaign", "trust", "--json")
    assert report.returncode == 0, report.stderr
    [cmd] = json.loads(report.stdout)["arms"]
    assert cmd["infra_failed"] == 0

    # A uses_model = true arm's structured error counts (it is the provider's word, as
    # opencode prints it), and the escapes the agent put in it print as escapes.
    osc = cells["said:osc:CMD:0"]
    failed = _one(osc, ev.CellFailed)
    assert failed.classification == "infrastructure"
    assert OSC52 in failed.error and UNTERMINATED in failed.error  # recorded as it was said
    cell = "said:osc:CMD:0"
    outputs = {
        "status": cli(home, "status"),
        # The table cuts a long reason in its middle; --wide prints it whole.
        "status --wide": cli(home, "status", "--wide"),
        "status --json": cli(home, "status", "--json"),
        "history": cli(home, "history", cell),
        "history --json": cli(home, "history", cell, "--json"),
        "events": cli(home, "events"),
        "events --json": cli(home, "events", "--json"),
        "campaigns": cli(home, "campaigns"),
        "report": cli(home, "report"),
    }
    for what, out in outputs.items():
        assert out.returncode == 0, (what, out.stderr)
        _clean(out.stdout, what)
    assert "\\x1b]52;c;cHduZWQ=\\x07" in outputs["status --wide"].stdout
    assert "\\x1b]52;c;cHduZWQ=\\x07" in outputs["history"].stdout
    assert "\\x9d52;c;cHduZWQ=\\x9c" in outputs["events"].stdout  # a C1 OSC, in a line
    assert "plain \\x9b2J\\x9d0;title" in outputs["history"].stdout
    assert json.loads(outputs["history --json"].stdout.splitlines()[0])["stream"] == f"cell/{cell}"
    # The daemon's own log line of that failure, too.
    _clean(daemon.stderr.replace("\n", ""), "the daemon's log")
    assert "\\x1b]52;c;cHduZWQ=\\x07" in daemon.stderr

    # The home stays usable: the figures say unknown, never a forged number.
    figures = {c["name"]: c for c in json.loads(cli(home, "campaigns", "--json").stdout)}
    assert figures["trust"]["spent_usd"] == 0.0 and figures["trust"]["unknown_attempts"] == 3
    assert "unknown" in outputs["campaigns"].stdout
    projected = cli(home, "project-ledger", str(tmp_path / "rollouts.jsonl"))
    assert projected.returncode == 0, projected.stderr
    budgeted = cli(home, "daemon", "--until-idle", "--max-usd", "1")
    assert budgeted.returncode == 0, budgeted.stderr


def test_a_capture_the_store_refuses_still_records_the_verdict_and_the_patch(
    tmp_path: Path,
) -> None:
    # SQLite's length limit lowered once the run started (ARENAD_FAULT): the 600 kB
    # session this agent forges cannot be one row, as a 1 GB one could not.
    home = tmp_path / "home"
    camp = _campaign(tmp_path, "big", ("big-store",))
    assert cli(home, "init").returncode == 0
    assert cli(home, "submit", str(camp)).returncode == 0
    env = {**os.environ, "ARENAD_FAULT": "blob-limit-after:run.started"}
    daemon = cli(home, "daemon", "--until-idle", env=env)
    assert daemon.returncode == 0, daemon.stderr
    assert "Traceback" not in daemon.stderr, daemon.stderr
    records = read_all(home)
    events = _by_cell(records)["big:big-store:CMD:0"]
    assert not any(isinstance(e, ev.CellFailed) for e in events)
    assert _one(events, ev.CellVerified).verify_pass is True
    assert [f.path for f in _one(events, ev.PatchCaptured).files] == ["calc.py"]
    recovered = _one(events, ev.CellRecovered)
    assert recovered.gap is not None and "string or blob too big" in recovered.gap
    [gap] = [r.event for r in records if isinstance(r.event, AgentStoreUnavailable)]
    assert "string or blob too big" in gap.error
    assert not any(isinstance(r.event, AgentSessionCaptured) for r in records)
    status = cli(home, "status", "--json")
    [row] = json.loads(status.stdout)["cells"]
    assert row["state"] == "recovered"


# --------------------------------------------------------------------------- solo, slow

FORGE = r"""
import os, sqlite3, sys
field, value = sys.argv[1], float(sys.argv[2])
db = os.path.join(os.environ["XDG_DATA_HOME"], "opencode", "opencode.db")
c = sqlite3.connect(db, timeout=30)
cur = c.execute("SELECT * FROM session ORDER BY time_created LIMIT 1")
row = dict(zip([d[0] for d in cur.description], cur.fetchone()))
row.update(id="ses_forged", parent_id=None, slug="forged", title="forged")
row[field] = value
c.execute(
    f"INSERT INTO session ({', '.join(row)}) VALUES ({', '.join('?' * len(row))})",
    list(row.values()),
)
c.commit()
"""
# What each solo agent forges into its own store, mid-run: a second session.
FORGED = {
    "neg": ("cost", "-1000", "-1000.0", "negative"),
    "huge": ("cost", "1e300", "1e+300", "over the ceiling of 1000"),
    "inf": ("cost", "1e999", "inf", "not a finite number"),
    "tokens": ("tokens_input", "1e30", "1e+30", "over the ceiling of 1e+09"),
}


def _solo_script() -> str:
    out = ['final_text = "Done."', "[[models]]", 'id = "fixer"']
    out.append("cost = { input = 3.0, output = 15.0, cache_read = 0.3 }")
    for iid, (field, value, _, _) in FORGED.items():
        command = f"sed -i 's/a - b/a + b/' calc.py && python3 forge.py {field} {value}"
        out += [
            "[[conversations]]",
            f'name = "{iid}"',
            f'match = "[{iid}]"',
            "[[conversations.steps]]",
            'text = "Fixing calc.py."',
            "[[conversations.steps.tool_calls]]",
            'name = "bash"',
            f"arguments = {{ command = {json.dumps(command)}, description = 'fix' }}",
            "[[conversations.steps]]",
            'text = "Fixed."',
        ]
    return "\n".join(out) + "\n"


def _solo_campaign(path: Path, repo: Path, base: str, opencode: Path) -> Path:
    lines = [
        'name = "forge"',
        "max_parallel = 2",
        "[materializer]",
        'kind = "git"',
        f"source = {json.dumps(str(repo))}",
    ]
    for iid in FORGED:
        lines += [
            "[[instances]]",
            f'instance_id = "{iid}"',
            f'base_commit = "{base}"',
            f'problem_statement = "[{iid}] add() in calc.py is wrong; fix it."',
            f"verify_cmd = {json.dumps(VERIFY)}",
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
def test_a_solo_agent_forging_its_own_store_gets_a_labeled_gap_and_the_home_stays_usable(
    tmp_path: Path, opencode_bin: Path, scripted_model: Callable[[str], RunningModel]
) -> None:
    home = tmp_path / "home"
    repo = tmp_path / "repo"
    base = make_repo(repo, {**BASE, "forge.py": FORGE})
    model = scripted_model(_solo_script())
    env = {
        **os.environ,
        "OPENCODE_CONFIG_CONTENT": json.dumps(model.opencode_config(provider_id="scripted")),
    }
    camp = _solo_campaign(tmp_path / "forge.toml", repo, base, opencode_bin)
    assert cli(home, "init").returncode == 0
    assert cli(home, "submit", str(camp)).returncode == 0
    daemon = cli(home, "daemon", "--until-idle", env=env)
    assert daemon.returncode == 0, daemon.stderr
    records = read_all(home)
    cells = _by_cell(records)
    for iid, (field, _, raw, reason) in FORGED.items():
        events = cells[f"forge:{iid}:SOLO:0"]
        recovered = _one(events, ev.CellRecovered)
        assert _one(events, ev.CellVerified).verify_pass is True, iid
        assert recovered.store_available and recovered.spend.sessions == 2, iid
        figure = "cost_usd" if field == "cost" else "tokens_in"
        assert getattr(recovered.spend, figure) is None, (iid, recovered.spend)
        assert recovered.spend_gap is not None and "out of bounds" in recovered.spend_gap
        assert [(r.where, r.field, r.raw, r.reason) for r in recovered.rejected] == [
            ("session ses_forged", field, raw, reason)
        ], iid
        # The stream's figures (opencode's own output) are untouched by the forgery.
        assert recovered.usage is not None and recovered.usage.steps == 2
        if field != "cost":
            assert recovered.spend.cost_usd is not None and recovered.spend.cost_usd > 0
    # The view shows the gap and the value as read.
    view = cell_view([r for r in records if "forge:neg:SOLO:0" in r.stream])
    assert view is not None
    page = cell_page(view)
    assert "out of bounds" in page and "<code>-1000.0</code>" in page
    # The home stays usable, and what it shows is unknown, never the forged numbers.
    ledger = str(tmp_path / "rollouts.jsonl")
    for args in (("status",), ("status", "--json"), ("campaigns",), ("report",)):
        out = cli(home, *args)
        assert out.returncode == 0, (args, out.stderr)
        assert "1e+300" not in out.stdout and "-1000" not in out.stdout, args
    [line] = json.loads(cli(home, "campaigns", "--json").stdout)
    assert line["unknown_attempts"] == 3 and 0 < line["spent_usd"] < 1
    projected = cli(home, "project-ledger", ledger)
    assert projected.returncode == 0, projected.stderr
    costs = [json.loads(x)["cost"]["usd"] for x in Path(ledger).read_text().splitlines()]
    assert len(costs) == 4 and costs.count(None) == 3, costs
    assert all(c is None or 0 < c < 1 for c in costs), costs
    # A daemon holding every campaign to a cap folds that spend at its start.
    budgeted = cli(home, "daemon", "--until-idle", "--max-usd", "5")
    assert budgeted.returncode == 0, budgeted.stderr
