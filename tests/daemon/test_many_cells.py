"""Many cells at once through the real daemon (issue 20): 300 cells all running together,
each spawned through the launcher, each recovered, in one daemon run.

Every agent blocks on a lock the test holds (no CPU while it waits), so all 300 are
running at the same moment: their spawns, RunStarted appends and first ingested lines
overlap, which is what stalled the daemon before (a full launcher socket woke one of its
waiting senders only)."""

from __future__ import annotations

import fcntl
import json
from pathlib import Path

from events.ingest import LineIngested
from tests.conftest import make_repo
from tests.daemon.support import command_campaign, read_all, start_daemon, submitted, wait_for

CELLS = 300


def test_three_hundred_cells_run_at_once_and_all_recover(tmp_path: Path) -> None:
    home = tmp_path / "home"
    repo = tmp_path / "repo"
    base = make_repo(repo, {"a.txt": "a\n"})
    gate = tmp_path / "gate"
    gate.write_text("")
    camp = command_campaign(
        tmp_path / "c.toml",
        name="many",
        repo=repo,
        base=base,
        argv=["flock", "--shared", str(gate), "echo", '{{"held": true}}'],
        instances=tuple(f"i{n:03d}" for n in range(CELLS)),
        timeout_s=600,
    )
    text = camp.read_text().replace("max_parallel = 16", f"max_parallel = {CELLS}")
    camp.write_text(text)
    submitted(home, camp)
    with gate.open("r") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        daemon = start_daemon(
            home, "--max-parallel", str(CELLS), "--until-idle", stderr=tmp_path / "daemon.err"
        )
        try:

            def started() -> int:
                return sum(r.tag == "run.started" for r in read_all(home))

            wait_for(lambda: started() == CELLS, f"{CELLS} runs started", timeout_s=180)
        finally:
            fcntl.flock(held, fcntl.LOCK_UN)
    try:
        assert daemon.wait(timeout=300) == 0
    finally:
        if daemon.poll() is None:
            daemon.kill()
            daemon.wait()
    records = read_all(home)
    assert sum(r.tag == "daemon.started" for r in records) == 1
    assert sum(r.tag == "cell.recovered" for r in records) == CELLS
    lines = [r.event for r in records if isinstance(r.event, LineIngested)]
    assert len(lines) == CELLS and all(json.loads(e.raw) == {"held": True} for e in lines)
    err = (tmp_path / "daemon.err").read_text()
    assert " WARNING " not in err and " ERROR " not in err, err
