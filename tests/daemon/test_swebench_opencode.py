"""The real opencode CLI, sandboxed in bubblewrap on the /testbed the image materializer
copied out of a local SWE-bench image, solves the instance against the scripted model; the
swebench judge grades it resolved in a fresh container, and its spend is recovered."""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from arenad.app import init_home
from arenad.app.submit import submit_campaign
from arenad.cell.retry import RetryPolicy
from arenad.daemon.daemon import DaemonOptions, run_daemon
from arenad.home import Home
from arenad.sandbox.bwrap import probe_host
from events import cell as ev
from tests.daemon.support import cli, read_all
from tests.opencode_support import RunningModel
from tests.swebench_support import LocalSwebench, local_swebench  # noqa: F401

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(probe_host() is None, reason="bubblewrap is not installed"),
]

IID = "arenad__textkit-3"
CELL = f"swo:{IID}:SOLO:0"
FIX = (
    r"sed -i 's/^    return data\[mid\]$/    return (data[mid - 1] + data[mid]) \/ 2/'"
    " textkit/stats.py"
)
SCRIPT = "\n".join(
    [
        'final_text = "Done."',
        "[[models]]",
        'id = "fixer"',
        "[[conversations]]",
        'match = "median of an even number"',
        "[[conversations.steps]]",
        'text = "The even case returns one middle value; averaging the two."',
        "[[conversations.steps.tool_calls]]",
        'name = "bash"',
        f'arguments = {{ command = {json.dumps(FIX)}, description = "fix median" }}',
        "[[conversations.steps]]",
        'text = "Fixed."',
    ]
)


@pytest.mark.parametrize("kind", ["bwrap", "docker"])
def test_opencode_solves_a_local_swebench_instance(
    local_swebench: LocalSwebench,  # noqa: F811
    tmp_path: Path,
    opencode_bin: Path,
    scripted_model: Callable[[str], RunningModel],
    kind: str,
) -> None:
    """With kind = "docker" opencode runs inside the instance's container (its binary
    mounted read-only), reaching the scripted model through the forwarder in its namespace."""
    home = tmp_path / "home"
    model = scripted_model(SCRIPT)
    config = model.opencode_config(provider_id="scripted")
    env = {**os.environ, "OPENCODE_CONFIG_CONTENT": json.dumps(config)}
    camp = tmp_path / "c.toml"
    camp.write_text(
        f"""name = "swo"
instances_file = {json.dumps(str(local_swebench.parquet))}
instance_ids = ["{IID}"]
verify_template = "! git diff --quiet {{base_commit}}"
[materializer]
kind = "image"
[judge]
kind = "swebench"
test_cmd = "python3 -m pytest -rA -p no:cacheprovider tests"
log_parser = "pytest"
[[arms]]
name = "SOLO"
kind = "solo"
model = "scripted/fixer"
timeout_s = 240
opencode_bin = {json.dumps(str(opencode_bin))}
[sandbox]
kind = "{kind}"
"""
    )

    async def go() -> None:
        await init_home(Home(home))
        await submit_campaign(Home(home), camp)
        options = DaemonOptions(until_idle=True, retry=RetryPolicy(max_infra_retries=0))
        await run_daemon(Home(home), options, env)

    asyncio.run(go())
    events = [r.event for r in read_all(home) if r.stream == f"cell/{CELL}"]
    started = next(e for e in events if isinstance(e, ev.RunStarted))
    assert started.sandbox is not None and started.sandbox.kind == kind
    assert started.sandbox.network == "model"
    verified = next(e for e in events if isinstance(e, ev.CellVerified))
    assert verified.scored and verified.verify_pass
    judged = next(e for e in events if isinstance(e, ev.JudgeVerdictRecorded))
    assert judged.resolved is True and judged.score == 1.0, judged.verdict_json
    ledger = tmp_path / "ledger.jsonl"
    done = cli(home, "project-ledger", str(ledger), "--cell", CELL)
    assert done.returncode == 0, done.stderr
    (line,) = [json.loads(x) for x in ledger.read_text().splitlines()]
    assert line["outcome"]["reward"] == 1
    assert line["outcome"]["reward_source"] == "swe-arena-official-judge"
    # The spend, recovered from opencode's stream and store as for any solo cell.
    cost = line["cost"]
    assert cost["tokens_in"] and cost["tokens_out"] and cost["usd"] is not None, cost
