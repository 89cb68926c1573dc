"""The supervisor arm end to end with real opencode workers: the real `arenad daemon` as a
subprocess, the stand-in driver (tests/fakes/supervisor-driver) starting two real `opencode
run` workers in clone dirs against the scripted model, and the cell's own opencode store read
back here to check what arenad recovered from it."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from arenad.arms.supervisor import STORE_INIT_FAILED
from arenad.cell import supervisor_figures as figures
from arenad.gateway import paths as gateway_paths
from arenad.gateway.reconcile import answered, gateway_figures
from arenad.js import js_round, js_slice
from arenad.ledger.project import BRAIN_GAP
from arenad.sandbox.cellenv import cell_paths
from events import cell as ev
from events.base import Event, Recorded
from events.capture import AgentSessionCaptured, WorkerCwdUnmatched
from events.ingest import FileSnapshotted, LineIngested, LineMalformed
from tests.arms.support import (
    SUP_RUN,
    assert_closed_once,
    assert_files_ingested_exactly,
    daemon_until_idle,
    line_events,
    live_group_members,
    stream_events,
    supervisor_campaign,
)
from tests.conftest import make_repo
from tests.daemon.support import cli, env_with, read_all, start_daemon, submitted, wait_for
from tests.opencode_support import RunningModel

CELL = "supoc:i1:SUP:0"
PROMPT, CACHED, COMPLETION, REASONING = 900, 100, 40, 5
STEPS = 2  # model calls per worker: the edit, then the final text
# One subtask per worker; the second label is longer than the 100 characters a subtask keeps.
SUBTASKS = {
    "add.py": (
        "[add-bug] add() in add.py subtracts; make it add",
        "a - b",
        "a + b",
    ),
    "mul.py": (
        "[mul-bug] mul() in mul.py adds its arguments instead of multiplying them;"
        " make it return the product of a and b and change nothing else",
        "a + b",
        "a * b",
    ),
}
SOURCES = {
    "add.py": "def add(a, b):\n    return a - b\n",
    "mul.py": "def mul(a, b):\n    return a + b\n",
}


def _script(second_step_delay_s: float | None = None) -> str:
    parts = [
        'final_text = "Done."',
        "[usage]",
        f"prompt_tokens = {PROMPT}",
        f"completion_tokens = {COMPLETION}",
        f"cached_tokens = {CACHED}",
        f"reasoning_tokens = {REASONING}",
        "[[models]]",
        'id = "worker"',
        "[[models]]",
        'id = "driver"',
    ]
    for file, (label, old, new) in SUBTASKS.items():
        tag = label.split("]")[0] + "]"
        cmd = f"sed -i 's/{old}/{new}/' {file}"
        parts += [
            "[[conversations]]",
            f"name = {json.dumps(tag)}",
            f"match = {json.dumps(tag)}",
            "[[conversations.steps]]",
            f'text = "Fixing {file}."',
            "[[conversations.steps.tool_calls]]",
            'name = "bash"',
            f"arguments = {{ command = {json.dumps(cmd)}, description = {json.dumps('fix')} }}",
            "[[conversations.steps]]",
            f'text = "Fixed {file}."',
        ]
        if second_step_delay_s is not None:
            parts.append(f"delay_s = {second_step_delay_s}")
    return "\n".join(parts) + "\n"


def _submitted(
    tmp_path: Path, opencode_bin: Path, timeout_s: float, network: str = "model"
) -> Path:
    """The home, with the one-cell campaign over add.py and mul.py submitted (``network``:
    "none" for a run whose workers call no model, so no endpoint is configured)."""
    home = tmp_path / "home"
    repo = tmp_path / "repo"
    base = make_repo(repo, SOURCES)
    loops = tmp_path / "loops"
    make_repo(loops, {"README": "loops\n"})
    task = "Fix both functions.\n" + "".join(f"- {label}\n" for label, _o, _n in SUBTASKS.values())
    verify = "python3 -c 'from add import add; from mul import mul; assert add(2, 3) == 5"
    verify += " and mul(2, 3) == 6'"
    camp = supervisor_campaign(
        tmp_path / "c.toml",
        name="supoc",
        repo=repo,
        base=base,
        loops=loops,
        problem_statement=task,
        verify_cmd=verify,
        timeout_s=timeout_s,
        worker_model="scripted/worker",
        driver_model="scripted/driver",
        opencode_bin=opencode_bin,
        network=network,
    )
    submitted(home, camp)
    return home


def _run(
    tmp_path: Path,
    opencode_bin: Path,
    scripted_model: Callable[[str], RunningModel],
    *,
    timeout_s: float,
    second_step_delay_s: float | None = None,
    exec_mode: str = "",
    abort_when_hanging: bool = False,
) -> tuple[list[Event], list[Event], list[Event], Path]:
    """Run the one cell to its end. ``abort_when_hanging``: the operator aborts it as soon
    as a worker's second model call has arrived (the scripted model is then holding it):
    the run ends on that event, not on a ceiling guessed to come after it."""
    home = _submitted(tmp_path, opencode_bin, timeout_s)
    model = scripted_model(_script(second_step_delay_s))
    env = env_with(
        FAKE_SUP_OPENCODE=str(opencode_bin),
        FAKE_SUP_PAUSE="0.3",
        FAKE_SUP_EXEC=exec_mode,
        # A PWD the daemon was started with: no child of it may inherit this one.
        PWD="/",
        # The daemon copies this into the cell's own opencode config (and drops the variable).
        OPENCODE_CONFIG_CONTENT=json.dumps(model.opencode_config(provider_id="scripted")),
    )
    if abort_when_hanging:
        records = _aborted_when_hanging(home, env, model, tmp_path / "daemon.err")
    else:
        records = daemon_until_idle(home, env, tmp_path / "daemon.err", timeout_s=timeout_s + 120)
    cell = stream_events(records, f"cell/{CELL}")
    ingest = stream_events(records, f"ingest/{CELL}/1")
    capture = stream_events(records, f"capture/{CELL}/1")
    run_dir = Path(_one(cell, ev.CellMaterialized).run_dir)  # type: ignore[attr-defined]
    return cell, ingest, capture, run_dir


def _aborted_when_hanging(
    home: Path, env: dict[str, str], model: RunningModel, stderr: Path
) -> list[Recorded]:
    daemon = start_daemon(home, "--until-idle", env=env, stderr=stderr)
    try:
        wait_for(
            lambda: any(r.kind == "step" and r.step == 1 for r in model.replies),
            "a worker's second model call (the one that hangs)",
            timeout_s=600,
        )
        aborted = cli(home, "abort", CELL)
        assert aborted.returncode == 0, aborted.stderr
        assert daemon.wait(timeout=300) == 0, stderr.read_text()
    finally:
        if daemon.poll() is None:
            daemon.kill()
            daemon.wait()
    return read_all(home)


def _one(events: list[Event], kind: type) -> Event:
    found = [e for e in events if isinstance(e, kind)]
    assert len(found) == 1, (kind, found)
    return found[0]


def _clones(run_dir: Path) -> list[str]:
    names = [label for label, _o, _n in SUBTASKS.values()]
    stems = ["".join(c if c.isalnum() or c in "._-" else "_" for c in n) for n in names]
    return [str(run_dir / "ws" / ".loops" / "clones" / s) for s in stems]


def _store_worker_spend(run_dir: Path, cwds: list[str]) -> tuple[int, int, int, int, set[str]]:
    """The reference's recoverSupSpend query on the cell's opencode store, opened read-only here:
    (sessions, Σ tokens_input, Σ tokens_output + tokens_reasoning, Σ tokens_output, ids)."""
    db = run_dir / "xdg" / "data" / "opencode" / "opencode.db"
    marks = ",".join("?" * len(cwds))
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        n, tin, tout, out = con.execute(
            "SELECT COUNT(*), COALESCE(SUM(tokens_input), 0),"
            " COALESCE(SUM(tokens_output + tokens_reasoning), 0), COALESCE(SUM(tokens_output), 0)"
            f" FROM session WHERE directory IN ({marks})",
            cwds,
        ).fetchone()
        ids = {
            r[0] for r in con.execute(f"SELECT id FROM session WHERE directory IN ({marks})", cwds)
        }
    finally:
        con.close()
    return int(n), int(tin), int(tout), int(out), ids


@pytest.mark.slow
def test_two_real_opencode_workers(
    tmp_path: Path, opencode_bin: Path, scripted_model: Callable[[str], RunningModel]
) -> None:
    cell, ingest, capture, run_dir = _run(tmp_path, opencode_bin, scripted_model, timeout_s=300)
    ws = run_dir / "ws"
    sup = ws / SUP_RUN

    # The arm created the cell's store before the driver started both workers at once.
    assert STORE_INIT_FAILED not in (run_dir / "driver.err").read_text()

    # The run completed and counts: driver exit 0, state.json completed, both fixes verified.
    assert _one(cell, ev.RunCompleted).rc == 0  # type: ignore[attr-defined]
    verified = _one(cell, ev.CellVerified)
    assert verified.scored and verified.verify_pass  # type: ignore[attr-defined]
    patch = Path(verified.patch_path).read_text()  # type: ignore[attr-defined]
    assert "+    return a + b" in patch and "+    return a * b" in patch

    # Every line of every file, byte for byte, once; the half-written lines whole.
    journal = _journal(tmp_path / "home")
    assert_files_ingested_exactly(ingest, sup, run_dir / "brain.jsonl", journal)
    assert len(line_events(ingest)) == 6  # journal, progress, 2 workers, brain, gateway
    assert not any(isinstance(e, LineMalformed) for e in ingest)
    assert not any(e.partial for lines in line_events(ingest).values() for e in lines)
    snapshots = [e for e in ingest if isinstance(e, FileSnapshotted)]
    assert snapshots[-1].content == (sup / "state.json").read_text()
    assert json.loads(snapshots[0].content)["status"] == "running"
    assert_closed_once(ingest, sup, run_dir / "brain.jsonl", journal)

    # Figures derived from the ingested events.
    summary = figures.summarize(ingest)
    labels = [label for label, _o, _n in SUBTASKS.values()]
    assert (summary.spawned, summary.workers, summary.settled) == (3, 2, 3)
    assert summary.subtasks == [label[:100] for label in labels]
    assert len(labels[1]) > 100
    # The workers' clones, in the order they were first seen: the two start together, so
    # either may be ingested first (as in tests/arms/test_supervisor.py). What follows
    # (spend, result.json, the ledger's worker lines) keeps that recovered order.
    cwds = figures.worker_cwds(ingest)
    assert sorted(cwds) == sorted(_clones(run_dir))

    # Recovered worker spend equals the cell's opencode store.
    sessions, tok_in, tok_out, out_only, session_ids = _store_worker_spend(run_dir, cwds)
    assert sessions == 2
    assert tok_in == 2 * STEPS * (PROMPT - CACHED)  # both workers' model calls reached it
    recovered = _one(cell, ev.CellRecovered)
    assert recovered.store_available is True  # type: ignore[attr-defined]
    spend = recovered.spend  # type: ignore[attr-defined]
    assert spend.worker_cwds == cwds
    assert (spend.worker_sessions, spend.worker_tok_in, spend.worker_tok_out) == (
        sessions,
        tok_in,
        tok_out,
    )
    assert spend.worker_tok_sqlite == tok_in + tok_out
    # The driver settled each worker with its step_finish input + output: opencode's own sums.
    assert spend.worker_tok_journal == tok_in + out_only
    captured = [e for e in capture if isinstance(e, AgentSessionCaptured)]
    assert {c.session_id for c in captured} == session_ids
    assert {c.directory for c in captured} == set(cwds)
    assert all(c.purpose == "worker" and c.messages and c.parts for c in captured)
    assert not any(isinstance(e, WorkerCwdUnmatched) for e in capture)
    _assert_workers_went_through_the_gateway(tmp_path / "home", run_dir, ingest, tok_in, tok_out)

    # result.json: the reference's SupervisorArmResult fields, from events only.
    state = json.loads((sup / "state.json").read_text())
    started = _one(cell, ev.RunStarted)
    provenance = _one(cell, ev.ProvenanceRecorded)
    result: dict[str, Any] = json.loads((run_dir / "result.json").read_text())
    wall_s = result.pop("wall_s")
    assert isinstance(wall_s, int) and wall_s >= 0
    assert result == {
        "arm": "SUP",
        "iid": "i1",
        "driver_rc": 0,
        "patch_lines": verified.patch_lines,  # type: ignore[attr-defined]
        "verify_rc": 0,
        "verify_pass": True,
        "scored": True,  # arenad's addition: whether the run counts
        "not_scored_reason": None,
        "sup_status": "completed",
        "sup_verdict": "delivered",
        "delivered": True,
        "spentTokens": state["result"]["spentTokens"],
        "spentUsd": state["result"]["spentUsd"],
        "spawned": 3,
        "workers": 2,
        "settled": 3,
        "subtasks": [js_slice(label, 100) for label in labels],
        "patchPath": verified.patch_path,  # type: ignore[attr-defined]
        "provenance": {
            "repo": provenance.repo,  # type: ignore[attr-defined]
            "commit": provenance.commit,  # type: ignore[attr-defined]
            "envKnobs": provenance.env_knobs,  # type: ignore[attr-defined]
        },
        "recoveredSpend": {
            "workerTokJournal": tok_in + out_only,
            "workerCwds": cwds,
            "workerSessions": sessions,
            "workerTokSqlite": tok_in + tok_out,
            "workerTokIn": tok_in,
            "workerTokOut": tok_out,
        },
    }
    assert len(provenance.commit) == 40  # type: ignore[attr-defined]
    assert started.argv  # type: ignore[attr-defined]
    params = json.loads((run_dir / "params.json").read_text())
    assert params["workerModel"] == "scripted/worker" and params["workspaceDir"] == str(ws)
    _assert_ledger_lines(tmp_path / "home", cell, run_dir, state, labels, cwds, tok_in, tok_out)


def _journal(home: Path) -> Path:
    return gateway_paths.attempt_journal(home, "supoc", CELL, 1)


def _assert_workers_went_through_the_gateway(
    home: Path, run_dir: Path, ingest: list[Event], tok_in: int, tok_out: int
) -> None:
    """Every worker model call is one gateway record of the attempt (issue 31): the cell's
    opencode config, which the workers inherit through the driver's env, names the gateway
    and the attempt's token, and the gateway's sums equal the workers' own store."""
    port = (home / "gateway" / "port").read_text().strip()
    config = json.loads(Path(cell_paths(run_dir).opencode_config).read_text())
    options = config["provider"]["scripted"]["options"]
    assert options["baseURL"] == f"http://127.0.0.1:{port}/u/scripted/v1"
    assert options["apiKey"].startswith("agw-")
    calls = [
        json.loads(e.raw) for e in ingest if isinstance(e, LineIngested) and e.source == "gateway"
    ]
    assert len(calls) == 2 * STEPS  # two workers, each its edit and its final text
    assert {c["cell_id"] for c in calls} == {CELL} and {c["attempt"] for c in calls} == {1}
    assert all(answered(c) for c in calls)
    assert {c["request"]["model"] for c in calls} == {"worker"}
    sums = gateway_figures(calls)
    assert sums["tokens_in"] == tok_in
    assert sums["tokens_out"] + sums["tokens_reasoning"] == tok_out


def _assert_ledger_lines(
    home: Path,
    cell: list[Event],
    run_dir: Path,
    state: dict[str, Any],
    labels: list[str],
    cwds: list[str],
    tok_in: int,
    tok_out: int,
) -> None:
    """The supervisor line and its worker lines of this real run, field by field as
    tests/ledger/test_reference_lines.py expects them of a log built by hand (only ids,
    paths, times and the figures of the real run differ)."""
    out = home.parent / "ledger.jsonl"
    done = cli(home, "project-ledger", str(out), "--campaign", "supoc")
    assert done.returncode == 0, done.stderr
    sup_line, *workers = [json.loads(x) for x in out.read_text().splitlines()]
    verified = _one(cell, ev.CellVerified)
    provenance = _one(cell, ev.ProvenanceRecorded)
    completed = _one(cell, ev.RunCompleted)
    commit = provenance.commit  # type: ignore[attr-defined]
    assert sup_line["role"] == "supervisor" and sup_line["parent_rollout_id"] is None
    assert sup_line["run_id"].startswith("arenad:") and sup_line["run_id"].endswith(":supoc")
    assert sup_line["policy"] == {
        "harness": "pi-loops",
        "harness_version": None,
        # The reference's resolvedModel: the worker model, not the driver's (finding 9).
        "model": "worker",
        "provider": "scripted",
        "profile_commit": commit,
        "sampling": None,
    }
    assert sup_line["messages"] == [] and sup_line["tool_defs"] == []
    outcome = sup_line["outcome"]
    assert outcome["verdict"] is None  # no judge in this campaign
    spent_tokens = state["result"]["spentTokens"]
    metrics = {k: v for k, v in outcome["metrics"].items() if k != "resolved"}
    assert metrics == {
        "verify_pass": True,
        "patch_lines": verified.patch_lines,  # type: ignore[attr-defined]
        "judge_attempts": None,
        "judge_wall_s": None,
        "spent_tokens": spent_tokens,
        "spent_usd": state["result"]["spentUsd"],
        "recovered_tokens": spent_tokens + tok_in + tok_out,
        "sup_status": "completed",
        "sup_verdict": "delivered",
        "spawned": 3,
        "workers": 2,
        "settled": 3,
        "subtasks": [js_slice(label, 100) for label in labels],
        "cached": False,
        "scored": True,
        "not_scored_reason": None,
        "rc": 0,
        "attempt": 1,
        # Graded on a fresh checkout of base + the patch; nothing tampered with.
        "verify_in": "checkout",
        "self_reported": False,
        "patch_applied": True,
        "tampered_paths": [],
    }
    assert (outcome["is_completed"], outcome["is_truncated"], outcome["error"]) == (
        True,
        False,
        None,
    )
    assert sup_line["cost"] == {
        "usd": state["result"]["spentUsd"],  # the episode's own receipt
        "tokens_in": None,
        "tokens_out": None,
        "tokens_reasoning": None,
        "cache_read": None,
        "cache_write": None,
        "wall_s": js_round(completed.wall_s),  # type: ignore[attr-defined]
    }
    assert sup_line["artifacts"] == {
        "patch_path": verified.patch_path,  # type: ignore[attr-defined]
        "run_dir": str(run_dir),
        "transcript_ref": f"{run_dir}/brain.jsonl",
    }
    assert sup_line["provenance"]["gap"] == BRAIN_GAP
    # One worker line per worker cwd, in the recovered order, each a real session.
    assert [w["outcome"]["metrics"]["worker_cwd"] for w in workers] == cwds
    for w in workers:
        assert w["role"] == "worker" and w["parent_rollout_id"] == sup_line["rollout_id"]
        assert w["policy"]["harness"] == "opencode" and w["policy"]["profile_commit"] == commit
        assert (w["policy"]["model"], w["policy"]["provider"]) == ("worker", "scripted")
        assert w["outcome"]["metrics"]["has_session"] is True
        # No judge: no reward to inherit (null, never a fake 0).
        assert (w["outcome"]["reward"], w["outcome"]["reward_source"]) == (None, None)
        calls = [c for m in w["messages"] for c in m.get("tool_calls", [])]
        assert [c["function"]["name"] for c in calls] == ["bash"]
        assert w["artifacts"]["transcript_ref"].startswith("opencode:ses_")
        assert "gap" not in w["provenance"]
    assert sum(w["cost"]["tokens_in"] for w in workers) == tok_in


@pytest.mark.slow
def test_hanging_workers_are_ended_and_their_spend_is_recovered(
    tmp_path: Path, opencode_bin: Path, scripted_model: Callable[[str], RunningModel]
) -> None:
    # Each worker's second model call hangs: the driver waits on its workers, so the whole
    # run hangs mid-flight. It is ended once a worker is known to hang (an operator's
    # abort, on that event): a ceiling guessed to fall after the workers' first step was
    # too tight on a loaded 2-core machine. Deadlines themselves are tested in tests/runs.
    cell, ingest, capture, run_dir = _run(
        tmp_path,
        opencode_bin,
        scripted_model,
        timeout_s=3600,
        second_step_delay_s=3600,
        abort_when_hanging=True,
    )
    aborted = _one(cell, ev.RunAborted)
    started = _one(cell, ev.RunStarted)
    # Driver and opencode workers were one process group; none of it lives on.
    assert live_group_members(started.pgid) == []  # type: ignore[attr-defined]
    # An operator's abort interrupts the run (issue 29): never verified, not the agent's
    # result; its spend is recovered all the same (below).
    assert aborted.cause == "operator"  # type: ignore[attr-defined]
    assert not [e for e in cell if isinstance(e, ev.CellVerified)]
    assert _one(cell, ev.CellFailed).stage == "interrupted"  # type: ignore[attr-defined]

    sup = run_dir / "ws" / SUP_RUN
    journal = _journal(tmp_path / "home")
    assert_files_ingested_exactly(ingest, sup, run_dir / "brain.jsonl", journal)
    assert_closed_once(ingest, sup, run_dir / "brain.jsonl", journal)
    assert figures.summarize(ingest).settled == 0
    cwds = figures.worker_cwds(ingest)  # first seen: either worker may come first
    assert sorted(cwds) == sorted(_clones(run_dir))
    # Spend is still recovered from the store the killed workers left behind.
    sessions, tok_in, tok_out, _out, session_ids = _store_worker_spend(run_dir, cwds)
    recovered = _one(cell, ev.CellRecovered)
    spend = recovered.spend  # type: ignore[attr-defined]
    assert recovered.store_available is True  # type: ignore[attr-defined]
    assert (spend.worker_sessions, spend.worker_tok_in, spend.worker_tok_out) == (
        sessions,
        tok_in,
        tok_out,
    )
    # Not necessarily both: the second worker starts once the first is under way, and on a
    # loaded machine the ceiling may come before its session does. At least the first one
    # spent tokens before the hang, so the recovered figures are not vacuous.
    assert sessions >= 1 and tok_in > 0
    assert spend.worker_tok_journal == 0  # no worker settled
    captured = [e for e in capture if isinstance(e, AgentSessionCaptured)]
    assert {c.session_id for c in captured} == session_ids
    unmatched = {e.cwd for e in capture if isinstance(e, WorkerCwdUnmatched)}
    assert unmatched == set(cwds) - {c.directory for c in captured}
    result = json.loads((run_dir / "result.json").read_text())
    assert result["sup_status"] == "running"
    assert result["driver_rc"] == aborted.rc  # type: ignore[attr-defined]
    assert result["recoveredSpend"]["workerSessions"] == sessions


@pytest.mark.slow
def test_the_cells_store_exists_before_the_driver_starts(
    tmp_path: Path, opencode_bin: Path
) -> None:
    # Workers that start at once would race to create and migrate the store. The arm creates
    # it first, so even a driver that starts no worker leaves a migrated, empty store: a
    # store read with no sessions (0 is known here), not a gap.
    # The stand-in runs no opencode here (no FAKE_SUP_OPENCODE): its workers do nothing.
    home = _submitted(tmp_path, opencode_bin, timeout_s=60, network="none")
    records = daemon_until_idle(home, env_with(FAKE_SUP_PAUSE="0.1"), tmp_path / "daemon.err")
    cell = stream_events(records, f"cell/{CELL}")
    run_dir = Path(_one(cell, ev.CellMaterialized).run_dir)  # type: ignore[attr-defined]
    assert (run_dir / "driver.err").read_text() == ""
    db = run_dir / "xdg" / "data" / "opencode" / "opencode.db"
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        assert conn.execute("select count(*) from migration").fetchone()[0] > 0
        assert conn.execute("select count(*) from session").fetchone()[0] == 0
    recovered = _one(cell, ev.CellRecovered)
    assert recovered.store_available is True  # type: ignore[attr-defined]
    assert recovered.spend.worker_sessions == 0  # type: ignore[attr-defined]


@pytest.mark.slow
def test_workers_started_by_plain_exec_work_in_their_clones(
    tmp_path: Path, opencode_bin: Path, scripted_model: Callable[[str], RunningModel]
) -> None:
    """Finding 4: the launch exported PWD=<loops checkout> to the driver, and workers it
    started by a plain exec in their clones (inheriting it) worked in the loops checkout:
    no worker cwd matched a session, and the cell showed 0 tokens."""
    cell, _ingest, capture, run_dir = _run(
        tmp_path, opencode_bin, scripted_model, timeout_s=300, exec_mode="plain"
    )
    clones = _clones(run_dir)
    n, tin, _tout, out, _ids = _store_worker_spend(run_dir, clones)
    assert n == 2 and tin > 0 and out > 0
    assert not [e for e in capture if isinstance(e, WorkerCwdUnmatched)]
    recovered = _one(cell, ev.CellRecovered)
    spend = recovered.spend  # type: ignore[attr-defined]
    assert spend.worker_sessions == 2 and spend.worker_tok_in == tin
    verified = _one(cell, ev.CellVerified)
    patch = Path(verified.patch_path).read_text()  # type: ignore[attr-defined]
    assert "+    return a + b" in patch and "+    return a * b" in patch
    # The driver and its workers saw the loops checkout read-only, and it is untouched.
    loops = tmp_path / "loops"
    view = _one(cell, ev.RunStarted).sandbox  # type: ignore[attr-defined]
    assert view.kind == "bwrap" and str(loops) in view.read_only
    assert not any(p.startswith(str(loops)) for p in view.read_write)
    assert sorted(p.name for p in loops.iterdir()) == [".git", "README"]
