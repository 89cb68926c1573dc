"""A command arm through the gateway, from inside a sandboxed cell: its env names the gateway
with the attempt's token (OPENAI_BASE_URL / OPENAI_API_KEY, ANTHROPIC_BASE_URL /
ANTHROPIC_API_KEY), no real key is readable, and its model call is recorded once (issue 31)."""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from arenad.app import init_home
from arenad.app.submit import submit_campaign
from arenad.cell.retry import RetryPolicy
from arenad.daemon.daemon import DaemonOptions, run_daemon
from arenad.gateway import grants, process, record
from arenad.home import Home
from arenad.sandbox.bwrap import probe_host
from events import cell as ev
from events.base import Recorded
from events.ingest import LineIngested
from tests.conftest import make_repo
from tests.daemon.support import command_campaign, read_all
from tests.opencode_support import RunningModel

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(probe_host() is None, reason="bubblewrap is not installed"),
]

PRICE = {"input": 3.0, "output": 15.0, "cache_read": 0.3}
KEY = "sk-COMMAND-ARM-UPSTREAM-SENTINEL-4c1d"
CELL = "gwc:i1:CMD:0"
SCRIPT = """
[[models]]
id = "m"
[[conversations]]
[[conversations.steps]]
text = "Fixed it."
"""

# The agent: one chat call the conventional way, the bug fixed, and what it can see of
# credentials written to probe.txt.
AGENT = """
import json, os, pathlib, urllib.request
body = json.dumps({"model": "m", "messages": [{"role": "user", "content": "fix"}]}).encode()
request = urllib.request.Request(
    os.environ["OPENAI_BASE_URL"] + "/chat/completions",
    data=body,
    headers={"Authorization": "Bearer " + os.environ["OPENAI_API_KEY"],
             "Content-Type": "application/json"},
)
answer = json.load(urllib.request.urlopen(request, timeout=60))
pathlib.Path("add.py").write_text("def add(a, b):\\n    return a + b\\n")
seen = [json.dumps(dict(os.environ)), answer["choices"][0]["message"]["content"]]
seen.append(open("/proc/self/cmdline", "rb").read().replace(b"\\0", b" ").decode())
try:
    seen += [p.read_text() for p in pathlib.Path(GRANTS).iterdir()]
except OSError as exc:
    seen.append(repr(exc))
pathlib.Path("probe.txt").write_text("\\n".join(seen))
"""


@pytest.fixture
def home(tmp_path: Path) -> Iterator[Path]:
    yield tmp_path / "home"
    process.stop(tmp_path / "home")


def test_a_command_arm_reaches_its_model_only_through_the_gateway(
    tmp_path: Path, home: Path, scripted_model: Callable[[str], RunningModel]
) -> None:
    model = scripted_model(SCRIPT)
    repo = tmp_path / "repo"
    base = make_repo(repo, {"add.py": "def add(a, b):\n    return a - b\n"})
    code = f"GRANTS = {json.dumps(str(home / 'gateway' / 'grants'))}\n{AGENT}"
    camp = command_campaign(
        tmp_path / "gwc.toml",
        name="gwc",
        repo=repo,
        base=base,
        # Braces doubled: argv's placeholders are str.format fields.
        argv=["python3", "-c", code.replace("{", "{{").replace("}", "}}")],
        verify_cmd="python3 -c 'from add import add; assert add(2, 3) == 5'",
        uses_model=True,
        # The arm names its model, so the campaign's price table prices its calls.
        arm_extra='model = "scripted/m"',
    )
    # The daemon's env names the upstream the conventional way, with its real key, and the
    # price table is the opencode config's (the cell's copy), as for a solo arm.
    config = {"provider": {"scripted": {"models": {"m": {"cost": PRICE}}}}}
    env = {
        **os.environ,
        "OPENAI_BASE_URL": model.base_url,
        "OPENAI_API_KEY": KEY,
        "OPENCODE_CONFIG_CONTENT": json.dumps(config),
    }

    async def go() -> None:
        await init_home(Home(home))
        await submit_campaign(Home(home), camp)
        await run_daemon(Home(home), DaemonOptions(until_idle=True, retry=RetryPolicy()), env)

    asyncio.run(go())
    recorded: list[Recorded] = read_all(home)
    events = [r.event for r in recorded if r.stream == f"cell/{CELL}"]
    verified = next(e for e in events if isinstance(e, ev.CellVerified))
    assert verified.scored and verified.verify_pass, events

    # The upstream got the real key; the call is one ingested gateway record.
    assert model.authorizations == [f"Bearer {KEY}"]
    calls: list[dict[str, Any]] = [
        json.loads(r.event.raw)
        for r in recorded
        if r.stream == f"ingest/{CELL}/1"
        and isinstance(r.event, LineIngested)
        and r.event.source == "gateway"
    ]
    assert len(calls) == 1 and calls[0]["upstream"]["status"] == 200
    assert calls[0]["response"]["content"] == "Fixed it."
    usage = record.Usage(**calls[0]["usage"])
    assert usage.total > 0 and calls[0]["priced"] is True
    assert calls[0]["cost_usd"] == pytest.approx(record.cost_usd(usage, grants.Price(**PRICE)))

    # From inside the cell: the env names the gateway and the attempt's token, and neither
    # the key nor the grants are readable.
    started = next(e for e in events if isinstance(e, ev.RunStarted))
    probe = (Path(started.cwd) / "probe.txt").read_text()
    seen_env = json.loads(probe.splitlines()[0])
    port = (home / "gateway" / "port").read_text().strip()
    assert seen_env["OPENAI_BASE_URL"] == f"http://127.0.0.1:{port}/u/openai/v1"
    assert seen_env["ANTHROPIC_BASE_URL"] == f"http://127.0.0.1:{port}/u/anthropic"
    assert seen_env["OPENAI_API_KEY"].startswith("agw-")
    assert seen_env["ANTHROPIC_API_KEY"] == seen_env["OPENAI_API_KEY"]
    assert "Fixed it." in probe
    assert KEY not in probe
    assert "FileNotFoundError" in probe or "No such file" in probe
    # Nor is the key in any file of the home.
    for path in home.rglob("*"):
        if path.is_file() and not path.is_symlink() and not path.is_socket():
            assert KEY.encode() not in path.read_bytes(), f"the key was written to {path}"
