"""`arenad export-artifacts`: the run-dir documents again from the log, byte for byte what
the daemon wrote, into run dirs a user deleted; a bad cell id is one line, exit 2."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from tests.arms.support import daemon_until_idle, supervisor_campaign
from tests.conftest import make_repo
from tests.daemon.support import cli, env_with, read_all, submitted

CELL = "exp:i1:SUP:0"


def test_export_writes_the_daemon_s_documents_into_deleted_run_dirs(tmp_path: Path) -> None:
    home = tmp_path / "home"
    repo = tmp_path / "repo"
    base = make_repo(repo, {"a.txt": "a\n"})
    loops = tmp_path / "loops"
    make_repo(loops, {"README": "loops\n"})
    camp = supervisor_campaign(tmp_path / "c.toml", name="exp", repo=repo, base=base, loops=loops)
    verdict = json.dumps({"resolved": True, "score": 1, "note": "ünïcode"})
    with camp.open("a") as f:
        f.write(f"[judge]\ncommand = {json.dumps(f'printf %s {json.dumps(verdict)}')}\n")
    submitted(home, camp)
    daemon_until_idle(home, env_with(FAKE_SUP_MODE="ok"), tmp_path / "daemon.err")
    (run_dir,) = {p.parent for p in home.rglob("result.json")}
    originals = {n: (run_dir / n).read_bytes() for n in ("result.json", "judge.json")}
    assert json.loads(originals["judge.json"]) == json.loads(verdict)
    shutil.rmtree(home / "campaigns")  # every run dir
    before = len(read_all(home))

    out = cli(home, "export-artifacts")
    assert out.returncode == 0, out.stderr
    assert sorted(out.stdout.split()) == sorted(str(run_dir / n) for n in originals)
    assert {n: (run_dir / n).read_bytes() for n in originals} == originals
    # Named cells, twice: the same bytes again; nothing is appended.
    assert cli(home, "export-artifacts", CELL, CELL).returncode == 0
    assert {n: (run_dir / n).read_bytes() for n in originals} == originals
    assert len(read_all(home)) == before

    bad = cli(home, "export-artifacts", CELL, "nope:i1:SUP:0")
    assert bad.returncode == 2
    assert bad.stderr == "arenad: no such cell: nope:i1:SUP:0\n"
    assert len(read_all(home)) == before
