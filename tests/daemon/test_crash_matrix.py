"""The crash matrix: for every transition of both arms, the daemon dies hard right before
or right after committing it (``ARENAD_FAULT``), a new daemon finishes the campaign, and
everything is as if nothing had happened.

Real parts: the real opencode CLI against the scripted model (the solo agent, and the
supervisor's worker, which the stand-in driver starts), real SQLite, real process groups.
Each case asserts:

- every cell is terminal (recovered);
- the agent really ran exactly once (the model server saw one conversation's requests) and
  every attempt holds at most one RunStarted, exactly one attempt holding it;
- the ingested lines reproduce the files byte for byte, offsets contiguous (none twice,
  none skipped);
- spend was recovered and equals the agent's own store;
- ``arenad verify-log`` passes;
- the ledger equals, apart from timing fields and the identifiers a new run draws afresh,
  the ledger of a crash-free run of the same campaign.
"""

from __future__ import annotations

import json
import os
import re
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec
import pytest

from arenad.gateway import paths as gateway_paths
from arenad.sandbox.confine import install_roots
from arenad.store.faults import CRASH_EXIT
from events import cell as ev
from events.base import Recorded
from events.ingest import LineIngested
from tests.arms.support import (
    SUP_RUN,
    assert_files_ingested_exactly,
    supervisor_campaign,
)
from tests.conftest import built_once, make_repo
from tests.daemon.support import cli, read_all, start_daemon, submitted
from tests.opencode_support import RunningModel

pytestmark = pytest.mark.slow

# Every transition the daemon commits. (A crash mid-ingestion is covered by
# test_supervisor_restart.py, which kills the daemon while lines stream.)
TAGS = (
    "cell.materialized",
    "run.started",
    "run.completed",
    "cell.verified",
    "cell.recovered",
)
POINTS = [f"{when}:{tag}" for tag in TAGS for when in ("crash-before", "crash-after")]
STEPS = 2  # model calls per agent run: the edit, then the final text
SOURCE = "def add(a, b):\n    return a - b\n"
VERIFY = "python3 -c 'from add import add; assert add(2, 3) == 5'"
USAGE = """
[usage]
prompt_tokens = 900
completion_tokens = 40
cached_tokens = 100
reasoning_tokens = 5
"""


def _script(model: str) -> str:
    cmd = "sed -i 's/a - b/a + b/' add.py"
    return f"""final_text = "Done."
{USAGE}
[[models]]
id = "{model}"
cost = {{ input = 3.0, output = 15.0, cache_read = 0.3 }}
[[conversations]]
name = "add"
match = "[add-bug]"
[[conversations.steps]]
text = "Fixing add.py."
[[conversations.steps.tool_calls]]
name = "bash"
arguments = {{ command = {json.dumps(cmd)}, description = "fix" }}
[[conversations.steps]]
text = "Fixed add.py."
"""


class Case(msgspec.Struct, kw_only=True):
    home: Path
    env: dict[str, str]
    model: RunningModel
    cell: str


def _solo(
    root: Path, opencode: Path, start_model: Callable[[str], RunningModel], sandbox: str = ""
) -> Case:
    repo = root / "repo"
    base = make_repo(repo, {"add.py": SOURCE})
    camp = root / "crash.toml"
    camp.write_text(
        f"""name = "crash"
split = "dev"
[materializer]
kind = "git"
source = {json.dumps(str(repo))}
[[instances]]
instance_id = "add-bug"
base_commit = "{base}"
problem_statement = "[add-bug] add() in add.py is wrong; fix it."
verify_cmd = {json.dumps(VERIFY)}
[[arms]]
name = "SOLO"
kind = "solo"
model = "scripted/fixer"
timeout_s = 300
opencode_bin = {json.dumps(str(opencode))}
{sandbox}"""
    )
    home = root / "home"
    submitted(home, camp)
    model = start_model(_script("fixer"))
    config = model.opencode_config(provider_id="scripted")
    env = {**os.environ, "OPENCODE_CONFIG_CONTENT": json.dumps(config)}
    return Case(home=home, env=env, model=model, cell="crash:add-bug:SOLO:0")


def _supervisor(root: Path, opencode: Path, start_model: Callable[[str], RunningModel]) -> Case:
    repo = root / "repo"
    base = make_repo(repo, {"add.py": SOURCE})
    loops = root / "loops"
    # A fixed date: the loops commit is the ledger's profile_commit, the same in every run.
    make_repo(loops, {"README": "loops\n"}, date="2026-01-01T00:00:00Z")
    camp = supervisor_campaign(
        root / "c.toml",
        name="crashsup",
        repo=repo,
        base=base,
        loops=loops,
        instance_id="add-bug",
        problem_statement="Fix add.\n- [add-bug] add() in add.py subtracts; make it add\n",
        verify_cmd=VERIFY,
        timeout_s=300,
        worker_model="scripted/worker",
        driver_model="scripted/worker",
        # The workers' opencode (FAKE_SUP_OPENCODE below), shown to the cell's sandbox.
        shares=install_roots(str(opencode), "", "/"),
        network="model",
    )
    home = root / "home"
    submitted(home, camp)
    model = start_model(_script("worker"))
    config = model.opencode_config(provider_id="scripted")
    env = {
        **os.environ,
        "FAKE_SUP_OPENCODE": str(opencode),
        "FAKE_SUP_PAUSE": "0.05",
        "OPENCODE_CONFIG_CONTENT": json.dumps(config),
    }
    return Case(home=home, env=env, model=model, cell="crashsup:add-bug:SUP:0")


DOCKER_IMAGE = "local/deb-py:bookworm"


def _solo_docker(root: Path, opencode: Path, start_model: Callable[[str], RunningModel]) -> Case:
    """The solo arm with opencode inside a container ([sandbox] kind = "docker")."""
    from arenad.containers.docker import engine_problem, image_exists

    if (problem := engine_problem()) is not None:
        pytest.skip(f"no container engine: {problem}")
    if not image_exists(DOCKER_IMAGE):
        pytest.skip(f"{DOCKER_IMAGE} is not in the engine (scripts/build-base-image)")
    sandbox = f'[sandbox]\nkind = "docker"\nimage = "{DOCKER_IMAGE}"\n'
    return _solo(root, opencode, start_model, sandbox)


ARMS = {"solo": _solo, "solo-docker": _solo_docker, "supervisor": _supervisor}


def _daemon(case: Case, log: Path, fault: str | None = None) -> int:
    env = dict(case.env)
    if fault is not None:
        env["ARENAD_FAULT"] = fault
    daemon = start_daemon(case.home, "--until-idle", env=env, stderr=log)
    try:
        return daemon.wait(timeout=400)
    finally:
        if daemon.poll() is None:
            daemon.kill()
            daemon.wait()


def _ledger(case: Case, out: Path) -> list[dict[str, Any]]:
    result = cli(case.home, "project-ledger", str(out))
    assert result.returncode == 0, result.stderr
    return [json.loads(line) for line in out.read_text().splitlines()]


# durationMs: a step's latency as the gateway measured it on the wire.
_VOLATILE_KEYS = {"captured_at", "wall_s", "run_id", "durationMs"}
_IDS = re.compile(r"\b(ses|msg|prt)_[A-Za-z0-9]+")
_ATTEMPT = re.compile(r"attempt-\d+")


def _normalize(lines: list[dict[str, Any]], root: Path) -> list[Any]:
    """Mask what a re-run changes by nature: timing fields, the ids opencode draws at random
    (and the rollout ids derived from them), the temp dir and the attempt number in paths."""
    rollout_ids: dict[str, str] = {}
    for line in lines:
        rollout_ids.setdefault(line["rollout_id"], f"R{len(rollout_ids)}")

    def walk(value: Any, key: str = "") -> Any:
        if key in _VOLATILE_KEYS:
            return "<time>"
        if isinstance(value, dict):
            return {k: walk(v, k) for k, v in value.items()}
        if isinstance(value, list):
            return [walk(v) for v in value]
        if isinstance(value, str):
            if value in rollout_ids:
                return rollout_ids[value]
            text = value.replace(str(root), "<root>")
            return _ATTEMPT.sub("attempt-N", _IDS.sub(r"\1_*", text))
        return value

    return [walk(line) for line in lines]


def _check(case: Case, root: Path, records: list[Recorded]) -> None:
    events = [r.event for r in records if r.stream == f"cell/{case.cell}"]
    # Terminal.
    assert isinstance(events[-1], ev.CellRecovered), events[-1]
    # The agent really ran once: the model answered one run's requests, no more.
    assert len(case.model.requests) == STEPS, len(case.model.requests)
    started = [e for e in events if isinstance(e, ev.RunStarted)]
    assert len(started) == 1
    attempts = [e.attempt for e in started]
    assert len(set(attempts)) == len(attempts)
    attempt = started[0].attempt
    # Ingestion: every file reproduced, once.
    materialized = [e for e in events if isinstance(e, ev.CellMaterialized)]
    run_dir = Path(materialized[-1].run_dir)
    ingest = [r.event for r in records if r.stream == f"ingest/{case.cell}/{attempt}"]
    if case.cell.endswith(":SOLO:0"):
        lines = [e for e in ingest if isinstance(e, LineIngested) and e.source == "stdout"]
        assert (
            b"".join(e.raw.encode() + b"\n" for e in lines) == (run_dir / "oc.jsonl").read_bytes()
        )
        assert [e.offset for e in lines] == sorted({e.offset for e in lines})
        # The model gateway's records of the calls (the default for solo): once each.
        calls = [e for e in ingest if isinstance(e, LineIngested) and e.source == "gateway"]
        assert len(calls) == STEPS
        assert [e.offset for e in calls] == sorted({e.offset for e in calls})
    else:
        # The workers' model calls go through the gateway too (issue 31): its journal of the
        # attempt's calls is one more file, reproduced once like the others.
        campaign = case.cell.split(":", 1)[0]
        journal = gateway_paths.attempt_journal(case.home, campaign, case.cell, attempt)
        assert_files_ingested_exactly(
            ingest, run_dir / "ws" / SUP_RUN, run_dir / "brain.jsonl", journal
        )
    # Spend: recovered, equal to the agent's own store.
    recovered = events[-1]
    assert isinstance(recovered, ev.CellRecovered) and recovered.store_available
    db = run_dir / "xdg" / "data" / "opencode" / "opencode.db"
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        tokens_in, sessions = con.execute(
            "SELECT COALESCE(SUM(tokens_input), 0), COUNT(*) FROM session"
        ).fetchone()
    finally:
        con.close()
    spend = recovered.spend
    if case.cell.endswith(":SOLO:0"):
        assert (spend.tokens_in, spend.sessions) == (tokens_in, sessions)
    else:
        assert (spend.worker_tok_in, spend.worker_sessions) == (tokens_in, sessions)
    # The log's chain.
    assert cli(case.home, "verify-log").returncode == 0


def _reference(
    arm: str,
    tmp_path_factory: pytest.TempPathFactory,
    opencode: Path,
    start_model: Callable[[str], RunningModel],
) -> list[Any]:
    """The normalized ledger of a crash-free run (once per arm per test session, shared by
    the xdist workers)."""

    def build(root: Path) -> None:
        case = ARMS[arm](root, opencode, start_model)
        assert _daemon(case, root / "daemon.err") == 0, (root / "daemon.err").read_text()[-3000:]
        normalized = _normalize(_ledger(case, root / "ledger.jsonl"), root)
        (root / "reference.json").write_text(json.dumps(normalized))

    root = built_once(tmp_path_factory, f"crash-reference-{arm}", build)
    reference: list[Any] = json.loads((root / "reference.json").read_text())
    return reference


@pytest.mark.parametrize("point", POINTS)
@pytest.mark.parametrize("arm", sorted(ARMS))
def test_crash_then_restart_is_as_if_nothing_happened(
    tmp_path: Path,
    tmp_path_factory: pytest.TempPathFactory,
    arm: str,
    point: str,
    opencode_bin: Path,
    scripted_model: Callable[[str], RunningModel],
) -> None:
    reference = _reference(arm, tmp_path_factory, opencode_bin, scripted_model)
    root = tmp_path / "crash"
    root.mkdir()
    case = ARMS[arm](root, opencode_bin, scripted_model)
    crashed = _daemon(case, root / "crashed.err", point)
    assert crashed == CRASH_EXIT, (root / "crashed.err").read_text()[-3000:]
    assert _daemon(case, root / "resumed.err") == 0, (root / "resumed.err").read_text()[-3000:]
    records = read_all(case.home)
    _check(case, root, records)
    assert _normalize(_ledger(case, root / "ledger.jsonl"), root) == reference
    if arm == "solo-docker":
        import subprocess

        left = subprocess.run(
            ["docker", "ps", "-aq", "--filter", f"label=arenad.home={case.home}"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.split()
        assert left == [], "a container was left over"
