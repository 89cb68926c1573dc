"""The model gateway through the daemon: the real opencode CLI, sandboxed, against the scripted
model. Every call is one ingested record, the sums equal opencode's store, the upstream key is
nowhere the cell can read, upstream failures are the infrastructure's, and a cap holds."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import signal
import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from arenad.app import init_home
from arenad.app.submit import submit_campaign
from arenad.cell.retry import RetryPolicy
from arenad.daemon.daemon import DaemonOptions, run_daemon
from arenad.gateway import process
from arenad.home import Home
from arenad.sandbox.bwrap import probe_host
from events import cell as ev
from events.base import Recorded
from events.ingest import LineIngested
from tests.conftest import make_repo
from tests.daemon.support import cli, read_all, start_daemon, status_json, submitted, wait_for
from tests.opencode_support import RunningModel

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(probe_host() is None, reason="bubblewrap is not installed"),
]

KEY = "sk-GATEWAY-UPSTREAM-SENTINEL-9b2e71"
KEY_ENV = "ARENAD_TEST_GATEWAY_KEY"
SOURCE = "def add(a, b):\n    return a - b\n"
CELL = "gw:i1:SOLO:0"


def _script(first_step: str, usage: str = "") -> str:
    return "\n".join(
        [
            'final_text = "Done."',
            usage,
            "[[models]]",
            'id = "fixer"',
            "cost = { input = 3.0, output = 15.0, cache_read = 0.3 }",
            "[[conversations]]",
            'match = "[add-bug]"',
            "[[conversations.steps]]",
            first_step,
            "[[conversations.steps]]",
            'text = "Fixed."',
        ]
    )


def _probe(home: Path) -> str:
    """A bash step that fixes the bug and writes what the cell can see of credentials."""
    # The grants' path travels encoded: opencode refuses a command naming a path outside the
    # project, and the point is what the sandbox shows, not what opencode allows.
    grants = base64.b64encode(f"{home}/gateway/grants".encode()).decode()
    command = (
        "sed -i 's/a - b/a + b/' add.py;"
        f" G=$(echo {grants} | base64 -d);"
        " { env; cat \"$OPENCODE_CONFIG\"; tr '\\0' ' ' < /proc/$$/cmdline;"
        ' ls "$G"; cat "$G"/*; } > probe.txt 2>&1; true'
    )
    return "\n".join(
        [
            'text = "Fixing, and looking around."',
            "[[conversations.steps.tool_calls]]",
            'name = "bash"',
            f'arguments = {{ command = {json.dumps(command)}, description = "fix" }}',
        ]
    )


USAGE = "\n".join(
    [
        "[usage]",
        "prompt_tokens = 1000",
        "completion_tokens = 50",
        "cached_tokens = 200",
        "reasoning_tokens = 7",
    ]
)


def _campaign(tmp_path: Path, opencode: Path, extra: str = "") -> Path:
    repo = tmp_path / "repo"
    base = make_repo(repo, {"add.py": SOURCE})
    path = tmp_path / "gw.toml"
    path.write_text(
        f"""name = "gw"
split = "dev"
[materializer]
kind = "git"
source = {json.dumps(str(repo))}
[[instances]]
instance_id = "i1"
base_commit = "{base}"
problem_statement = "[add-bug] add() is wrong; fix it."
verify_cmd = "python3 -c 'from add import add; assert add(2, 3) == 5'"
[[arms]]
name = "SOLO"
kind = "solo"
model = "scripted/fixer"
timeout_s = 240
opencode_bin = {json.dumps(str(opencode))}
{extra}
"""
    )
    return path


@pytest.fixture
def home(tmp_path: Path) -> Iterator[Path]:
    yield tmp_path / "home"
    process.stop(tmp_path / "home")


def _env(model: RunningModel) -> dict[str, str]:
    config: dict[str, Any] = model.opencode_config(provider_id="scripted")
    config["provider"]["scripted"]["options"]["apiKey"] = "{env:" + KEY_ENV + "}"
    return {**os.environ, "OPENCODE_CONFIG_CONTENT": json.dumps(config), KEY_ENV: KEY}


def _daemon(home: Path, camp: Path, env: dict[str, str], retry: RetryPolicy) -> list[Recorded]:
    async def go() -> None:
        await init_home(Home(home))
        await submit_campaign(Home(home), camp)
        await run_daemon(Home(home), DaemonOptions(until_idle=True, retry=retry), env)

    asyncio.run(go())
    return read_all(home)


def _calls(recorded: list[Recorded], attempt: int = 1) -> list[dict[str, Any]]:
    return [
        json.loads(r.event.raw)
        for r in recorded
        if r.stream == f"ingest/{CELL}/{attempt}"
        and isinstance(r.event, LineIngested)
        and r.event.source == "gateway"
    ]


def _cell(recorded: list[Recorded]) -> list[Any]:
    return [r.event for r in recorded if r.stream == f"cell/{CELL}"]


def test_every_call_recorded_once_and_the_key_stays_out_of_the_cell(
    tmp_path: Path,
    home: Path,
    opencode_bin: Path,
    scripted_model: Callable[[str], RunningModel],
) -> None:
    # The upstream returns token IDs and logprobs (as vLLM would when asked).
    model = scripted_model("token_ids = true\nlogprobs = true\n" + _script(_probe(home), USAGE))
    recorded = _daemon(home, _campaign(tmp_path, opencode_bin), _env(model), RetryPolicy())
    events = _cell(recorded)
    verified = next(e for e in events if isinstance(e, ev.CellVerified))
    assert verified.scored and verified.verify_pass

    # The upstream got its key; every call the model answered is one ingested record.
    assert model.authorizations and set(model.authorizations) == {f"Bearer {KEY}"}
    calls = _calls(recorded)
    assert len(calls) == len(model.requests) == 2
    assert all(c["upstream"]["status"] == 200 and c["attempt"] == 1 for c in calls)

    # The sums equal opencode's own store, to the token and the cent.
    started = next(e for e in events if isinstance(e, ev.RunStarted))
    db = Path(started.cwd).parent / "xdg/data/opencode/opencode.db"
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        row = conn.execute(
            "SELECT tokens_input, tokens_output, tokens_reasoning, tokens_cache_read, cost"
            " FROM session"
        ).fetchone()
    finally:
        conn.close()
    sums = tuple(
        sum(c["usage"][k] for c in calls) for k in ("input", "output", "reasoning", "cache_read")
    )
    assert sums == tuple(row[:4])
    assert round(sum(c["cost_usd"] for c in calls), 9) == round(row[4], 9)

    # The ledger's steps carry each call's token IDs and logprobs.
    out = tmp_path / "rollouts.jsonl"
    done = cli(home, "project-ledger", str(out), "--cell", CELL)
    assert done.returncode == 0, done.stderr
    [line] = [json.loads(x) for x in out.read_text().splitlines()]
    steps = line["steps"]
    assert [s["llm_call_count"] for s in steps] == [1, 1]
    assert [s["prompt_token_ids"] for s in steps] == [c["token_ids"]["prompt"] for c in calls]
    assert [s["completion_token_ids"] for s in steps] == [
        c["token_ids"]["completion"] for c in calls
    ]
    assert all(s["completion_token_ids"] and s["prompt_token_ids"] for s in steps)
    assert [s["logprobs"] for s in steps] == [[e["logprob"] for e in c["logprobs"]] for c in calls]
    # The line's cost carries the gateway's sums beside the store's, and they agree.
    cost = line["cost"]
    assert (cost["gateway"]["tokens_in"], cost["gateway"]["cache_read"]) == (sums[0], sums[3])
    assert cost["tokens_in"] == row[0] and cost["llm_call_count"] == 2
    assert cost["mismatch"] == []

    # From inside the cell: its env, config and command line hold the attempt's token only,
    # and the grants are out of its sight.
    probe = (Path(started.cwd) / "probe.txt").read_text()
    assert "agw-" in probe
    assert KEY not in probe
    assert KEY_ENV not in probe
    assert "No such file or directory" in probe
    # Nor is the key in any file of the home (the log included): names only.
    needle = KEY.encode()
    for path in home.rglob("*"):
        if path.is_file() and not path.is_symlink() and not path.is_socket():
            assert needle not in path.read_bytes(), f"the upstream key was written to {path}"


def test_429_on_every_call_is_an_infrastructure_failure_retried_once(
    tmp_path: Path,
    home: Path,
    opencode_bin: Path,
    scripted_model: Callable[[str], RunningModel],
) -> None:
    model = scripted_model(
        _script('error = { status = 429, message = "slow down", retry_after_ms = 0 }')
    )
    retry = RetryPolicy(max_infra_retries=1, backoff_s=0)
    recorded = _daemon(home, _campaign(tmp_path, opencode_bin), _env(model), retry)
    events = _cell(recorded)
    cause = "provider rate limit (HTTP 429): slow down"
    failed = [e for e in events if isinstance(e, ev.CellFailed)]
    assert [(f.attempt, f.classification, f.error) for f in failed] == [
        (1, "infrastructure", cause),
        (2, "infrastructure", cause),
    ]
    assert len([e for e in events if isinstance(e, ev.CellRetried)]) == 1
    row = status_json(home)["cells"][0]
    assert row["state"] == "failed" and "429" in row["reason"]
    for attempt in (1, 2):
        calls = _calls(recorded, attempt)
        assert calls and all(c["upstream"]["status"] == 429 for c in calls)


def test_a_cells_max_usd_stops_the_agent_at_the_next_call(
    tmp_path: Path,
    home: Path,
    opencode_bin: Path,
    scripted_model: Callable[[str], RunningModel],
) -> None:
    model = scripted_model(_script(_probe(home), USAGE))
    # One call costs 0.00321: the first goes out, the second is refused at the wire.
    camp = _campaign(tmp_path, opencode_bin, "[gateway]\nmax_usd = 0.003")
    recorded = _daemon(home, camp, _env(model), RetryPolicy(max_infra_retries=0))
    calls = _calls(recorded)
    assert [c.get("refused") for c in calls] == [None, "budget"]
    assert len(model.requests) == 1
    spent = sum(c["cost_usd"] or 0 for c in calls)
    assert 0.003 <= spent <= 0.003 + 0.00321
    events = _cell(recorded)
    # The refusal is the campaign's cap, never the provider's outage.
    assert not any(
        isinstance(e, ev.CellFailed) and e.classification == "infrastructure" for e in events
    )
    # The attempt ends with its own outcome, from the gateway's record (not the agent's words).
    verified = next(e for e in events if isinstance(e, ev.CellVerified))
    assert not verified.scored
    assert verified.not_scored_reason is not None
    assert verified.not_scored_reason.startswith(
        "budget: the attempt's max_usd 0.003 is reached"
    ), verified.not_scored_reason
    assert verified.not_scored_reason.endswith("at the gateway")


def test_a_daemon_killed_mid_stream_loses_and_duplicates_no_call(
    tmp_path: Path,
    home: Path,
    opencode_bin: Path,
    scripted_model: Callable[[str], RunningModel],
) -> None:
    # The second answer streams slowly: the daemon dies while it is on the wire.
    slow = 'text = "Fixed, slowly, one small piece of this answer at a time."\nchunk_delay_s = 0.2'
    script = _script(_probe(home), USAGE).replace('text = "Fixed."', slow)
    model = scripted_model("chunk_chars = 4\n" + script)
    submitted(home, _campaign(tmp_path, opencode_bin))
    env = _env(model)
    daemon = start_daemon(home, "--until-idle", env=env, stderr=tmp_path / "daemon.err")
    wait_for(lambda: len(model.requests) >= 2, "the second model call to be streaming")
    gateway = process.running(home)
    assert gateway is not None
    daemon.send_signal(signal.SIGKILL)
    daemon.wait()
    second = start_daemon(home, "--until-idle", env=env, stderr=tmp_path / "daemon2.err")
    assert second.wait(timeout=300) == 0, (tmp_path / "daemon2.err").read_text()[-3000:]

    recorded = read_all(home)
    events = _cell(recorded)
    assert any(isinstance(e, ev.RunAdopted) for e in events)
    verified = next(e for e in events if isinstance(e, ev.CellVerified))
    assert verified.scored and verified.verify_pass
    # The call on the wire completed (the gateway outlived the daemon: same process) and
    # its record was ingested exactly once.
    again = process.running(home)
    assert again is not None and again.pid == gateway.pid
    lines = [
        r.event
        for r in recorded
        if r.stream == f"ingest/{CELL}/1"
        and isinstance(r.event, LineIngested)
        and r.event.source == "gateway"
    ]
    assert len(lines) == len(model.requests) == 2
    assert len({(e.path, e.offset) for e in lines}) == 2
    last = json.loads(lines[-1].raw)
    assert last["upstream"]["status"] == 200 and not last["client_gone"]
    assert last["response"]["content"].startswith("Fixed, slowly")
