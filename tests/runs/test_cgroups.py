"""arenad.runs.cgroups: the v2 layout against a fake cgroupfs tree (this machine has v1),
and v1 for real: limits written, a process joined before exec, the kernel's counters
read, the group killed, removed and reaped."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from arenad.runs import cgroups
from arenad.runs.cgroups import Counters, Limits


def _fake_v2(tmp_path: Path) -> Path:
    root = tmp_path / "cgroup"
    (root / "daemon.slice").mkdir(parents=True)
    (root / "cgroup.controllers").write_text("cpuset cpu io memory pids\n")
    (root / "daemon.slice" / "cgroup.controllers").write_text("cpu memory pids\n")
    return root


def test_v2_is_found_under_the_daemons_own_group(tmp_path: Path) -> None:
    root = _fake_v2(tmp_path)
    own = tmp_path / "self-cgroup"
    own.write_text("0::/daemon.slice\n")
    hierarchy = cgroups.probe(str(root), str(own))
    assert hierarchy == cgroups.Hierarchy(version=2, bases={"": str(root / "daemon.slice")})


def test_v2_writes_the_limits_oom_group_and_reads_the_counters(tmp_path: Path) -> None:
    root = _fake_v2(tmp_path)
    hierarchy = cgroups.Hierarchy(version=2, bases={"": str(root / "daemon.slice")})
    limits = Limits(memory_bytes=256 << 20, pids=64, cpus=1.5)
    group = cgroups.create(hierarchy, "arenad-x", "c.1.run", limits)
    d = root / "daemon.slice" / "arenad-x" / "c.1.run"
    assert group.dirs == (str(d),)
    assert (d / "memory.max").read_text() == str(256 << 20)
    assert (d / "memory.swap.max").read_text() == "0"
    assert (d / "memory.oom.group").read_text() == "1"
    assert (d / "pids.max").read_text() == "64"
    assert (d / "cpu.max").read_text() == "150000 100000"
    # The controllers are enabled on the way down.
    assert (root / "daemon.slice" / "cgroup.subtree_control").read_text() == "+memory +pids +cpu"
    # The kernel's counters, as v2 writes them.
    (d / "memory.events").write_text("low 0\nhigh 0\nmax 12\noom 1\noom_kill 1\n")
    (d / "pids.events").write_text("max 0\n")
    counters = cgroups.read_counters(group)
    assert counters == Counters(oom_kills=1, pids_max_hits=0)
    assert cgroups.limit_hit(counters) == "memory"
    assert group.procs_files == [str(d / "cgroup.procs")]
    # An empty fake group is removed by the reaper.
    (d / "cgroup.procs").write_text("")
    for f in d.iterdir():
        f.unlink()
    assert cgroups.reap(hierarchy, "arenad-x") == ["c.1.run"]
    assert not d.exists()


def test_the_counters_name_the_limit() -> None:
    assert cgroups.limit_hit(Counters(oom_kills=0, pids_max_hits=3)) == "pids"
    assert cgroups.limit_hit(Counters(oom_kills=2, pids_max_hits=3)) == "memory"
    assert cgroups.limit_hit(Counters()) is None


def test_group_names_are_safe_and_distinct() -> None:
    a = cgroups.group_name("cell/c:i/1:A:0", 1, "run")
    b = cgroups.group_name("cell/c:i_1:A:0", 1, "run")
    assert "/" not in a and ":" not in a and a != b
    assert cgroups.parent_name("/a") != cgroups.parent_name("/b")


V1 = cgroups.probe()
real_v1 = pytest.mark.skipif(
    V1 is None or V1.version != 1 or os.geteuid() != 0,
    reason="needs root on a cgroup v1 machine with memory, pids and cpu controllers",
)


# Forks until the pids limit refuses one; the children stay behind in the group.
FORKS = """
import os, time
for _ in range(40):
    try:
        if os.fork() == 0:
            os.closerange(0, 3)
            time.sleep(60)
            os._exit(0)
    except BlockingIOError:
        print("EAGAIN")
        break
"""


@real_v1
def test_v1_for_real_joins_before_exec_counts_and_is_removed(tmp_path: Path) -> None:
    assert V1 is not None
    parent = cgroups.parent_name(tmp_path)
    limits = Limits(memory_bytes=64 << 20, pids=16, cpus=0.5)
    group = cgroups.create(V1, parent, "t.1.run", limits)
    try:
        memory, pids, cpu = (Path(d) for d in group.dirs)
        assert (memory / "memory.limit_in_bytes").read_text().strip() == str(64 << 20)
        assert (pids / "pids.max").read_text().strip() == "16"
        assert (cpu / "cpu.cfs_quota_us").read_text().strip() == "50000"
        assert (cpu / "cpu.cfs_period_us").read_text().strip() == "100000"
        seen = subprocess.run(
            cgroups.join_argv(
                group,
                [
                    sys.executable,
                    "-c",
                    "print(open('/proc/self/cgroup').read());"
                    "print(open('/proc/self/oom_score_adj').read())",
                ],
            ),
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        assert "memory:/" in seen and f"/{parent}/t.1.run" in seen
        assert seen.split()[-1] == str(cgroups.AGENT_OOM_SCORE_ADJ)
        hog = subprocess.run(
            cgroups.join_argv(group, [sys.executable, "-c", "b = b'x' * (200 << 20)"]),
            capture_output=True,
            check=False,
        )
        assert hog.returncode == -9
        forks = subprocess.run(
            cgroups.join_argv(group, [sys.executable, "-c", FORKS]),
            capture_output=True,
            text=True,
            check=True,
        )
        assert forks.stdout == "EAGAIN\n"
        counters = cgroups.read_counters(group)
        assert counters.oom_kills == 1 and (counters.pids_max_hits or 0) > 0
        # What the fork loop left running is killed with the group.
        assert cgroups.members(group)
    finally:
        assert cgroups.remove(group)
    assert not any(os.path.exists(d) for d in group.dirs)


@real_v1
def test_a_group_that_cannot_be_joined_runs_nothing(tmp_path: Path) -> None:
    assert V1 is not None
    group = cgroups.Group(version=1, name="gone", dirs=(str(tmp_path / "nope"),))
    ran = subprocess.run(
        cgroups.join_argv(group, ["touch", str(tmp_path / "ran")]), capture_output=True
    )
    assert ran.returncode == cgroups.JOIN_FAILED_EXIT
    assert not (tmp_path / "ran").exists()


@real_v1
def test_the_reaper_leaves_a_group_with_processes(tmp_path: Path) -> None:
    assert V1 is not None
    parent = cgroups.parent_name(tmp_path)
    busy = cgroups.create(V1, parent, "busy", Limits(pids=16))
    idle = cgroups.create(V1, parent, "idle", Limits(pids=16))
    sleeper = subprocess.Popen(cgroups.join_argv(busy, ["sleep", "60"]))
    try:
        while not cgroups.members(busy):
            pass
        assert cgroups.reap(V1, parent) == ["idle"]
        assert all(os.path.isdir(d) for d in busy.dirs)
        assert not any(os.path.isdir(d) for d in idle.dirs)
    finally:
        assert cgroups.remove(busy)
        sleeper.wait()
