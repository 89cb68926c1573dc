"""The real opencode CLI (pinned 1.18.33) against the scripted model server.

Each test runs ``opencode run --format json`` once in a fresh git repo with an isolated
HOME/XDG (facts §5 recipe), the prompt on stdin, and checks the files it changed, its JSON
event stream, the token accounting (facts §2.4) and its SQLite store.
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from arenad.scripted_model import Cost, Script, load_script
from arenad.scripted_model.script import ResolvedUsage, resolve_usage
from tests.opencode_support import RunningModel, isolated_opencode_env, opencode_db_path

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "scripted-model" / "fix-bug.toml"


def git_repo(path: Path, env: dict[str, str], files: dict[str, str]) -> Path:
    path.mkdir()
    for name, text in files.items():
        (path / name).write_text(text)
    for args in (["init", "-q"], ["add", "."], ["commit", "-qm", "initial"]):
        subprocess.run(["git", *args], cwd=path, env=env, check=True, stdin=subprocess.DEVNULL)
    return path


def run_opencode(
    opencode_bin: Path, repo: Path, env: dict[str, str], model: str, prompt: str, *extra: str
) -> tuple[subprocess.CompletedProcess[str], list[dict[str, Any]]]:
    proc = subprocess.run(
        [str(opencode_bin), "run", "--format", "json", "-m", model, *extra],
        cwd=repo,
        env=env,
        input=prompt,  # stdin is a pipe that hits EOF: opencode reads it when not a TTY
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    events = [json.loads(line) for line in proc.stdout.splitlines() if line.strip()]
    return proc, events


def expected_tokens(usage: ResolvedUsage) -> dict[str, Any]:
    """What opencode records for one step with this wire usage (facts §2.4)."""
    return {
        "total": usage.prompt_tokens + usage.completion_tokens,
        "input": usage.prompt_tokens - usage.cached_tokens,
        "output": usage.completion_tokens - usage.reasoning_tokens,
        "reasoning": usage.reasoning_tokens,
        "cache": {"read": usage.cached_tokens, "write": 0},
    }


def expected_cost(usage: ResolvedUsage, cost: Cost) -> float:
    fresh_input = usage.prompt_tokens - usage.cached_tokens
    return (
        fresh_input * cost.input
        + usage.completion_tokens * cost.output  # output + reasoning
        + usage.cached_tokens * cost.cache_read
    ) / 1e6


def step_usages(script: Script, conversation: int) -> list[ResolvedUsage]:
    return [
        resolve_usage(script.default_usage, step.usage)
        for step in script.conversations[conversation].steps
    ]


def read_session(env: dict[str, str]) -> dict[str, Any]:
    db = opencode_db_path(env)
    # opencode leaves its WAL un-checkpointed: read the store in place, never a copy of .db.
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    conn.row_factory = sqlite3.Row
    try:
        rows = conn.execute("SELECT * FROM session").fetchall()
    finally:
        conn.close()
    assert len(rows) == 1, [dict(r) for r in rows]
    return dict(rows[0])


def test_fix_bug_example_end_to_end(
    opencode_bin: Path,
    scripted_model: Callable[[Script | str], RunningModel],
    tmp_path: Path,
) -> None:
    script = load_script(EXAMPLE)
    server = scripted_model(script)
    env = isolated_opencode_env(tmp_path / "env", server.opencode_config())
    repo = git_repo(tmp_path / "repo", env, {"calc.py": "def add(a, b):\n    return a - b\n"})

    proc, events = run_opencode(
        opencode_bin, repo, env, "scripted/fixer", "Please fix the bug in calc.py\n", "--title", "t"
    )

    assert proc.returncode == 0, proc.stderr[-4000:]
    assert (repo / "calc.py").read_text() == "def add(a, b):\n    return a + b\n"

    # The event stream: sessionID on every line; one step_start/step_finish per model call.
    session_ids = {e["sessionID"] for e in events}
    assert len(session_ids) == 1
    types = [e["type"] for e in events]
    assert types.count("step_start") == types.count("step_finish") == 4
    tools = [e["part"] for e in events if e["type"] == "tool_use"]
    assert [(t["tool"], t["callID"], t["state"]["status"]) for t in tools] == [
        ("read", "call_1_1", "completed"),
        ("edit", "call_2_1", "completed"),
        ("bash", "call_3_1", "completed"),
    ]
    assert "add ok" in tools[2]["state"]["output"]
    texts = [e["part"]["text"] for e in events if e["type"] == "text"]
    assert texts[-1].startswith("Fixed: add() now returns a + b")

    # Tokens per step, as opencode derives them from the scripted usage (facts §2.4).
    finishes = [e["part"] for e in events if e["type"] == "step_finish"]
    usages = step_usages(script, 0)
    assert [f["reason"] for f in finishes] == ["tool-calls"] * 3 + ["stop"]
    assert [f["tokens"] for f in finishes] == [expected_tokens(u) for u in usages]
    assert finishes[0]["tokens"] == {  # the facts' worked example, spelled out
        "total": 1050,
        "input": 800,
        "output": 43,
        "reasoning": 7,
        "cache": {"read": 200, "write": 0},
    }
    cost = script.models[0].cost
    assert cost is not None
    for finish, usage in zip(finishes, usages, strict=True):
        assert finish["cost"] == pytest.approx(expected_cost(usage, cost))
    assert finishes[0]["cost"] == pytest.approx(0.00321)

    # The store: the session row sums its own step-finish parts.
    session = read_session(env)
    assert session["id"] in session_ids
    assert session["title"] == "t"
    assert session["directory"] == str(repo)
    assert session["tokens_input"] == sum(f["tokens"]["input"] for f in finishes) == 1500
    assert session["tokens_output"] == sum(f["tokens"]["output"] for f in finishes)
    assert session["tokens_reasoning"] == 7
    assert session["tokens_cache_read"] == sum(u.cached_tokens for u in usages)
    assert session["cost"] == pytest.approx(sum(f["cost"] for f in finishes))

    # The server saw exactly the four scripted calls (--title: no title request).
    assert [(r.kind, r.conversation, r.step) for r in server.replies] == [
        ("step", "fix-bug", i) for i in range(4)
    ]
    last = server.requests[-1]
    assert last["stream"] is True and last["stream_options"] == {"include_usage": True}
    assert [m["role"] for m in last["messages"]].count("tool") == 3


WRITE_AND_BASH = """
title = "Scripted title"
[usage]
prompt_tokens = 300
completion_tokens = 30

[[models]]
id = "writer"

[[conversations]]
match = "make the files"
[[conversations.steps]]
text = "Making them."
[[conversations.steps.tool_calls]]
name = "write"
arguments = { filePath = "hello.txt", content = "hello from the write tool\\n" }
[[conversations.steps.tool_calls]]
name = "bash"
arguments = { command = "printf 'from bash\\\\n' > bash.txt" }
[conversations.steps.usage]
prompt_tokens = 1000
cached_tokens = 100
[[conversations.steps]]
text = "Both files are made."
"""


def test_write_and_bash_in_one_step_with_the_title_request(
    opencode_bin: Path,
    scripted_model: Callable[[Script | str], RunningModel],
    tmp_path: Path,
) -> None:
    server = scripted_model(WRITE_AND_BASH)
    env = isolated_opencode_env(tmp_path / "env", server.opencode_config())
    repo = git_repo(tmp_path / "repo", env, {"README.md": "scratch\n"})

    # No --title: opencode also asks the model for a title, on the same endpoint.
    proc, events = run_opencode(
        opencode_bin, repo, env, "scripted/writer", "Please make the files\n"
    )

    assert proc.returncode == 0, proc.stderr[-4000:]
    assert (repo / "hello.txt").read_text() == "hello from the write tool\n"
    assert (repo / "bash.txt").read_text() == "from bash\n"
    tools = sorted(e["part"]["tool"] for e in events if e["type"] == "tool_use")
    assert tools == ["bash", "write"]
    finishes = [e["part"] for e in events if e["type"] == "step_finish"]
    assert [f["tokens"]["input"] for f in finishes] == [900, 300]

    kinds = sorted(r.kind for r in server.replies)
    assert kinds == ["step", "step", "title"]
    title_request = next(
        req for req, rep in zip(server.requests, server.replies, strict=True) if rep.kind == "title"
    )
    assert "tools" not in title_request  # the title call offers no tools

    session = read_session(env)
    assert session["title"] == "Scripted title"
    # The title call's usage (300 prompt tokens) is not counted in the session.
    assert session["tokens_input"] == 900 + 300
