"""Cells on a real multi-node Ray cluster, through a real `arenad daemon --executor ray`.

The cluster is the session's (tests/ray_support.py: two worker nodes, a head with no CPU,
token auth); a test that removes or freezes a node gets a spare one of its own, the only
one offering ``{"arenad_spare": 1}``, and its campaign asks for that. The agent is a bash
script that reports one line to ``runs.txt`` each time it really starts (over the network:
it runs sandboxed, see tests.daemon.support.Beacon), so "it ran once" is a count, and writes
JSON lines to its stdout over time.

An abort on Ray (the group and its children killed) is the executor contract's
(tests/executors/ray/test_executor.py); how `arenad abort` reaches a run is the same for every
executor (tests/daemon/test_control.py).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from arenad.runs import groups
from events import cell as ev
from events.base import Event, Recorded
from events.ingest import IngestionClosed, LineIngested, LineMalformed
from tests.conftest import make_repo
from tests.daemon.support import (
    Beacon,
    cli,
    command_campaign,
    read_all,
    start_daemon,
    submitted,
    wait_for,
)
from tests.opencode_support import RunningModel
from tests.ray_support import SPARE, RayTestCluster, node_pids

pytestmark = pytest.mark.slow


_beacons: list[Beacon] = []


@pytest.fixture(autouse=True)
def _close_beacons() -> Iterator[None]:
    yield
    while _beacons:
        _beacons.pop().close()


def _agent(marker: Path, lines: int, pause_s: float) -> list[str]:
    beacon = Beacon(marker)
    _beacons.append(beacon)
    script = (
        f"{beacon.shell()}; "
        'echo changed > a.txt; env > "$HOME/agent.env"; '
        f"for i in $(seq {lines}); do "
        # Doubled braces: the command arm's argv is a str.format template.
        f'echo "{{{{\\"kind\\":\\"tick\\",\\"i\\":$i}}}}"; sleep {pause_s}; done'
    )
    return ["bash", "-c", script]


def _setup(
    tmp_path: Path,
    name: str,
    argv: list[str],
    *,
    resources: str = "{ arenad_slot = 1 }",
    instances: tuple[str, ...] = ("i1",),
) -> Path:
    home = tmp_path / "home"
    repo = tmp_path / "repo"
    base = make_repo(repo, {"a.txt": "a\n"})
    camp = command_campaign(
        tmp_path / "c.toml",
        name=name,
        repo=repo,
        base=base,
        argv=argv,
        verify_cmd="grep -q changed a.txt",
        instances=instances,
        # The agents report through a Beacon on the host's loopback: the host's network.
        extra=f'[executor]\nkind = "ray"\nresources = {resources}\n[sandbox]\nnetwork = "host"',
    )
    return submitted(home, camp)


def _daemon(home: Path, cluster: RayTestCluster, err: Path, heartbeat_s: float) -> Any:
    return start_daemon(
        home,
        "--until-idle",
        "--executor",
        "ray",
        "--ray-heartbeat-s",
        str(heartbeat_s),
        env=cluster.env(),
        stderr=err,
    )


def _events(recorded: list[Recorded], stream: str) -> list[Event]:
    return [r.event for r in recorded if r.stream == stream]


def _of(events: list[Event], kind: type) -> list[Any]:
    return [e for e in events if isinstance(e, kind)]


def _lines(recorded: list[Recorded], cell: str) -> list[LineIngested | LineMalformed]:
    return [
        e
        for e in _events(recorded, f"ingest/{cell}/1")
        if isinstance(e, LineIngested | LineMalformed)
    ]


def _ingested(home: Path, cell: str) -> Callable[[], int]:
    return lambda: len(_lines(read_all(home), cell))


def _exactly_the_file(recorded: list[Recorded], cell: str, out: Path) -> None:
    """The ingested lines are the file's bytes, each once, in order (no gap, no dup)."""
    lines = _lines(recorded, cell)
    text = "".join(e.raw + ("" if e.partial else "\n") for e in lines).encode()
    assert text == out.read_bytes()
    offsets = [e.offset for e in lines]
    assert offsets == sorted(set(offsets)), "a line was ingested twice"


def _actors(namespace: str) -> list[str]:
    import ray

    return [
        a["name"]
        for a in ray.util.list_named_actors(all_namespaces=True)
        if a["namespace"] == namespace
    ]


def _namespace(home: Path) -> str:
    from arenad.executors.ray.executor import namespace_for

    return namespace_for(home)


def test_cells_run_on_the_nodes_and_are_recorded_as_locally(
    tmp_path: Path, ray_cluster: RayTestCluster
) -> None:
    marker = tmp_path / "runs.txt"
    n = 200
    home = _setup(tmp_path, "rhappy", _agent(marker, n, 0.002), instances=("i1", "i2"))
    daemon = _daemon(home, ray_cluster, tmp_path / "daemon.err", heartbeat_s=20)
    assert daemon.wait(timeout=150) == 0, (tmp_path / "daemon.err").read_text()[-3000:]

    recorded = read_all(home)
    assert len(marker.read_text().split()) == 2, "an agent ran twice (or never)"
    for instance in ("i1", "i2"):
        cell = f"rhappy:{instance}:CMD:0"
        events = _events(recorded, f"cell/{cell}")
        assert [type(e).__name__ for e in events] == [
            "CellSubmitted",
            "CellMaterialized",
            "RunStarted",
            "RunCompleted",
            "CellVerified",
            "PatchCaptured",
            "VerifyLogCaptured",
            "CellRecovered",
        ], events
        started, completed, verified = events[2], events[3], events[4]
        assert isinstance(started, ev.RunStarted) and started.executor == "ray"
        assert started.node is not None and "/" in started.node
        assert isinstance(completed, ev.RunCompleted) and completed.rc == 0
        assert isinstance(verified, ev.CellVerified) and verified.verify_pass
        assert verified.patch_lines and verified.patch_path is not None
        assert "+changed" in Path(verified.patch_path).read_text()
        lines = _lines(recorded, cell)
        assert [json.loads(e.raw)["i"] for e in lines] == list(range(1, n + 1))
        assert isinstance(_events(recorded, f"ingest/{cell}/1")[-1], IngestionClosed)
        run_dir = Path(_of(events, ev.CellMaterialized)[0].run_dir)
        _exactly_the_file(recorded, cell, run_dir / "cmd.out")
        assert not groups.group_alive(started.pgid)
        # The agent's environment never carried the cluster's settings (its token's path).
        agent_env = next(run_dir.rglob("agent.env")).read_text().splitlines()
        assert agent_env and not [v for v in agent_env if v.startswith("RAY_")]
    # Every cell's actor was ended with its cell.
    assert _actors(_namespace(home)) == []
    assert cli(home, "verify-log").returncode == 0


def test_a_killed_daemon_is_restarted_and_resumes_from_the_logged_offsets(
    tmp_path: Path, ray_cluster: RayTestCluster
) -> None:
    marker = tmp_path / "runs.txt"
    cell = "rkill:i1:CMD:0"
    home = _setup(tmp_path, "rkill", _agent(marker, 80, 0.05))
    first = _daemon(home, ray_cluster, tmp_path / "daemon.err", heartbeat_s=20)
    wait_for(lambda: _ingested(home, cell)() >= 10, "lines to be ingested", timeout_s=60)
    first.send_signal(signal.SIGKILL)
    first.wait()
    at_kill = _ingested(home, cell)()
    started = _of(_events(read_all(home), f"cell/{cell}"), ev.RunStarted)[0]
    assert groups.group_alive(started.pgid), "the agent died with the head"

    second = _daemon(home, ray_cluster, tmp_path / "daemon2.err", heartbeat_s=20)
    assert second.wait(timeout=120) == 0, (tmp_path / "daemon2.err").read_text()[-3000:]
    recorded = read_all(home)
    events = _events(recorded, f"cell/{cell}")
    assert len(marker.read_text().split()) == 1, "the agent ran twice"
    assert len(_of(events, ev.RunStarted)) == 1
    adopted = _of(events, ev.RunAdopted)
    assert len(adopted) == 1 and adopted[0].pid == started.pid
    assert [c.rc for c in _of(events, ev.RunCompleted)] == [0]
    lines = _lines(recorded, cell)
    assert len(lines) == 80 > at_kill
    assert [json.loads(e.raw)["i"] for e in lines] == list(range(1, 81))
    run_dir = Path(_of(events, ev.CellMaterialized)[0].run_dir)
    _exactly_the_file(recorded, cell, run_dir / "cmd.out")
    assert isinstance(events[-1], ev.CellRecovered)


def _running(home: Path, cell: str) -> ev.RunStarted:
    wait_for(lambda: _ingested(home, cell)() >= 10, "lines to be ingested", timeout_s=90)
    started = _of(_events(read_all(home), f"cell/{cell}"), ev.RunStarted)
    assert len(started) == 1
    return started[0]  # type: ignore[no-any-return]


def _lost(home: Path, cell: str, timeout_s: float) -> ev.RunAborted:
    def aborted() -> list[Any]:
        return _of(_events(read_all(home), f"cell/{cell}"), ev.RunAborted)

    return wait_for(aborted, "the run to be recorded lost", timeout_s=timeout_s)[0]  # type: ignore[no-any-return]


def _ended_on_its_own(home: Path, cell: str, daemon: Any, err: Path) -> list[Recorded]:
    assert daemon.wait(timeout=90) == 0, err.read_text()[-3000:]
    return read_all(home)


def test_a_node_removed_mid_run_makes_the_run_lost_with_its_lines_kept(
    tmp_path: Path, ray_cluster: RayTestCluster, spare_node: Any
) -> None:
    marker = tmp_path / "runs.txt"
    cell = "rgone:i1:CMD:0"
    heartbeat_s = 4.0
    home = _setup(tmp_path, "rgone", _agent(marker, 2000, 0.02), resources=f"{{ {SPARE} = 1 }}")
    daemon = _daemon(home, ray_cluster, tmp_path / "daemon.err", heartbeat_s)
    started = _running(home, cell)
    removed_at = time.time()
    ray_cluster.cluster.remove_node(spare_node, allow_graceful=False)
    aborted = _lost(home, cell, timeout_s=60)
    recorded = _ended_on_its_own(home, cell, daemon, tmp_path / "daemon.err")

    lost_at = next(r.recorded_at_ms for r in recorded if r.event == aborted) / 1000
    assert lost_at - removed_at < heartbeat_s + 3, "not lost within the heartbeat limit"
    assert aborted.rc is None
    assert len(marker.read_text().split()) == 1, "the agent ran twice"
    assert not groups.group_alive(started.pgid), "the agent outlived its node"
    # What was ingested is kept: the start of the file, every line once, in order. The
    # files could not be drained, so ingestion is not closed.
    lines = _lines(recorded, cell)
    assert [json.loads(e.raw)["i"] for e in lines] == list(range(1, len(lines) + 1))
    assert len(lines) >= 10
    assert not _of(_events(recorded, f"ingest/{cell}/1"), IngestionClosed)
    run_dir = Path(_of(_events(recorded, f"cell/{cell}"), ev.CellMaterialized)[0].run_dir)
    text = "".join(e.raw + "\n" for e in lines).encode()
    assert (run_dir / "cmd.out").read_bytes().startswith(text)
    # No node offers the spare resource any more: the patch step cannot run anywhere.
    failed = _of(_events(recorded, f"cell/{cell}"), ev.CellFailed)
    assert failed and failed[-1].classification == "infrastructure"
    assert _actors(_namespace(home)) == []


def test_a_frozen_node_is_lost_at_the_heartbeat_and_its_agent_ends_itself(
    tmp_path: Path, ray_cluster: RayTestCluster, spare_node: Any
) -> None:
    import psutil

    marker = tmp_path / "runs.txt"
    cell = "rfrozen:i1:CMD:0"
    # Shorter than Ray's own detection of a silent node (~3-5 s here, ~60 s by default).
    heartbeat_s = 2.0
    home = _setup(tmp_path, "rfrozen", _agent(marker, 3000, 0.02), resources=f"{{ {SPARE} = 1 }}")
    daemon = _daemon(home, ray_cluster, tmp_path / "daemon.err", heartbeat_s)
    started = _running(home, cell)
    # Freeze the node's Ray processes (raylet, agents, the actor's worker), not the run's
    # own group: as in a partition, the agent would run on, spending, if nothing stopped it.
    frozen = [p for p in node_pids(spare_node) if _pgid(p) != started.pgid]
    for pid in frozen:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGSTOP)
    try:
        aborted = _lost(home, cell, timeout_s=60)
        # The real reason, not "lost with the daemon": the daemon was up, its node went quiet.
        assert aborted.rc is None and aborted.reason.endswith("no answer from its node for 2 s")
        wait_for(
            lambda: not groups.group_alive(started.pgid),
            "the wrapper to end the agent's group",
            timeout_s=10,
        )
        record = json.loads((Path(_run_dir(home, cell)) / "arenad.exit.json").read_text())
        assert record["ended_by"].startswith("lifeline silent")
    finally:
        for pid in frozen:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
    recorded = _ended_on_its_own(home, cell, daemon, tmp_path / "daemon.err")
    err = (tmp_path / "daemon.err").read_text()
    assert "no answer from its node" in err, err[-3000:]
    # Lost is interrupted, not the agent's result (issue 29): never verified, and retried
    # under the infra retry policy as a new attempt, which ran the agent once more (the
    # first one's group was dead before, see above).
    events = _events(recorded, f"cell/{cell}")
    failed = _of(events, ev.CellFailed)[0]
    assert (failed.stage, failed.classification) == ("interrupted", "infrastructure")
    assert [r.attempt for r in _of(events, ev.CellRetried)][:1] == [2]
    assert not [v for v in _of(events, ev.CellVerified) if v.attempt == 1]
    # Once more at most: the new attempt may not have reached its agent before the end.
    assert len(marker.read_text().split()) in (1, 2)
    lines = _lines(recorded, cell)
    assert [json.loads(e.raw)["i"] for e in lines] == list(range(1, len(lines) + 1))
    # Thawed, the actor's worker exits (Ray killed it, or it saw its raylet go).
    wait_for(
        lambda: not [p for p in frozen if _alive(psutil, p) and "CellActor" in _cmd(psutil, p)],
        "the actor's worker to exit",
        timeout_s=30,
    )


def _run_dir(home: Path, cell: str) -> str:
    return str(_of(_events(read_all(home), f"cell/{cell}"), ev.CellMaterialized)[0].run_dir)


def _pgid(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except ProcessLookupError:
        return None


def _alive(psutil: Any, pid: int) -> bool:
    try:
        return bool(psutil.Process(pid).status() != psutil.STATUS_ZOMBIE)
    except psutil.NoSuchProcess:
        return False


def _cmd(psutil: Any, pid: int) -> str:
    try:
        return " ".join(psutil.Process(pid).cmdline())
    except psutil.NoSuchProcess:
        return ""


def test_a_solo_cell_runs_the_real_opencode_on_a_node(
    tmp_path: Path,
    ray_cluster: RayTestCluster,
    ray_namespace: str,
    opencode_bin: Path,
    scripted_model: Callable[[str], RunningModel],
) -> None:
    import asyncio

    from arenad.app import init_home
    from arenad.app.executors import cell_base_env, executor_factory
    from arenad.app.submit import submit_campaign
    from arenad.daemon.daemon import DaemonOptions, run_daemon
    from arenad.home import Home
    from events.capture import AgentSessionCaptured
    from tests.daemon.test_e2e import BUGS, STEPS, _expected_diff, _script

    file, src, old, new = BUGS["add-bug"]
    home, repo = tmp_path / "home", tmp_path / "repo"
    base = make_repo(repo, {file: src})
    model = scripted_model(_script())
    camp = tmp_path / "roc.toml"
    camp.write_text(
        "\n".join(
            [
                'name = "roc"',
                "[materializer]",
                'kind = "git"',
                f"source = {json.dumps(str(repo))}",
                "[executor]",
                'kind = "ray"',
                "resources = { arenad_slot = 1 }",
                "[[instances]]",
                'instance_id = "add-bug"',
                f'base_commit = "{base}"',
                'problem_statement = "[add-bug] add() in add.py is wrong; fix it."',
                "verify_cmd = \"python3 -c 'from add import add; assert add(2, 3) == 5'\"",
                "[[arms]]",
                'name = "SOLO"',
                'kind = "solo"',
                'model = "scripted/fixer"',
                "timeout_s = 120",
                f"opencode_bin = {json.dumps(str(opencode_bin))}",
            ]
        )
        + "\n"
    )
    config = model.opencode_config(provider_id="scripted")
    env = {**ray_cluster.env(), "OPENCODE_CONFIG_CONTENT": json.dumps(config)}

    async def go() -> None:
        await init_home(Home(home))
        await submit_campaign(Home(home), camp)
        # In this process: the scripted model serves from a thread of it; the daemon
        # uses this process's connection to the cluster.
        factory = executor_factory("ray", ray_heartbeat_s=30)
        options = DaemonOptions(max_parallel=1, until_idle=True)
        await run_daemon(Home(home), options, cell_base_env("ray", env), executor=factory)

    asyncio.run(go())
    recorded = read_all(home)
    cell = "roc:add-bug:SOLO:0"
    events = _events(recorded, f"cell/{cell}")
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
    started, verified, recovered = events[3], events[5], events[-1]
    assert isinstance(started, ev.RunStarted) and started.executor == "ray"
    assert isinstance(verified, ev.CellVerified) and verified.verify_pass and verified.scored
    assert verified.patch_path is not None
    assert Path(verified.patch_path).read_text() == _expected_diff(file, src, old, new)
    assert isinstance(recovered, ev.CellRecovered) and recovered.store_available
    assert recovered.usage is not None and recovered.usage.steps == STEPS
    captures = _of(_events(recorded, f"capture/{cell}/1"), AgentSessionCaptured)
    assert len(captures) == 1 and captures[0].messages
    # The agent's stdout (the model gateway's records of its calls are the other source).
    lines = [
        e
        for e in _events(recorded, f"ingest/{cell}/1")
        if isinstance(e, LineIngested) and e.source == "stdout"
    ]
    run_dir = Path(_of(events, ev.CellMaterialized)[0].run_dir)
    assert (
        lines
        and "".join(e.raw + "\n" for e in lines).encode() == (run_dir / "oc.jsonl").read_bytes()
    )
