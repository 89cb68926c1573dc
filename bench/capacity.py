"""Benchmark: N long-running cells at once on one machine, against a baseline.

    .venv/bin/python -m bench.capacity [--cells 100 250 500] [--duration 60] [--quick]
                                       [--network host model] [--only-arenad]
                                       [--confinement]

Each cell is a command arm whose agent prints one JSON line every ``--interval`` seconds
(0.5) for ``--duration`` seconds, each line carrying its own write time (``t``, ns); the
campaign's ``max_parallel`` and the daemon's ``--max-parallel`` are N, so all N run at once.

arenad
    ``arenad daemon --max-parallel N --until-idle`` in its own process over a home with the
    N cells submitted: git materialize (a copy of one prepared checkout), the run through
    the launcher and the run wrapper, the agent's stdout ingested live into the log, patch,
    verify (``true``), recovery.
baseline
    A plain asyncio process that starts the same N agents (their stdout to files, each in
    its own session) and tails those files through one inotify descriptor, with no log:
    what N such agents cost a process that only starts and follows them.

Both run one after the other in the same invocation; each is sampled from outside every
0.2 s (``/proc/<pid>/stat`` and ``status``). Printed, per N and contender:

- ``all running``: from the process's start to the moment the last agent wrote its first
  line (the agents' own timestamps);
- ``RSS/cell``: the process's mean RSS while all N run, less its RSS with no cell (arenad:
  a daemon on an empty home; baseline: before its first start), over N;
- ``CPU/1k lines``: the process's CPU (user + system) while all N run, per 1 000 lines
  the agents wrote meanwhile;
- ``lag p50/p95``: a line's write (its ``t``) to its event's commit (``recorded_at_ms``;
  baseline: the moment it read the line), over the lines written while all N run;

- ``tree MiB/cell`` and ``tree CPU/1k lines``: the same for the process's whole tree (the
  process and every descendant, sampled every second: the launcher, the run wrappers with
  their forwarders, bwrap, the agents), which the process's own figures leave out; the
  tree's RSS counts shared pages once per process, so it is an upper bound;

then the ratios arenad/baseline. ``--network`` runs arenad once per ``[sandbox] network``
given (default: the campaign's own default, ``none`` for this model-less arm), and prints
each against the first: the per-cell cost of a run's own network namespace and forwarder
(``model`` lets in one endpoint, a port nothing listens on: the agents never dial it).
With ``--confinement`` the two contenders are arenad with
the per-cell limits on (the defaults: a cgroup per run, the wrapper's counter and disk
checks) and off (every limit "unlimited"), and the ratios are limits-on/limits-off.

After each arenad run, outside the timing, the log is
checked: every cell recovered, one daemon start (no restart), and every line of every
agent in the log exactly once.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ctypes
import ctypes.util
import json
import os
import shutil
import signal
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import msgspec

from arenad.app import init_home
from arenad.app.submit import submit_campaign
from arenad.home import Home, open_store
from bench.daemon import make_repo
from events import streams
from events.ingest import LineIngested

REPO = Path(__file__).resolve().parents[1]
ARENAD = Path(sys.executable).with_name("arenad")
SAMPLE_S = 0.2
_TICK = os.sysconf("SC_CLK_TCK")

# The agent: a line every `interval` seconds on an absolute schedule (no drift), its own
# write time inside. No braces: campaign argv would read them as placeholders.
AGENT = (
    "import sys, time\n"
    "n, interval = int(sys.argv[1]), float(sys.argv[2])\n"
    "start = time.time()\n"
    "for i in range(n):\n"
    "    delay = start + i * interval - time.time()\n"
    "    if delay > 0:\n"
    "        time.sleep(delay)\n"
    '    sys.stdout.write(\'%c"t": %d, "i": %d%c\\n\' % (123, time.time_ns(), i, 125))\n'
    "    sys.stdout.flush()\n"
)


def agent_argv(lines: int, interval: float) -> list[str]:
    return [sys.executable, "-I", "-S", "-c", AGENT, str(lines), str(interval)]


class _Stamp(msgspec.Struct):
    t: int


_stamp = msgspec.json.Decoder(_Stamp)


# -- sampling ------------------------------------------------------------------------


@dataclass
class Sample:
    at_ns: int
    cpu_s: float
    rss_kib: int
    # The whole process tree's CPU time and RSS (:func:`tree`; None: not sampled then).
    tree_cpu_s: float | None = None
    tree_rss_kib: int | None = None


_PAGE_KIB = os.sysconf("SC_PAGE_SIZE") // 1024
TREE_EVERY = 5  # samples: the tree is read once a second (a scan of every process)


def tree(root: int) -> tuple[float, int]:
    """CPU seconds and RSS (KiB) of ``root`` and all its descendants (one /proc scan)."""
    stats: dict[int, tuple[int, float, int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                raw = f.read()
        except OSError:
            continue
        fields = raw[raw.rfind(b")") + 2 :].split()
        cpu = (int(fields[11]) + int(fields[12])) / _TICK
        stats[int(name)] = (int(fields[1]), cpu, int(fields[21]) * _PAGE_KIB)
    children: dict[int, list[int]] = defaultdict(list)
    for pid, (ppid, _, _) in stats.items():
        children[ppid].append(pid)
    cpu_s, rss, todo = 0.0, 0, [root]
    while todo:
        pid = todo.pop()
        if pid in stats:
            cpu_s += stats[pid][1]
            rss += stats[pid][2]
        todo += children.get(pid, [])
    return cpu_s, rss


def sample(pid: int) -> Sample | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            raw = f.read()
        with open(f"/proc/{pid}/status", "rb") as f:
            status = f.read()
    except OSError:
        return None
    fields = raw[raw.rfind(b")") + 2 :].split()
    cpu = (int(fields[11]) + int(fields[12])) / _TICK
    rss = 0
    for line in status.splitlines():
        if line.startswith(b"VmRSS:"):
            rss = int(line.split()[1])
    return Sample(time.time_ns(), cpu, rss)


async def sample_until_exit(proc: asyncio.subprocess.Process) -> list[Sample]:
    samples: list[Sample] = []
    while proc.returncode is None:
        s = sample(proc.pid)
        if s is not None:
            if len(samples) % TREE_EVERY == 0:
                s.tree_cpu_s, s.tree_rss_kib = tree(proc.pid)
            samples.append(s)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(proc.wait(), SAMPLE_S)
    return samples


# -- figures -------------------------------------------------------------------------


@dataclass
class Run:
    """What one contender left: its samples, the agents' lines, and when each was seen."""

    name: str
    cells: int
    started_ns: int
    idle_rss_kib: int
    samples: list[Sample]
    # Per cell: the write time (ns) of each line, in order.
    writes: list[list[int]]
    # (write ns, seen ns) per line seen.
    seen: list[tuple[int, int]]
    load: tuple[float, float] = (0.0, 0.0)
    notes: list[str] = field(default_factory=list)


@dataclass
class Figures:
    name: str
    all_running_s: float
    window_s: float
    rss_per_cell_kib: float
    cpu_per_1k_lines_ms: float
    lag_p50_ms: float
    lag_p95_ms: float
    lines_in_window: int
    tree_mib_per_cell: float = float("nan")
    tree_cpu_per_1k_lines_ms: float = float("nan")


def pct(values: Sequence[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def figures(run: Run) -> Figures:
    firsts = [w[0] for w in run.writes if w]
    lasts = [w[-1] for w in run.writes if w]
    if len(firsts) < run.cells:
        raise RuntimeError(f"{run.name}: only {len(firsts)} of {run.cells} agents wrote a line")
    # The steady window: every agent has written its first line and none its last.
    lo, hi = max(firsts), min(lasts)
    if hi <= lo:
        raise RuntimeError(
            f"{run.name}: the first agent ended before the last one started;"
            " give the agents a longer --duration"
        )
    inside = [s for s in run.samples if lo <= s.at_ns <= hi]
    if len(inside) < 2:
        raise RuntimeError(f"{run.name}: the window of all {run.cells} running is too short")
    cpu = inside[-1].cpu_s - inside[0].cpu_s
    lines = sum(1 for w in run.writes for t in w if inside[0].at_ns <= t <= inside[-1].at_ns)
    lags = [(seen - t) / 1e6 for t, seen in run.seen if lo <= t <= hi]
    rss = statistics.fmean(s.rss_kib for s in inside)
    trees = [s for s in inside if s.tree_cpu_s is not None and s.tree_rss_kib is not None]
    tree_rss = statistics.fmean(s.tree_rss_kib or 0 for s in trees) if trees else float("nan")
    tree_cpu = (trees[-1].tree_cpu_s or 0) - (trees[0].tree_cpu_s or 0) if trees else 0.0
    tree_lines = (
        sum(1 for w in run.writes for t in w if trees[0].at_ns <= t <= trees[-1].at_ns)
        if len(trees) > 1
        else 0
    )
    return Figures(
        name=run.name,
        all_running_s=(lo - run.started_ns) / 1e9,
        window_s=(hi - lo) / 1e9,
        rss_per_cell_kib=(rss - run.idle_rss_kib) / run.cells,
        cpu_per_1k_lines_ms=cpu / max(lines, 1) * 1e6,
        lag_p50_ms=pct(lags, 0.50),
        lag_p95_ms=pct(lags, 0.95),
        lines_in_window=lines,
        tree_mib_per_cell=(tree_rss - run.idle_rss_kib) / 1024 / run.cells,
        tree_cpu_per_1k_lines_ms=tree_cpu / tree_lines * 1e6 if tree_lines else float("nan"),
    )


def read_writes(path: Path) -> list[int]:
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return []
    return [_stamp.decode(line).t for line in data.splitlines() if line]


# -- arenad --------------------------------------------------------------------------


# --confinement off: every per-cell limit lifted (arenad.campaign.limits), so no cgroup.
UNLIMITED = [f'{key} = "unlimited"' for key in ("memory", "pids", "cpus", "disk")]


def write_campaign(
    path: Path,
    repo: Path,
    base: str,
    cells: int,
    argv: list[str],
    network: str | None = None,
    limits: bool = True,
) -> None:
    lines = [
        'name = "capacity"',
        'split = "dev"',
        f"max_parallel = {cells}",
        "[materializer]",
        'kind = "git"',
        f"source = {json.dumps(str(repo))}",
        # The agent is this interpreter: its virtualenv is shown read-only in the sandbox
        # (with its base interpreter), as a campaign shares an agent CLI installed elsewhere.
        "[sandbox]",
        f"read_only = {json.dumps([sys.prefix])}",
        *([] if limits else UNLIMITED),
    ]
    if network is not None:
        lines.append(f'network = "{network}"')
    for i in range(cells):
        lines += [
            "[[instances]]",
            f'instance_id = "i{i:05d}"',
            f'base_commit = "{base}"',
            'problem_statement = "nothing"',
            'verify_cmd = "true"',
        ]
    lines += [
        "[[arms]]",
        'name = "TICK"',
        'kind = "command"',
        f"argv = {json.dumps(argv)}",
        "uses_model = false",
        "timeout_s = 3600",
    ]
    if network == "model":
        # One endpoint let in (a port nothing listens on: the agents never dial it), so
        # each run has its forwarder's listeners and thread.
        lines.append('env = { MODEL_URL = "http://127.0.0.1:9/v1" }')
    path.write_text("\n".join(lines) + "\n")


async def idle_daemon_rss(root: Path) -> int:
    """A daemon's RSS with no cell: started on an empty home, sampled once it is up."""
    home = Home(root / "idle-home")
    await init_home(home)
    proc = await asyncio.create_subprocess_exec(
        str(ARENAD), "--home", str(home.root), "daemon", stdin=subprocess.DEVNULL
    )
    try:
        async with open_store(home) as store:
            deadline = time.monotonic() + 60
            while not [r async for r in store.read_all(0, tags=["daemon.started"])]:
                if time.monotonic() > deadline:
                    raise RuntimeError("the idle daemon did not start")
                await asyncio.sleep(0.1)
        await asyncio.sleep(1.0)
        found = sample(proc.pid)
        return found.rss_kib if found is not None else 0
    finally:
        proc.send_signal(signal.SIGTERM)
        await proc.wait()


MAX_QUEUED_EVENTS = Path("/proc/sys/fs/inotify/max_queued_events")


@contextlib.contextmanager
def inotify_queue(size: int | None) -> Iterator[None]:
    """``fs.inotify.max_queued_events`` lowered to ``size`` while inside (root only): the
    daemon's inotify instance, made at its start, then has a queue the kernel overflows."""
    if size is None:
        yield
        return
    before = MAX_QUEUED_EVENTS.read_text()
    MAX_QUEUED_EVENTS.write_text(f"{size}\n")
    try:
        yield
    finally:
        MAX_QUEUED_EVENTS.write_text(before)


async def arenad_run(
    root: Path,
    cells: int,
    lines: int,
    interval: float,
    idle_rss: int,
    max_queued_events: int | None = None,
    network: str | None = None,
    limits: bool = True,
    name: str | None = None,
) -> Run:
    repo = root / "repo"
    base = make_repo(repo)
    home = Home(root / "home")
    await init_home(home)
    campaign = root / "capacity.toml"
    write_campaign(campaign, repo, base, cells, agent_argv(lines, interval), network, limits)
    await submit_campaign(home, campaign)
    load0 = os.getloadavg()[0]
    with open(root / "daemon.log", "wb") as log, inotify_queue(max_queued_events):
        started = time.time_ns()
        proc = await asyncio.create_subprocess_exec(
            str(ARENAD),
            "--home",
            str(home.root),
            "daemon",
            "--max-parallel",
            str(cells),
            "--until-idle",
            stdin=subprocess.DEVNULL,
            stderr=log,
        )
        samples = await sample_until_exit(proc)
    load1 = os.getloadavg()[0]
    notes: list[str] = []
    if proc.returncode != 0:
        notes.append(f"daemon exited {proc.returncode}")
    warnings = (root / "daemon.log").read_text(errors="replace").splitlines()
    notes += [f"daemon log: {w}" for w in warnings if " WARNING " in w or " ERROR " in w][:10]
    writes: list[list[int]] = []
    seen: list[tuple[int, int]] = []
    async with open_store(home) as store:
        ingested: dict[str, list[LineIngested]] = defaultdict(list)
        recovered = starts = overflows = 0
        async for r in store.read_all(0):
            if isinstance(r.event, LineIngested):
                ingested[r.stream].append(r.event)
                seen.append((_stamp.decode(r.event.raw).t, r.recorded_at_ms * 1_000_000))
            elif r.tag == "cell.recovered":
                recovered += 1
            elif r.tag == "daemon.started":
                starts += 1
            elif r.tag == "ingest.events-lost":
                overflows += 1
        report = await store.verify_chain()
    for i in range(cells):
        cell = f"capacity:i{i:05d}:TICK:0"
        run_dir = home.run_dir("capacity", 0, 1, f"i{i:05d}", "TICK")
        cell_writes = read_writes(run_dir / "cmd.out")
        writes.append(cell_writes)
        got = [_stamp.decode(e.raw).t for e in ingested[streams.ingest_stream(cell, 1)]]
        if got != cell_writes:
            notes.append(f"{cell}: {len(got)} lines in the log, {len(cell_writes)} written")
    notes.append(f"recovered {recovered}/{cells}, daemon starts {starts}")
    if max_queued_events is not None:
        notes.append(f"inotify queue {max_queued_events} events: {overflows} overflow(s) recorded")
    if recovered != cells or starts != 1:
        notes.append("FAILED: not every cell recovered in one daemon run")
    if not report.ok:
        notes.append(f"FAILED: verify-log: {report.problem}")
    if name is None:
        name = "arenad" if network is None else f"arenad:{network}"
    return Run(name, cells, started, idle_rss, samples, writes, seen, (load0, load1), notes)


# -- baseline ------------------------------------------------------------------------

_IN_MODIFY = 0x2
_IN_NONBLOCK = os.O_NONBLOCK
_EVENT = struct.Struct("iIII")


async def baseline_child(root: Path, cells: int, lines: int, interval: float) -> None:
    """The baseline's process: start the agents, tail their files, no log."""
    from arenad.daemon.daemon import pidfd_child_watcher

    libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    ifd = libc.inotify_init1(_IN_NONBLOCK | os.O_CLOEXEC)
    if ifd < 0:
        raise OSError(ctypes.get_errno(), "inotify_init1")
    print(json.dumps({"idle_rss_kib": sample(os.getpid()).rss_kib}), flush=True)  # type: ignore[union-attr]
    loop = asyncio.get_running_loop()
    fds: dict[int, int] = {}
    rest: dict[int, bytes] = {}
    seen: list[tuple[int, int]] = []
    argv = agent_argv(lines, interval)

    def drain(fd: int) -> None:
        data = rest[fd]
        while chunk := os.read(fd, 1 << 16):
            data += chunk
        now = time.time_ns()
        end = data.rfind(b"\n") + 1
        for line in data[: end - 1].split(b"\n") if end else ():
            seen.append((_stamp.decode(line).t, now))
        rest[fd] = data[end:]

    def on_inotify() -> None:
        try:
            buf = os.read(ifd, 1 << 16)
        except BlockingIOError:
            return
        wds = set()
        for off in range(0, len(buf), _EVENT.size):
            wd, _, _, length = _EVENT.unpack_from(buf, off)
            wds.add(wd)
            if length:
                raise RuntimeError("unexpected named inotify event")
        for wd in wds:
            drain(fds[wd])

    loop.add_reader(ifd, on_inotify)

    async def one(i: int) -> None:
        out = root / f"c{i:05d}.out"
        with open(out, "wb") as f:
            fd = os.open(out, os.O_RDONLY | os.O_CLOEXEC)
            wd = libc.inotify_add_watch(ifd, os.fsencode(out), _IN_MODIFY)
            if wd < 0:
                raise OSError(ctypes.get_errno(), "inotify_add_watch")
            fds[wd], rest[fd] = fd, b""
            proc = await asyncio.create_subprocess_exec(
                *argv, stdin=subprocess.DEVNULL, stdout=f, start_new_session=True
            )
        await proc.wait()

    with pidfd_child_watcher():
        await asyncio.gather(*(one(i) for i in range(cells)))
    loop.remove_reader(ifd)
    for fd in fds.values():
        drain(fd)
    (root / "seen.json").write_text(json.dumps(seen))


async def baseline_run(root: Path, cells: int, lines: int, interval: float) -> Run:
    root.mkdir(parents=True)
    load0 = os.getloadavg()[0]
    started = time.time_ns()
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "bench.capacity",
        "--baseline-child",
        str(root),
        "--cells",
        str(cells),
        "--lines",
        str(lines),
        "--interval",
        str(interval),
        cwd=REPO,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
    )
    assert proc.stdout is not None
    first = await proc.stdout.readline()
    idle = int(json.loads(first)["idle_rss_kib"])
    samples = await sample_until_exit(proc)
    load1 = os.getloadavg()[0]
    notes = [] if proc.returncode == 0 else [f"baseline exited {proc.returncode}"]
    writes = [read_writes(root / f"c{i:05d}.out") for i in range(cells)]
    seen = [(int(t), int(s)) for t, s in json.loads((root / "seen.json").read_text())]
    return Run("baseline", cells, started, idle, samples, writes, seen, (load0, load1), notes)


# -- main ----------------------------------------------------------------------------


def print_figures(runs: list[Run]) -> None:
    figs = [figures(r) for r in runs]
    print(
        f"  {'':10s} {'all running s':>13s} {'window s':>9s} {'RSS/cell KiB':>13s}"
        f" {'CPU/1k lines ms':>16s} {'lag p50 ms':>11s} {'lag p95 ms':>11s} {'load':>10s}"
        f" {'tree MiB/cell':>14s} {'tree CPU/1k lines ms':>21s}"
    )
    for run, f in zip(runs, figs, strict=True):
        print(
            f"  {f.name:10s} {f.all_running_s:13.1f} {f.window_s:9.1f} {f.rss_per_cell_kib:13.0f}"
            f" {f.cpu_per_1k_lines_ms:16.1f} {f.lag_p50_ms:11.1f} {f.lag_p95_ms:11.1f}"
            f" {run.load[0]:4.1f}-{run.load[1]:<4.1f}"
            f" {f.tree_mib_per_cell:14.2f} {f.tree_cpu_per_1k_lines_ms:21.1f}"
        )
    ours = [f for f in figs if f.name.startswith("arenad")]
    base = [f for f in figs if f.name == "baseline"]
    if base:
        print_ratios(ours[0], base[0])
    for other in ours[1:]:
        print_ratios(other, ours[0])
    for run in runs:
        for note in run.notes:
            print(f"  {run.name}: {note}")


def print_ratios(a: Figures, b: Figures) -> None:
    def ratio(x: float, y: float) -> str:
        return f"{x / y:.2f}" if y > 0 else "inf"

    names = "arenad/baseline" if b.name == "baseline" else f"{a.name}/{b.name}"
    print(
        f"  ratio {names}: all running {ratio(a.all_running_s, b.all_running_s)},"
        f" RSS/cell {ratio(a.rss_per_cell_kib, b.rss_per_cell_kib)},"
        f" CPU/1k lines {ratio(a.cpu_per_1k_lines_ms, b.cpu_per_1k_lines_ms)},"
        f" lag p50 {ratio(a.lag_p50_ms, b.lag_p50_ms)},"
        f" lag p95 {ratio(a.lag_p95_ms, b.lag_p95_ms)},"
        f" tree MiB/cell {ratio(a.tree_mib_per_cell, b.tree_mib_per_cell)},"
        f" tree CPU/1k lines {ratio(a.tree_cpu_per_1k_lines_ms, b.tree_cpu_per_1k_lines_ms)}"
    )


async def bench(
    cells_list: list[int],
    duration: float,
    interval: float,
    only_arenad: bool = False,
    max_queued_events: int | None = None,
    networks: Sequence[str | None] = (None,),
    confinement: bool = False,
) -> None:
    lines = max(2, round(duration / interval))
    root = Path(tempfile.mkdtemp(prefix="arenad-capacity-"))
    try:
        idle = await idle_daemon_rss(root)
        print(
            f"agents: a line every {interval} s for {duration} s ({lines} lines each);"
            f" idle daemon RSS {idle} KiB; {os.cpu_count()} CPUs"
        )
        for cells in cells_list:
            print(f"N = {cells}")
            runs = []
            if confinement:
                # The limits' cost per cell: the same daemon and cells, limits on vs off.
                for limits, name in ((True, "limits-on"), (False, "limits-off")):
                    where = root / f"{name}-{cells}"
                    runs.append(
                        await arenad_run(
                            where,
                            cells,
                            lines,
                            interval,
                            idle,
                            max_queued_events,
                            None,
                            limits,
                            name,
                        )
                    )
                    shutil.rmtree(where, ignore_errors=True)
                print_figures(runs)
                continue
            if not only_arenad:
                runs.append(await baseline_run(root / f"baseline-{cells}", cells, lines, interval))
            ours = []
            for network in networks:
                where = root / f"arenad-{cells}-{network or 'default'}"
                ours.append(
                    await arenad_run(
                        where, cells, lines, interval, idle, max_queued_events, network
                    )
                )
                shutil.rmtree(where, ignore_errors=True)
            print_figures([*ours, *runs])
            shutil.rmtree(root / f"baseline-{cells}", ignore_errors=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cells", type=int, nargs="+", default=[100, 250, 500])
    parser.add_argument("--duration", type=float, default=60.0)
    parser.add_argument("--interval", type=float, default=0.5)
    parser.add_argument("--quick", action="store_true", help="5 cells for 4 s (a smoke run)")
    parser.add_argument(
        "--only-arenad", action="store_true", help="skip the baseline (A/B runs of arenad)"
    )
    parser.add_argument(
        "--max-queued-events",
        type=int,
        help="lower fs.inotify.max_queued_events for the daemon (root): the kernel overflows",
    )
    parser.add_argument(
        "--network",
        nargs="+",
        choices=["host", "none", "model"],
        help="run arenad once per [sandbox] network; each is compared with the first",
    )
    parser.add_argument(
        "--confinement",
        action="store_true",
        help="arenad with the per-cell limits on vs off (cgroups: their cost per cell)",
    )
    parser.add_argument("--baseline-child", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--lines", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.baseline_child is not None:
        asyncio.run(baseline_child(args.baseline_child, args.cells[0], args.lines, args.interval))
        return
    if args.quick:
        args.cells, args.duration = [5], 4.0
    asyncio.run(
        bench(
            args.cells,
            args.duration,
            args.interval,
            args.only_arenad,
            args.max_queued_events,
            args.network or (None,),
            args.confinement,
        )
    )


if __name__ == "__main__":
    main()
