"""Issue 27, findings 4, 5 and 7, with real processes in real bubblewrap and real cgroups:
a memory hog (many children, each smaller than the daemon), a fork loop and a disk filler
each end only their own cell, whose outcome names the limit it met, while the daemon and
two innocent cells finish with their correct verdicts.

The numbers are the finding's, scaled to be cheap: 40 children of 31 MiB under a 256 MiB
limit (the finding: 150 under none), a fork loop under 64 pids, 64 MiB written under a
16 MiB disk limit."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from arenad.runs import cgroups
from arenad.sandbox.bwrap import probe_host
from events import cell as ev
from events.base import Recorded
from tests.conftest import make_repo
from tests.daemon.support import cli, command_campaign, read_all, start_daemon, submitted

pytestmark = [
    pytest.mark.skipif(probe_host() is None, reason="bubblewrap is not installed"),
    pytest.mark.skipif(
        cgroups.probe() is None or os.geteuid() != 0,
        reason="needs root and a cgroup hierarchy with memory, pids and cpu controllers",
    ),
]

HOG = r"""
for i in $(seq 40); do
  python3 -c "import time; b = b'x' * (31 << 20); time.sleep(120)" &
done
wait
"""
FORKER = r"""
while true; do sleep 120 & done
"""
FILLER = r"""
head -c $((64 << 20)) /dev/zero > big.bin
sleep 120
"""
INNOCENT = r"""
echo fixed > fix.txt
"""


# A verify whose test suite (the agent's code) takes more memory than the cell may.
VERIFY_HOG = "python3 -c \"b = b'x' * (300 << 20)\""


def _campaign(
    tmp_path: Path,
    name: str,
    script: str,
    sandbox: str,
    instances: tuple[str, ...] = ("i1",),
    verify_cmd: str = "test -f fix.txt",
) -> Path:
    repo = tmp_path / f"repo-{name}"
    base = make_repo(repo, {"a.txt": "a\n"})
    return command_campaign(
        tmp_path / f"{name}.toml",
        name=name,
        repo=repo,
        base=base,
        argv=["bash", "-c", script],
        verify_cmd=verify_cmd,
        timeout_s=100,
        extra=f"[sandbox]\n{sandbox}\n",
        instances=instances,
    )


def _events(records: list[Recorded], cell: str) -> list[object]:
    return [r.event for r in records if r.stream == f"cell/{cell}"]


def test_a_hog_a_fork_loop_and_a_filler_end_only_their_own_cells(tmp_path: Path) -> None:
    home = tmp_path / "home"
    camps = [
        _campaign(tmp_path, "hog", HOG, 'memory = "256MiB"'),
        _campaign(tmp_path, "forker", FORKER, "pids = 64"),
        _campaign(tmp_path, "filler", FILLER, 'disk = "16MiB"'),
        _campaign(tmp_path, "good", INNOCENT, "", instances=("i1", "i2")),
        _campaign(tmp_path, "vhog", INNOCENT, 'memory = "128MiB"', verify_cmd=VERIFY_HOG),
    ]
    submitted(home, *camps)
    daemon = start_daemon(
        home, "--until-idle", "--max-parallel", "6", stderr=tmp_path / "daemon.err"
    )
    assert daemon.wait(timeout=240) == 0, (tmp_path / "daemon.err").read_text()[-3000:]
    records = read_all(home)
    for cell, limit, reason in (
        ("hog:i1:CMD:0", "memory", "out of memory"),
        ("forker:i1:CMD:0", "pids", "pids limit"),
        ("filler:i1:CMD:0", "disk", "disk limit"),
    ):
        events = _events(records, cell)
        started = next(e for e in events if isinstance(e, ev.RunStarted))
        assert started.cgroup is not None and started.unlimited_reason is None
        ended = [e for e in events if isinstance(e, ev.RunAborted)]
        assert [(e.limit, e.reason) for e in ended] == [(limit, reason)], events
        assert ended[0].rc is not None  # the run's real exit, not "lost"
        verified = next(e for e in events if isinstance(e, ev.CellVerified))
        assert verified.verify_pass is not True or verified.scored is False
    for cell in ("good:i1:CMD:0", "good:i2:CMD:0"):
        events = _events(records, cell)
        assert any(isinstance(e, ev.RunCompleted) and e.rc == 0 for e in events), events
        verified = next(e for e in events if isinstance(e, ev.CellVerified))
        assert verified.verify_pass is True and verified.scored is True, verified
    events = _events(records, "vhog:i1:CMD:0")
    verified = next(e for e in events if isinstance(e, ev.CellVerified))
    assert verified.verify_limit == "memory" and verified.verify_pass is False, verified
    # The groups went with their runs.
    hierarchy = cgroups.probe()
    assert hierarchy is not None
    parent = cgroups.parent_name(home)
    left = [
        name
        for base in hierarchy.bases.values()
        if (Path(base) / parent).is_dir()
        for name in os.listdir(Path(base) / parent)
        if (Path(base) / parent / name).is_dir()
    ]
    assert left == []
    # status names the limit.
    shown = cli(home, "status", "--json")
    assert shown.returncode == 0, shown.stderr
    assert "out of memory" in json.dumps(json.loads(shown.stdout))
