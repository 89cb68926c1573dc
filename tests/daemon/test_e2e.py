"""End to end through the daemon: the real opencode CLI against the scripted model."""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from arenad.app.submit import submit_campaign
from arenad.daemon.daemon import DaemonOptions, run_daemon
from arenad.home import Home
from arenad.runs import groups
from events import cell as ev
from events.base import Recorded
from events.capture import AgentSessionCaptured
from events.ingest import LineIngested
from tests.conftest import make_repo
from tests.daemon.support import cli, read_all, status_json
from tests.opencode_support import RunningModel

PROMPT, CACHED, COMPLETION, REASONING = 900, 100, 40, 5
BUGS = {
    "add-bug": ("add.py", "def add(a, b):\n    return a - b\n", "a - b", "a + b"),
    "mul-bug": ("mul.py", "def mul(a, b):\n    return a + b\n", "a + b", "a * b"),
}
STEPS = 2  # model calls per conversation: the edit, then the final text


def _script(delay_s: float | None = None) -> str:
    parts = [
        'final_text = "Done."',
        "[usage]",
        f"prompt_tokens = {PROMPT}",
        f"completion_tokens = {COMPLETION}",
        f"cached_tokens = {CACHED}",
        f"reasoning_tokens = {REASONING}",
        "[[models]]",
        'id = "fixer"',
        'name = "Scripted fixer"',
        "cost = { input = 3.0, output = 15.0, cache_read = 0.3 }",
    ]
    for iid, (file, _src, old, new) in BUGS.items():
        cmd = f"sed -i 's/{old}/{new}/' {file}"
        parts += [
            "[[conversations]]",
            f'name = "{iid}"',
            f'match = "[{iid}]"',
            "[[conversations.steps]]",
            f'text = "Fixing {file}."',
            "[[conversations.steps.tool_calls]]",
            'name = "bash"',
            f'arguments = {{ command = {json.dumps(cmd)}, description = "fix" }}',
            "[[conversations.steps]]",
        ]
        if delay_s is not None:
            parts.append(f"delay_s = {delay_s}")
        parts.append(f'text = "Fixed {file}."')
    return "\n".join(parts) + "\n"


def _verify(func: str, check: str) -> str:
    return f"python3 -c 'from {func} import {func}; assert {check}'"


def _campaign(path: Path, repo: Path, base: str, opencode: Path, timeout_s: float) -> Path:
    lines = [
        f'name = "{path.stem}"',
        'split = "dev"',
        "max_parallel = 2",
        "[materializer]",
        'kind = "git"',
        f"source = {json.dumps(str(repo))}",
    ]
    for iid, (file, _src, _old, _new) in BUGS.items():
        func = file.removesuffix(".py")
        check = {"add": "add(2, 3) == 5", "mul": "mul(2, 3) == 6"}[func]
        lines += [
            "[[instances]]",
            f'instance_id = "{iid}"',
            f'base_commit = "{base}"',
            f'problem_statement = "[{iid}] {func}() in {file} is wrong; fix it."',
            f"verify_cmd = {json.dumps(_verify(func, check))}",
        ]
    lines += [
        "[[arms]]",
        'name = "SOLO"',
        'kind = "solo"',
        'model = "scripted/fixer"',
        f"timeout_s = {timeout_s}",
        "kill_grace_s = 1",
        f"opencode_bin = {json.dumps(str(opencode))}",
    ]
    path.write_text("\n".join(lines) + "\n")
    return path


def _run(
    tmp_path: Path,
    opencode_bin: Path,
    scripted_model: Callable[[str], RunningModel],
    *,
    name: str,
    delay_s: float | None,
    timeout_s: float,
) -> tuple[Path, Path, str, list[Recorded]]:
    home = tmp_path / "home"
    repo = tmp_path / "repo"
    base = make_repo(repo, {f: src for f, src, _o, _n in BUGS.values()})
    model = scripted_model(_script(delay_s))
    config = model.opencode_config(provider_id="scripted")
    camp = _campaign(tmp_path / f"{name}.toml", repo, base, opencode_bin, timeout_s)
    env = {**os.environ, "OPENCODE_CONFIG_CONTENT": json.dumps(config)}

    async def go() -> None:
        from arenad.app import init_home

        await init_home(Home(home))
        await submit_campaign(Home(home), camp)
        await run_daemon(Home(home), DaemonOptions(max_parallel=2, until_idle=True), env)

    asyncio.run(go())
    return home, repo, base, read_all(home)


def _blob(content: str) -> str:
    return subprocess.run(
        ["git", "hash-object", "--stdin"], input=content, capture_output=True, text=True, check=True
    ).stdout.strip()


def _expected_diff(file: str, src: str, old: str, new: str) -> str:
    fixed = src.replace(old, new)
    first, second = src.splitlines()
    return (
        f"diff --git a/{file} b/{file}\n"
        f"index {_blob(src)[:7]}..{_blob(fixed)[:7]} 100644\n"
        f"--- a/{file}\n+++ b/{file}\n"
        "@@ -1,2 +1,2 @@\n"
        f" {first}\n-{second}\n+{fixed.splitlines()[1]}\n"
    )


def _stream(recorded: list[Recorded], stream: str) -> list[Any]:
    return [r.event for r in recorded if r.stream == stream]


@pytest.mark.slow
def test_two_instances_solo_real_opencode(
    tmp_path: Path, opencode_bin: Path, scripted_model: Callable[[str], RunningModel]
) -> None:
    home, _repo, _base, recorded = _run(
        tmp_path, opencode_bin, scripted_model, name="e2e", delay_s=None, timeout_s=120
    )
    per_step_in = PROMPT - CACHED
    per_step_out = COMPLETION - REASONING
    for iid, (file, src, old, new) in BUGS.items():
        cell = f"e2e:{iid}:SOLO:0"
        events = _stream(recorded, f"cell/{cell}")
        assert [type(e).__name__ for e in events] == [
            "CellSubmitted",
            "CellMaterialized",
            "ProvenanceRecorded",
            "RunStarted",
            "RunCompleted",
            "CellVerified",
            "PatchCaptured",
            "VerifyLogCaptured",
            "CellRecovered",
        ], events
        materialized, verified, recovered = events[1], events[5], events[8]
        assert isinstance(materialized, ev.CellMaterialized)
        assert isinstance(verified, ev.CellVerified) and isinstance(recovered, ev.CellRecovered)
        # The reference's solo identity (toArmIdentity), recorded with the start.
        assert events[2] == ev.ProvenanceRecorded(
            attempt=1, repo="opencode", commit="cli", env_knobs={"model": "scripted/fixer"}
        )
        assert events[4].rc == 0
        assert verified.scored and verified.verify_pass and verified.verify_rc == 0
        assert verified.patch_path is not None and verified.verify_log is not None
        assert Path(verified.patch_path).read_text() == _expected_diff(file, src, old, new)
        # What verify saw is in the log too, so it outlives the run dir.
        patch, verify_log = events[6], events[7]
        assert isinstance(patch, ev.PatchCaptured) and isinstance(verify_log, ev.VerifyLogCaptured)
        assert patch.patch.text == _expected_diff(file, src, old, new)
        assert patch.patch.sha256 == verified.patch_sha256
        assert verify_log.log.text == Path(verified.verify_log).read_text()

        # Stream usage: opencode's step-finish figures of the scripted usage, per model call.
        usage = recovered.usage
        assert usage is not None
        assert usage.steps == STEPS
        assert usage.tokens_in == STEPS * per_step_in
        assert usage.tokens_out == STEPS * per_step_out
        assert usage.reasoning == STEPS * REASONING
        assert usage.cache_r == STEPS * CACHED
        assert usage.cache_w == 0

        # Recovered spend equals the cell's own opencode store (read-only).
        run_dir = Path(materialized.run_dir)
        db = run_dir / "xdg" / "data" / "opencode" / "opencode.db"
        con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
        try:
            rows = con.execute(
                "SELECT count(*), sum(tokens_input), sum(tokens_output), sum(tokens_reasoning),"
                " sum(tokens_cache_read), sum(tokens_cache_write) FROM session"
            ).fetchone()
        finally:
            con.close()
        spend = recovered.spend
        assert recovered.store_available
        assert (
            spend.sessions,
            spend.tokens_in,
            spend.tokens_out,
            spend.tokens_reasoning,
            spend.cache_read,
            spend.cache_write,
        ) == tuple(rows)
        assert spend.tokens_in == STEPS * per_step_in

        # The transcript is captured: the session with its messages and parts.
        captures = [
            e for e in _stream(recorded, f"capture/{cell}/1") if isinstance(e, AgentSessionCaptured)
        ]
        assert len(captures) == 1
        assert captures[0].messages and captures[0].parts
        assert any(f"[{iid}]" in json.dumps(p.data) for p in captures[0].parts)

        # Every stdout line was ingested, byte for byte.
        lines = [
            e
            for e in _stream(recorded, f"ingest/{cell}/1")
            if isinstance(e, LineIngested) and e.source == "stdout"
        ]
        raw = (run_dir / "oc.jsonl").read_bytes()
        assert lines and all(e.encoding == "utf-8" for e in lines)
        assert "".join(e.raw + "\n" for e in lines).encode() == raw

    # status / history after the run.
    doc = status_json(home)
    assert doc["counts"] == {"recovered": 2}
    for row in doc["cells"]:
        assert row["state"] == "recovered" and row["verify_pass"] == 1 and row["scored"] == 1
        assert row["tokens_in"] == STEPS * per_step_in
        assert row["tokens_out"] == STEPS * per_step_out
    table = cli(home, "status")
    assert table.returncode == 0 and "recovered 2" in table.stdout
    hist = cli(home, "history", "e2e:add-bug:SOLO:0")
    assert hist.returncode == 0
    kinds = [line.split()[3] for line in hist.stdout.splitlines() if line.strip()]
    cell_kinds = [k for k in kinds if k.startswith(("cell.", "run."))]
    assert cell_kinds == [
        "cell.submitted",
        "cell.materialized",
        "cell.provenance",
        "run.started",
        "run.completed",
        "cell.verified",
        "cell.patch-captured",
        "cell.verify-log-captured",
        "cell.recovered",
    ]


@pytest.mark.slow
def test_timeout_kills_group_keeps_evidence(
    tmp_path: Path, opencode_bin: Path, scripted_model: Callable[[str], RunningModel]
) -> None:
    # The second model call waits longer than the arm's ceiling; the edit is already made.
    _home, _repo, _base, recorded = _run(
        # The ceiling leaves room for opencode to start and make the edit on a loaded
        # machine (CI runs two test processes on two cores).
        tmp_path,
        opencode_bin,
        scripted_model,
        name="slowc",
        delay_s=600,
        timeout_s=45,
    )
    for iid, (file, src, old, new) in BUGS.items():
        events = _stream(recorded, f"cell/slowc:{iid}:SOLO:0")
        started = next(e for e in events if isinstance(e, ev.RunStarted))
        timed_out = [e for e in events if isinstance(e, ev.RunTimedOut)]
        assert len(timed_out) == 1 and timed_out[0].rc == 124
        # No live member left (orphans that init has not reaped yet are zombies that
        # still answer killpg(pgid, 0), so liveness is read from /proc).
        assert not groups.group_alive(started.pgid)
        verified = next(e for e in events if isinstance(e, ev.CellVerified))
        assert verified.scored is False and verified.not_scored_reason
        assert verified.patch_path is not None
        assert Path(verified.patch_path).read_text() == _expected_diff(file, src, old, new)
        assert isinstance(events[-1], ev.CellRecovered)
