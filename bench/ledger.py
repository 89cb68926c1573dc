"""Benchmark: `arenad project-ledger` over a synthetic log of solo and supervisor cells.

    .venv/bin/python -m bench.ledger [--quick] [--small 1000] [--large 10000] [--messages 30]
        [--repeat 3] [--folded-here]

The log is built through the real SqliteEventStore of a real home (batched appends, the
cells read model kept in the same transactions): every cell goes submitted → materialized
→ running → completed → verified → recovered, half of them judged; two in three are solo
cells (one opencode session, a subagent session in one of three), one in three supervisor
cells (two worker sessions, one unmatched worker cwd in one of four). Every session holds
``--messages`` messages (a user prompt, then assistant steps with reasoning, text or a
tool call and its output), stored as opencode's message/part rows, each session with
the fold recovery keeps of it (``--folded-here``: without, as captures recorded before
it was kept, so the projection folds every session's rows itself).

The small log is built first and copied; the large one continues it. Each measurement runs
in a fresh subprocess (peak RSS: the child's own VmHWM), ``--repeat`` times (the best run
is kept: a shared machine only ever adds time):

- baseline: every event read with stdlib sqlite3 in batches and decoded by the real codec
  (msgspec), nothing projected;
- projection: ``arenad.ledger.service.project_ledger`` — what ``arenad project-ledger``
  calls — writing the ledger file; by default it shares a big ledger's cells with worker
  processes (one per core), so it is measured again on one process when it did.

Prints events/s, lines/s and peak RSS at both sizes, the projection/baseline time ratio
(wall clock, and CPU time of every thread and worker process: the per-core cost), and
the large/small peak RSS ratio (memory must stay flat: the projection streams a bounded
batch of cells at a time).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
T0 = 1_785_000_000_000
APPEND_BATCH_CELLS = 100

_SENTENCE = (
    "the widget frobnicates twice when the lever is pulled once so the handler must check"
    " the latch state before it dispatches another event to the queue and the tests cover"
    " both the single pull and the double pull paths in the integration suite"
)
_WORDS = _SENTENCE.split(" ")


def _text(seed: int, words: int) -> str:
    return " ".join(_WORDS[(seed * 7 + k * 3) % len(_WORDS)] for k in range(words))


# --------------------------------------------------------------------------- synthesis


def _session(
    cell: int, sid: str, parent: str | None, cwd: str, purpose: str, messages: int, kept: bool
) -> Any:
    from arenad.recovery.opencode_transcript import session_transcript
    from events import capture as cap

    created = T0 + cell * 1000
    msgs: list[cap.MessageRow] = []
    parts: list[cap.PartRow] = []

    def part(mid: str, n: int, data: dict[str, Any]) -> None:
        parts.append(cap.PartRow(id=f"prt_{mid}_{n}", message_id=mid, data=json.dumps(data)))

    for m in range(messages):
        mid = f"msg_{sid}_{m:03d}"
        if m == 0:
            msgs.append(
                cap.MessageRow(id=mid, time_created=created, data=json.dumps({"role": "user"}))
            )
            part(mid, 0, {"type": "text", "text": _text(cell, 90)})
            continue
        info = {
            "role": "assistant",
            "modelID": "glm-5",
            "providerID": "zai",
            "cost": 0.0012,
            "tokens": {"input": 1200 + m, "output": 80, "reasoning": 20},
        }
        msgs.append(cap.MessageRow(id=mid, time_created=created + m, data=json.dumps(info)))
        part(mid, 0, {"type": "step-start"})
        if m % 3 == 1:
            part(mid, 1, {"type": "reasoning", "text": _text(cell + m, 25)})
            part(mid, 2, {"type": "text", "text": _text(cell + m + 1, 30)})
        else:
            state = {
                "status": "completed",
                "input": {"command": f"python -m pytest -q tests/test_{m}.py"},
                "output": _text(cell + m, 40),
            }
            part(mid, 1, {"type": "tool", "callID": f"call_{m}", "tool": "bash", "state": state})
        part(mid, 3, {"type": "step-finish", "reason": "tool-calls"})
    row = {
        "id": sid,
        "parent_id": parent,
        "directory": cwd,
        "agent": "build",
        "model": json.dumps({"id": "glm-5", "providerID": "zai"}),
        "time_created": created,
        "time_updated": created + 95_000,
        "cost": 0.04,
        "tokens_input": 36000,
        "tokens_output": 2400,
        "tokens_reasoning": 600,
        "tokens_cache_read": 120000,
        "tokens_cache_write": 0,
    }
    return cap.AgentSessionCaptured(
        attempt=1,
        purpose=purpose,  # type: ignore[arg-type]
        store_path=f"/bench/{cell}/opencode.db",
        session_id=sid,
        parent_id=parent,
        directory=cwd,
        row=row,
        messages=msgs,
        parts=parts,
        # Folded as recovery folds a session it captures.
        transcript=session_transcript(msgs, parts, sid) if kept else None,
    )


def cell_requests(i: int, messages: int, kept: bool = True) -> list[Any]:
    """The appends of one finished cell: its stream and its capture stream."""
    from arenad.store.base import AppendRequest
    from events import capture as cap
    from events import cell as ev
    from events.specs import CellSpec, InstanceSpec, MaterializerSpec, SoloArm, SupervisorArm

    supervisor = i % 3 == 2
    arm: SoloArm | SupervisorArm
    if supervisor:
        arm = SupervisorArm(
            name="SUP",
            worker_model="zai/glm-5",
            driver_model="zai/glm-5",
            loops_repo="/opt/loops",
            extension_path="/opt/loops/ext.ts",
            shim_path="/opt/loops/shim.mjs",
            driver_cmd=["node", "{shim}", "{params}"],
        )
    else:
        arm = SoloArm(name="SOLO", model="zai/glm-5")
    spec = CellSpec(
        campaign="bench",
        instance=InstanceSpec(
            instance_id=f"inst-{i:05d}",
            repo="example/widgets",
            base_commit="0123456789abcdef0123456789abcdef01234567",
            problem_statement=_text(i, 80),
            verify_cmd="python -m pytest -q tests/test_widget.py",
        ),
        arm=arm,
        rep=0,
        materializer=MaterializerSpec(kind="git", source="/srv/widgets"),
    )
    run_dir = f"/bench/campaigns/bench/rep-0/attempt-1/runs/inst-{i:05d}/{arm.name}"
    at = T0 + i * 1000
    events: list[Any] = [
        ev.CellSubmitted(spec=spec),
        ev.CellMaterialized(
            attempt=1,
            run_dir=run_dir,
            workspace=f"{run_dir}/ws",
            head="0" * 40,
            clean=True,
            materializer="git",
        ),
        ev.RunStarted(
            attempt=1,
            argv=["opencode", "run"],
            cwd=f"{run_dir}/ws",
            pid=1000 + i,
            pgid=1000 + i,
            started_at_ms=at,
            deadline_ms=at + 1_000_000,
            timeout_s=1000.0,
            kill_grace_s=1.0,
        ),
        ev.ProvenanceRecorded(attempt=1, repo="/srv/widgets", commit="c0ffee" * 6 + "abcd"),
        ev.RunCompleted(attempt=1, rc=0, wall_s=95.5),
    ]
    # Two workers with sessions; in one cell of four a third whose cwd has none, as the
    # recovery records it (listed in worker_cwds and unmatched).
    worker_cwds = [f"{run_dir}/w{k}" for k in range(3 if i % 4 == 3 else 2)]
    if supervisor:
        events.append(
            ev.SupervisorOutcome(
                attempt=1,
                sup_run_dir=f"{run_dir}/ws/.agent/supervisor/s1",
                status="completed",
                verdict="delivered",
                delivered=True,
                spent_tokens=90000,
                spent_usd=1.25,
            )
        )
    events.append(
        ev.CellVerified(
            attempt=1,
            scored=True,
            patch_path=f"{run_dir}/p.patch",
            patch_lines=12,
            patch_sha256="ab" * 32,
            verify_rc=0,
            verify_pass=True,
        )
    )
    if i % 2 == 0:
        events.append(
            ev.JudgeVerdictRecorded(
                attempt=1,
                judge="swe-arena-official-judge",
                verdict_json=json.dumps({"resolved": i % 4 == 0, "attempts": 1}),
                resolved=i % 4 == 0,
                score=None,
                source="command",
            )
        )
    captures: list[Any]
    if supervisor:
        captures = [
            _session(i, f"ses_{i}_w{k}", None, worker_cwds[k], "worker", messages, kept)
            for k in range(2)
        ]
        if i % 4 == 3:
            captures.append(cap.WorkerCwdUnmatched(attempt=1, cwd=worker_cwds[2]))
        spend = ev.SpendFigures(
            cost_usd=1.25,
            worker_cwds=worker_cwds,
            worker_sessions=2,
            worker_tok_sqlite=80000,
        )
    else:
        captures = [_session(i, f"ses_{i}_root", None, f"{run_dir}/ws", "solo", messages, kept)]
        if i % 3 == 0:
            captures.append(
                _session(
                    i, f"ses_{i}_sub", f"ses_{i}_root", f"{run_dir}/ws", "solo", messages, kept
                )
            )
        spend = ev.SpendFigures(sessions=len(captures), tokens_in=36000, cost_usd=0.04)
    events.append(ev.CellRecovered(attempt=1, store_available=True, spend=spend))
    return [
        AppendRequest(f"cell/{spec.cell_id}", 0, events),
        AppendRequest(f"capture/{spec.cell_id}/1", 0, captures),
    ]


async def build(home: Path, start: int, stop: int, messages: int, kept: bool = True) -> None:
    """Append cells ``start..stop-1`` to the home's log, ``APPEND_BATCH_CELLS`` per
    transaction (the read model is kept in the same transactions, as the daemon does)."""
    from arenad.home import Home, open_store

    async with open_store(Home(home), create=True) as store:
        for lo in range(start, stop, APPEND_BATCH_CELLS):
            requests = []
            for i in range(lo, min(stop, lo + APPEND_BATCH_CELLS)):
                requests += cell_requests(i, messages, kept)
            await store.append_many(requests)


# --------------------------------------------------------------------------- children


def _vm_hwm_kib(pid: int | str) -> int | None:
    """A process's own peak RSS (its VmHWM), or None when it cannot be read (gone)."""
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def peak_rss_kib() -> int:
    """This process's own peak RSS. Not ``wait4``'s ru_maxrss: Linux folds the parent's
    RSS at spawn time into a child's, which would make every child look as big as us."""
    kib = _vm_hwm_kib("self")
    if kib is not None:
        return kib
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def child_baseline(home: Path) -> dict[str, Any]:
    """Every event, read with stdlib sqlite3 in batches and decoded by the real codec."""
    from events.codec import decode_event

    t, cpu = time.perf_counter(), time.process_time()
    db = sqlite3.connect(home / "arenad.db")
    count = 0
    nbytes = 0
    cursor = db.execute("SELECT tag, schema_version, payload FROM events ORDER BY seq")
    while rows := cursor.fetchmany(5000):
        for tag, version, payload in rows:
            decode_event(payload, tag, version)
            nbytes += len(payload)
        count += len(rows)
    db.close()
    seconds, cpu_s = time.perf_counter() - t, time.process_time() - cpu
    return {
        "seconds": seconds,
        "cpu_seconds": cpu_s,
        "events": count,
        "bytes": nbytes,
        "rss_kib": peak_rss_kib(),
    }


class _Workers:
    """The projection's worker processes, watched from a thread: how many ran and the
    largest one's peak RSS (each one's own VmHWM, read while it runs; ``wait4``'s
    ru_maxrss would count the parent's RSS at its spawn)."""

    def __init__(self) -> None:
        self.peaks: dict[int, int] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()

    def _watch(self) -> None:
        tasks = Path(f"/proc/{os.getpid()}/task")
        while not self._stop.wait(0.01):
            for task in tasks.iterdir():
                try:
                    pids = (task / "children").read_text().split()
                except OSError:
                    continue  # a thread that ended meanwhile
                for pid in map(int, pids):
                    kib = _vm_hwm_kib(pid)
                    if kib is not None:
                        self.peaks[pid] = max(self.peaks.get(pid, 0), kib)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


def child_project(home: Path, out: Path, jobs: int | None) -> dict[str, Any]:
    """What `arenad --home HOME project-ledger OUT [--jobs N]` does. Its CPU time counts
    the worker processes' too."""
    import resource

    from arenad.home import Home
    from arenad.ledger.service import project_ledger

    def children_cpu() -> float:
        usage = resource.getrusage(resource.RUSAGE_CHILDREN)
        return usage.ru_utime + usage.ru_stime

    workers = _Workers()
    t, cpu, child_cpu = time.perf_counter(), time.process_time(), children_cpu()
    stats = asyncio.run(project_ledger(Home(home), out, jobs=jobs))
    seconds = time.perf_counter() - t
    cpu_s = time.process_time() - cpu + children_cpu() - child_cpu
    workers.stop()
    return {
        "seconds": seconds,
        "cpu_seconds": cpu_s,
        "processes": 1 + len(workers.peaks),
        "lines": stats["lines"],
        "stats": stats,
        "rss_kib": peak_rss_kib(),
        "worker_rss_kib": max(workers.peaks.values(), default=0),
    }


def measure(*args: str) -> dict[str, Any]:
    """Run this module as a fresh child process; its JSON result."""
    done = subprocess.run(
        [sys.executable, "-m", "bench.ledger", "--child", *args],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        stdout=subprocess.PIPE,
        check=False,
    )
    if done.returncode != 0:
        raise SystemExit(f"bench child {args[0]} failed with status {done.returncode}")
    result: dict[str, Any] = json.loads(done.stdout)
    return result


# --------------------------------------------------------------------------- main


def _mb(kib: int) -> str:
    return f"{kib / 1024:.1f} MiB"


def _best(*args: str, repeat: int) -> dict[str, Any]:
    """The run of ``repeat`` with the least wall time (a shared machine only ever adds)."""
    return min((measure(*args) for _ in range(repeat)), key=lambda r: r["seconds"])


def run(
    small: int, large: int, messages: int, workdir: Path, repeat: int, kept: bool = True
) -> dict[str, Any]:
    homes = {small: workdir / f"home-{small}", large: workdir / f"home-{large}"}
    t = time.perf_counter()
    asyncio.run(build(homes[small], 0, small, messages, kept))
    shutil.copytree(homes[small], homes[large])
    asyncio.run(build(homes[large], small, large, messages, kept))
    build_s = time.perf_counter() - t
    db_bytes = (homes[large] / "arenad.db").stat().st_size
    print(
        f"log: {large} cells ({messages} messages per transcript,"
        f" {'each session folded at capture' if kept else 'no fold kept'}),"
        f" {_mb(db_bytes // 1024)}"
        f" on disk, built in {build_s:.1f} s through SqliteEventStore"
        f" ({APPEND_BATCH_CELLS} cells per append); best of {repeat} runs each"
    )
    results: dict[str, Any] = {}
    header = (
        f"{'cells':>6} {'procs':>5} {'events':>8} {'base ev/s':>10} {'base RSS':>10}"
        f" {'proj ev/s':>10} {'lines/s':>8} {'proj RSS':>10} {'lines':>7} {'time ratio':>10}"
        f" {'cpu ratio':>9}"
    )
    print(header)
    for size in (small, large):
        home, out = str(homes[size]), str(workdir / f"{size}.jsonl")
        base = _best("baseline", home, repeat=repeat)
        # What project-ledger does by default, then on one process when that used more.
        default = _best("project", home, out, repeat=repeat)
        runs = {"default": default}
        if default["processes"] > 1:
            runs["one process"] = _best("project", home, out, "1", repeat=repeat)
        events = base["events"]
        row: dict[str, Any] = {"events": events, "baseline_events_per_s": events / base["seconds"]}
        row["baseline_rss_kib"] = base["rss_kib"]
        for name, proj in runs.items():
            figures = {
                "processes": proj["processes"],
                "projection_events_per_s": events / proj["seconds"],
                "lines": proj["lines"],
                "lines_per_s": proj["lines"] / proj["seconds"],
                "projection_rss_kib": proj["rss_kib"],
                "worker_rss_kib": proj["worker_rss_kib"],
                "time_ratio": proj["seconds"] / base["seconds"],
                "cpu_ratio": proj["cpu_seconds"] / base["cpu_seconds"],
                "stats": proj["stats"],
            }
            if name == "default":
                row.update(figures)
            else:
                row[name] = figures
            print(
                f"{size:>6} {figures['processes']:>5} {events:>8}"
                f" {row['baseline_events_per_s']:>10.0f} {_mb(base['rss_kib']):>10}"
                f" {figures['projection_events_per_s']:>10.0f} {figures['lines_per_s']:>8.0f}"
                f" {_mb(proj['rss_kib']):>10} {figures['lines']:>7}"
                f" {figures['time_ratio']:>9.2f}x {figures['cpu_ratio']:>8.2f}x"
            )
        results[str(size)] = row
    small_rss = results[str(small)]["projection_rss_kib"]
    large_rss = results[str(large)]["projection_rss_kib"]
    results["rss_ratio"] = large_rss / small_rss
    workers = results[str(large)]["worker_rss_kib"]
    # No worker ran (a small ledger is projected in one process): no figure, not a 0.
    worker_peak = f"the largest worker process {_mb(workers)}" if workers else "no worker process"
    print(
        f"projection peak RSS {large} / {small} cells: {results['rss_ratio']:.2f}x"
        f" ({_mb(large_rss)} / {_mb(small_rss)}; {worker_peak});"
        " time ratio = projection / baseline wall time, cpu ratio = the same for CPU time"
        " (every thread and worker process)"
    )
    return results


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="100 and 1 000 cells, 12 messages")
    parser.add_argument("--small", type=int, default=1000)
    parser.add_argument("--large", type=int, default=10_000)
    parser.add_argument("--messages", type=int, default=30, help="messages per transcript")
    parser.add_argument("--keep", type=Path, help="build in this dir and keep it")
    parser.add_argument(
        "--folded-here",
        action="store_true",
        help="captures without their kept fold (an older log): the projection folds them",
    )
    parser.add_argument(
        "--repeat",
        type=int,
        default=3,
        choices=range(1, 101),
        metavar="N",
        help="runs of each measurement (1 to 100)",
    )
    parser.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        kind, *rest = args.child
        if kind == "baseline":
            result = child_baseline(Path(rest[0]))
        else:
            jobs = int(rest[2]) if len(rest) > 2 else None
            result = child_project(Path(rest[0]), Path(rest[1]), jobs)
        sys.stdout.write(json.dumps(result) + "\n")
        return result
    small, large, messages = args.small, args.large, args.messages
    if args.quick:
        small, large, messages = 100, 1000, 12
    if not 0 < small < large:
        parser.error("need 0 < --small < --large")
    if args.keep is not None:
        args.keep.mkdir(parents=True, exist_ok=True)
        return run(small, large, messages, args.keep, args.repeat, not args.folded_here)
    with tempfile.TemporaryDirectory(prefix="arenad-bench-ledger-") as d:
        return run(small, large, messages, Path(d), args.repeat, not args.folded_here)


if __name__ == "__main__":
    main()
