"""The real opencode inside the sandbox, through the daemon, against the scripted model:
the auth bootstrap with the user's files hidden (the auth file read outside, only its
content inside), and finding 7 (a run the provider fails is not the agent's loss)."""

from __future__ import annotations

import asyncio
import json
import os
import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from arenad.app import init_home
from arenad.app.submit import submit_campaign
from arenad.cell.retry import RetryPolicy
from arenad.daemon.daemon import DaemonOptions, run_daemon
from arenad.gateway import paths as gateway_paths
from arenad.home import Home
from arenad.sandbox.bwrap import probe_host
from events import cell as ev
from events.base import Event
from tests.conftest import make_repo
from tests.daemon.support import cli, read_all, status_json
from tests.opencode_support import RunningModel

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(probe_host() is None, reason="bubblewrap is not installed"),
]

FAKES = Path(__file__).resolve().parents[1] / "fakes"
AUTH_KEY = "sk-AUTH-SENTINEL-5d1c0f7a9e"
SOURCE = "def add(a, b):\n    return a - b\n"


def _script(first_step: str) -> str:
    return "\n".join(
        [
            'final_text = "Done."',
            "[[models]]",
            'id = "fixer"',
            "[[conversations]]",
            'match = "[add-bug]"',
            "[[conversations.steps]]",
            first_step,
            "[[conversations.steps]]",
            'text = "Fixed."',
        ]
    )


FIX = "\n".join(
    [
        'text = "Fixing, and looking around."',
        "[[conversations.steps.tool_calls]]",
        'name = "bash"',
        "arguments = { command = "
        + json.dumps(
            "sed -i 's/a - b/a + b/' add.py;"
            ' cat "$SWE_ARENA_OPENCODE_AUTH_FILE" > auth-probe.txt 2>&1;'
            ' ls ~/.. "$SWE_ARENA_OPENCODE_AUTH_FILE" >> auth-probe.txt 2>&1; true'
        )
        + ', description = "fix" }',
    ]
)


def _campaign(tmp_path: Path, opencode: Path, extra: str = "") -> Path:
    repo = tmp_path / "repo"
    base = make_repo(repo, {"add.py": SOURCE})
    path = tmp_path / "c.toml"
    path.write_text(
        f"""name = "oc"
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


def _daemon(home: Path, camp: Path, env: dict[str, str], retry: RetryPolicy) -> list[Event]:
    async def go() -> None:
        await init_home(Home(home))
        await submit_campaign(Home(home), camp)
        options = DaemonOptions(until_idle=True, retry=retry)
        await run_daemon(Home(home), options, env)

    asyncio.run(go())
    return [r.event for r in read_all(home) if r.stream == "cell/oc:i1:SOLO:0"]


def test_opencode_runs_sandboxed_with_the_auth_file_read_outside(
    tmp_path: Path,
    opencode_bin: Path,
    scripted_model: Callable[[str], RunningModel],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    home = tmp_path / "home"
    # The user's opencode auth file and the secrets dir: both hidden from the cell.
    auth = tmp_path / "user/.local/share/opencode/auth.json"
    auth.parent.mkdir(parents=True)
    auth.write_text(json.dumps({"scripted": {"type": "api", "key": AUTH_KEY}}))
    secrets = tmp_path / "secrets"
    secrets.mkdir()
    (secrets / ".env").write_text("SOME_SETTING=1\n")
    model = scripted_model(_script(FIX))
    config: dict[str, Any] = model.opencode_config(provider_id="scripted")
    # No key in the config: the only credentials are the auth file's.
    del config["provider"]["scripted"]["options"]["apiKey"]
    # The secrets wrapper (the stand-in dotenvx) must be found at submit and at launch.
    monkeypatch.setenv("PATH", f"{FAKES}{os.pathsep}{os.environ['PATH']}")
    env = {
        **os.environ,
        "OPENCODE_CONFIG_CONTENT": json.dumps(config),
        "SWE_ARENA_OPENCODE_AUTH_FILE": str(auth),
    }
    camp = _campaign(tmp_path, opencode_bin, f'[secrets]\ndir = "{secrets}"\nenv_files = [".env"]')
    events = _daemon(home, camp, env, RetryPolicy(max_infra_retries=0))

    started = next(e for e in events if isinstance(e, ev.RunStarted))
    assert started.sandbox is not None and started.sandbox.kind == "bwrap"
    assert not any(str(auth.parent) in p for p in started.sandbox.read_only)
    # The default network: only the model (through the daemon's model gateway, on by
    # default for a solo arm), forwarded into the run's own namespace.
    assert started.sandbox.network == "model"
    gateway_port = int(gateway_paths.port_file(home).read_text())
    assert started.sandbox.endpoints == [f"127.0.0.1:{gateway_port} -> 127.0.0.1:{gateway_port}"]
    assert gateway_port != model.port
    completed = next(e for e in events if isinstance(e, ev.RunCompleted))
    assert completed.rc == 0
    verified = next(e for e in events if isinstance(e, ev.CellVerified))
    assert verified.scored and verified.verify_pass
    # Every model request carried the auth file's key: it reached opencode as content.
    assert model.authorizations and set(model.authorizations) == {f"Bearer {AUTH_KEY}"}
    # The agent could not read the file (nor list the user's home), and took nothing.
    patch = Path(verified.patch_path or "").read_text()
    assert "+    return a + b" in patch and "No such file or directory" in patch
    assert AUTH_KEY not in patch
    needle = AUTH_KEY.encode()
    for path in home.rglob("*"):
        if path.is_file() and not path.is_symlink():
            assert needle not in path.read_bytes(), f"the auth key was written to {path}"
    run_dir = Path(started.cwd).parent
    assert not (run_dir / "xdg/data/opencode/auth.json").exists()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _ledger_errors(home: Path, tmp_path: Path) -> list[Any]:
    out = tmp_path / "rollouts.jsonl"
    done = cli(home, "project-ledger", str(out), "--cell", "oc:i1:SOLO:0")
    assert done.returncode == 0, done.stderr
    return [json.loads(line)["outcome"]["error"] for line in out.read_text().splitlines()]


def test_a_provider_refusing_the_credentials_is_an_infrastructure_failure(
    tmp_path: Path, opencode_bin: Path, scripted_model: Callable[[str], RunningModel]
) -> None:
    home = tmp_path / "home"
    model = scripted_model(_script('error = { status = 401, message = "invalid api key" }'))
    config = model.opencode_config(provider_id="scripted")
    env = {**os.environ, "OPENCODE_CONFIG_CONTENT": json.dumps(config)}
    retry = RetryPolicy(max_infra_retries=1, backoff_s=0)
    events = _daemon(home, _campaign(tmp_path, opencode_bin), env, retry)

    cause = "provider refused the credentials (HTTP 401): invalid api key"
    failed = [e for e in events if isinstance(e, ev.CellFailed)]
    assert [(f.attempt, f.stage, f.classification, f.error) for f in failed] == [
        (1, "run", "infrastructure", cause),
        (2, "run", "infrastructure", cause),
    ]
    # Retried under the infra policy (once), with the cause; never verified as a loss.
    retried = [e for e in events if isinstance(e, ev.CellRetried)]
    assert len(retried) == 1 and retried[0].requested_by == "policy"
    assert cause in retried[0].reason
    assert not any(isinstance(e, ev.CellVerified) for e in events)
    assert [e.rc for e in events if isinstance(e, ev.RunCompleted)] == [1, 1]
    row = status_json(home)["cells"][0]
    assert row["state"] == "failed" and row["reason"] == cause
    assert _ledger_errors(home, tmp_path)[-1] == cause
    assert cause in cli(home, "history", "oc:i1:SOLO:0").stdout
    table = cli(home, "status").stdout
    assert "provider refused the credentials" in table


def test_an_unreachable_model_endpoint_is_an_infrastructure_failure(
    tmp_path: Path, opencode_bin: Path, scripted_model: Callable[[str], RunningModel]
) -> None:
    """Finding 7 as found: the endpoint is down; opencode retries ~70 s and exits 1."""
    home = tmp_path / "home"
    model = scripted_model(_script('text = "never asked"'))
    config = model.opencode_config(provider_id="scripted")
    port = _free_port()  # nothing listens here
    config["provider"]["scripted"]["options"]["baseURL"] = f"http://127.0.0.1:{port}/v1"
    env = {**os.environ, "OPENCODE_CONFIG_CONTENT": json.dumps(config)}
    events = _daemon(home, _campaign(tmp_path, opencode_bin), env, RetryPolicy(max_infra_retries=0))

    failed = next(e for e in events if isinstance(e, ev.CellFailed))
    assert failed.classification == "infrastructure" and failed.retryable
    assert failed.error.startswith(f"provider unreachable (http://127.0.0.1:{port}/v1")
    # Through the gateway (the default) its record of the refused connection is the cause;
    # without it, opencode's own structured error.
    assert "ConnectionRefusedError" in failed.error or "Cannot connect to API" in failed.error
    assert not model.requests
    row = status_json(home)["cells"][0]
    assert row["state"] == "failed" and row["reason"] == failed.error
    assert _ledger_errors(home, tmp_path)[-1] == failed.error
    # The report counts it apart from the agent's failures.
    report = cli(home, "report", "--json")
    assert report.returncode == 0, report.stderr
    assert 1 in _values(json.loads(report.stdout), "infra_failed")


def _values(doc: Any, key: str) -> list[Any]:
    """Every value of ``key`` anywhere in a JSON document."""
    if isinstance(doc, dict):
        return [v for k, v in doc.items() if k == key] + [
            x for v in doc.values() for x in _values(v, key)
        ]
    if isinstance(doc, list):
        return [x for v in doc for x in _values(v, key)]
    return []
