"""The real opencode CLI through the gateway against the scripted model: every call is one
journal line, and the sums equal opencode's own store to the token and cent."""

from __future__ import annotations

import itertools
import json
import sqlite3
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from arenad.arms.evidence import gateway_cause, infra_cause
from arenad.gateway import grants, process
from arenad.scripted_model import Script, load_script, parse_script
from arenad.scripted_model.opencode_config import opencode_config_for_script
from tests.gateway.support import UPSTREAM_KEY, grant_for, journal_of, start_gateway
from tests.opencode_support import RunningModel, isolated_opencode_env, opencode_db_path

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "scripted-model" / "fix-bug.toml"


@pytest.fixture
def home(tmp_path: Path) -> Iterator[Path]:
    yield tmp_path / "home"
    process.stop(tmp_path / "home")


def _session(env: dict[str, str]) -> dict[str, Any]:
    conn = sqlite3.connect(f"file:{opencode_db_path(env)}?mode=ro", uri=True)
    conn.row_factory = sqlite3.Row
    try:
        [row] = conn.execute("SELECT * FROM session").fetchall()
    finally:
        conn.close()
    return dict(row)


def test_opencode_through_the_gateway_sums_equal_its_store(
    opencode_bin: Path,
    scripted_model: Callable[[Script | str], RunningModel],
    home: Path,
    tmp_path: Path,
) -> None:
    script = load_script(EXAMPLE)
    model = scripted_model(script)
    gw = start_gateway(home)
    prices = {
        m.id: grants.Price(input=m.cost.input, output=m.cost.output, cache_read=m.cost.cache_read)
        for m in script.models
        if m.cost is not None
    }
    token = grant_for(home, model.base_url, prices=prices)
    # The cell's config names the gateway and the attempt's token, nothing of the upstream.
    config = opencode_config_for_script(script, port=gw.port)
    config["provider"]["scripted"]["options"]["apiKey"] = token
    env = isolated_opencode_env(tmp_path / "oc", config)
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "calc.py").write_text("def add(a, b):\n    return a - b\n")
    for args in (["init", "-q"], ["add", "."], ["commit", "-qm", "initial"]):
        subprocess.run(["git", *args], cwd=repo, env=env, check=True, stdin=subprocess.DEVNULL)
    proc = subprocess.run(
        [str(opencode_bin), "run", "--format", "json", "-m", "scripted/fixer", "--title", "t"],
        cwd=repo,
        env=env,
        input="Please fix the bug in calc.py\n",
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "return a + b" in (repo / "calc.py").read_text()
    calls = len(model.requests)
    lines = journal_of(home, calls)
    assert len(lines) == calls
    assert all(line["upstream"]["status"] == 200 for line in lines)
    assert set(model.authorizations) == {f"Bearer {UPSTREAM_KEY}"}
    session = _session(env)
    sums = {
        key: sum(line["usage"][key] for line in lines)
        for key in ("input", "output", "reasoning", "cache_read", "cache_write")
    }
    assert sums == {
        "input": session["tokens_input"],
        "output": session["tokens_output"],
        "reasoning": session["tokens_reasoning"],
        "cache_read": session["tokens_cache_read"],
        "cache_write": session["tokens_cache_write"],
    }
    assert round(sum(line["cost_usd"] for line in lines), 6) == round(session["cost"], 6)
    # Each call records only what is new: the first the whole prompt, later ones a tail
    # that chains to the call before.
    for before, after in itertools.pairwise(lines):
        assert after["request"]["prefix_hash"] == before["request"]["prompt_hash"]
        assert after["request"]["prefix_len"] > 0


MID_ANSWER = """
[[models]]
id = "fixer"
[[conversations]]
[[conversations.steps]]
error = { status = 529, message = "Overloaded", in_stream = true }
"""


def test_a_provider_failing_mid_stream_on_every_call_is_the_infrastructures(
    opencode_bin: Path,
    scripted_model: Callable[[Script | str], RunningModel],
    home: Path,
    tmp_path: Path,
) -> None:
    """Every answer is a 200 whose stream carries the provider's error event: the gateway's
    records classify the run as an infrastructure failure, whatever opencode made of it."""
    script = parse_script(MID_ANSWER)
    model = scripted_model(script)
    gw = start_gateway(home)
    token = grant_for(home, model.base_url, prices={})
    config = opencode_config_for_script(script, port=gw.port)
    config["provider"]["scripted"]["options"]["apiKey"] = token
    env = isolated_opencode_env(tmp_path / "oc", config)
    repo = tmp_path / "repo"
    repo.mkdir()
    proc = subprocess.run(
        [str(opencode_bin), "run", "--format", "json", "-m", "scripted/fixer", "--title", "t"],
        cwd=repo,
        env=env,
        input="Please fix the bug\n",
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    calls = len(model.requests)
    lines = journal_of(home, calls)
    assert calls >= 1 and len(lines) == calls
    assert all(line["upstream"]["status"] == 200 for line in lines)
    cause = gateway_cause(lines)
    assert cause is not None, (proc.returncode, proc.stdout[-2000:])
    assert cause.cause.startswith("provider failed mid-answer (HTTP 200): upstream error in its")
    # opencode retries (about 70 s), then exits 1 calling it "Cannot connect to API": its
    # own stream would say the provider was unreachable. The gateway saw what happened.
    assert proc.returncode != 0
    stream = [json.loads(x) for x in proc.stdout.splitlines() if x.startswith("{")]
    assert infra_cause(stream) is not None
