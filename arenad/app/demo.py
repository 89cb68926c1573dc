"""`arenad demo`: a whole campaign end to end on this machine, with no model account.

It makes a tiny git project with two bugs and a failing check for each, a
campaign of 2 instances x the solo arm x 2 reps, starts the scripted model (an
OpenAI-compatible server playing the agent), runs the daemon until idle with the
real opencode CLI, and prints the status table and where the artifacts are.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import subprocess
from pathlib import Path

import msgspec

from arenad.app.executors import cell_base_env, executor_factory
from arenad.app.submit import submit_campaign
from arenad.daemon.daemon import DaemonOptions, run_daemon
from arenad.errors import UserError
from arenad.gateway import process as gateway_process
from arenad.home import Home
from arenad.scripted_model.opencode_config import opencode_config_for_script
from arenad.scripted_model.script import parse_script
from arenad.scripted_model.server import run_in_thread

PINNED_OPENCODE = "1.18.33"

BUGS = {
    "add-bug": (
        "add.py",
        "def add(a, b):\n    return a - b\n",
        "return a - b",
        "return a + b",
        "assert add(2, 3) == 5",
        "from add import add",
    ),
    "mul-bug": (
        "mul.py",
        "def mul(a, b):\n    return a + b\n",
        "return a + b",
        "return a * b",
        "assert mul(2, 3) == 6",
        "from mul import mul",
    ),
}


def _cluster_for(executor: str, home: Home) -> contextlib.AbstractContextManager[object]:
    if executor != "ray":
        return contextlib.nullcontext()
    from arenad.executors.ray.cluster import local_cluster
    from arenad.executors.ray.executor import namespace_for

    token = home.root / "demo" / "ray-token"
    return local_cluster(token, slots=2, namespace=namespace_for(home.root))


class DemoResult(msgspec.Struct, frozen=True):
    campaign: str
    campaign_file: str
    repo: str
    artifacts: str
    opencode: str


def find_opencode(explicit: str | None) -> str:
    """The opencode binary: --opencode, $ARENAD_OPENCODE, the repo's pinned install, PATH."""
    candidates = [
        explicit,
        os.environ.get("ARENAD_OPENCODE"),
        # The checkout's pinned install: <repo>/arenad/app/demo.py -> <repo>/.cache/...
        str(Path(__file__).resolve().parents[2] / ".cache/opencode/node_modules/.bin/opencode"),
        shutil.which("opencode"),
    ]
    for candidate in candidates:
        if candidate and Path(candidate).exists():
            return str(Path(candidate).resolve())
    raise UserError(
        f"the demo needs the opencode CLI (npm opencode-ai@{PINNED_OPENCODE}); run"
        " scripts/install-opencode, or pass --opencode PATH"
    )


def _git(repo: Path, *args: str) -> str:
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "arenad demo",
        "GIT_AUTHOR_EMAIL": "demo@arenad",
        "GIT_COMMITTER_NAME": "arenad demo",
        "GIT_COMMITTER_EMAIL": "demo@arenad",
    }
    out = subprocess.run(
        ["git", "-C", str(repo), *args], check=True, capture_output=True, text=True, env=env
    )
    return out.stdout.strip()


def make_demo_repo(repo: Path) -> str:
    """A git repo whose two functions are each broken; returns the base commit."""
    repo.mkdir(parents=True)
    _git(repo, "init", "-q", "-b", "main")
    for file, source, *_ in BUGS.values():
        (repo / file).write_text(source)
    (repo / "README.md").write_text("A tiny project with two bugs, for `arenad demo`.\n")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "Two small functions, both wrong")
    return _git(repo, "rev-parse", "HEAD")


def demo_script() -> str:
    """The scripted agent: for each bug, look, fix with a shell edit, check, report."""
    parts = [
        'final_text = "Done."',
        'title = "arenad demo"',
        "[usage]",
        "prompt_tokens = 900",
        "completion_tokens = 40",
        "cached_tokens = 100",
        "reasoning_tokens = 0",
        "[[models]]",
        'id = "fixer"',
        'name = "Scripted fixer"',
        "cost = { input = 3.0, output = 15.0, cache_read = 0.3 }",
    ]
    for iid, (file, _src, old, new, check, imp) in BUGS.items():
        fix = f"sed -i 's/{old}/{new}/' {file}"
        probe = f"python3 -c '{imp}; {check}; print(\"ok\")'"
        parts += [
            "[[conversations]]",
            f'name = "{iid}"',
            f'match = "[{iid}]"',
            "[[conversations.steps]]",
            f'text = "Let me fix {file}."',
            "[[conversations.steps.tool_calls]]",
            'name = "bash"',
            f'arguments = {{ command = {json.dumps(fix)}, description = "fix {file}" }}',
            "[[conversations.steps]]",
            "[[conversations.steps.tool_calls]]",
            'name = "bash"',
            f'arguments = {{ command = {json.dumps(probe)}, description = "check {file}" }}',
            "[[conversations.steps]]",
            f'text = "Fixed {file}; the check prints ok."',
        ]
    return "\n".join(parts) + "\n"


def demo_campaign(
    name: str, repo: Path, base: str, opencode: str, reps: int, executor: str = "local"
) -> str:
    lines = [
        f'name = "{name}"',
        'split = "dev"',
        f"reps = {reps}",
        "max_parallel = 2",
        "[materializer]",
        'kind = "git"',
        f"source = {json.dumps(str(repo))}",
    ]
    if executor == "ray":
        lines += ["[executor]", 'kind = "ray"', "resources = { arenad_slot = 1 }"]
    for iid, (file, _src, _old, _new, check, imp) in BUGS.items():
        func = imp.split()[-1]
        problem = f"[{iid}] {func}() in {file} gives wrong answers; fix it."
        lines += [
            "[[instances]]",
            f'instance_id = "{iid}"',
            'repo = "arenad/demo"',
            f'base_commit = "{base}"',
            f"problem_statement = {json.dumps(problem)}",
            f"verify_cmd = {json.dumps(f'python3 -c {chr(39)}{imp}; {check}{chr(39)}')}",
        ]
    lines += [
        "[[arms]]",
        'name = "SOLO"',
        'kind = "solo"',
        'model = "scripted/fixer"',
        "timeout_s = 300",
        f"opencode_bin = {json.dumps(opencode)}",
    ]
    return "\n".join(lines) + "\n"


async def run_demo(
    home: Home, opencode: str | None, reps: int = 2, executor: str = "local"
) -> DemoResult:
    """The demo campaign through the daemon; ``executor="ray"`` runs its cells on a Ray
    cluster of this machine, started for the demo and stopped after."""
    binary = find_opencode(opencode)
    factory = executor_factory(executor)
    from arenad.app import init_home

    await init_home(home)
    root = home.root / "demo"
    root.mkdir(parents=True, exist_ok=True)
    # A new campaign per run, so a second demo runs again instead of finding it done.
    n = 1 + sum(1 for p in root.glob("demo-*.toml"))
    name = f"demo-{n}"
    repo = root / f"{name}-repo"
    base = make_demo_repo(repo)
    script = parse_script(demo_script(), "demo script")
    (root / f"{name}-model.toml").write_text(demo_script())
    campaign_file = root / f"{name}.toml"
    campaign_file.write_text(demo_campaign(name, repo, base, binary, reps, executor))
    await submit_campaign(home, campaign_file)
    with run_in_thread(script) as server, _cluster_for(executor, home):
        config = opencode_config_for_script(script, port=server.port, provider_id="scripted")
        env = {**os.environ, "OPENCODE_CONFIG_CONTENT": json.dumps(config)}
        await run_daemon(
            home,
            DaemonOptions(max_parallel=2, until_idle=True),
            base_env=cell_base_env(executor, env),
            executor=factory,
        )
    # The demo's model server stops here: its gateway has nothing left to serve.
    await asyncio.to_thread(gateway_process.stop, home.root)
    return DemoResult(
        campaign=name,
        campaign_file=str(campaign_file),
        repo=str(repo),
        artifacts=str(home.root / "campaigns" / name),
        opencode=binary,
    )
