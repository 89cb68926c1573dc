"""`arenad reverify` (issue 29): a fixed verify flips the verdicts of stored patches without
re-running the agent (no second `run.started`), the old verdict stays in the log, the new
one wins in the folds, and a cell whose patch is gone is named and skipped (a real daemon,
real git, real processes)."""

from __future__ import annotations

import os
from pathlib import Path

from arenad.cell.machine import fold
from arenad.report.project import cell_outcome
from events import cell as ev
from tests.conftest import make_repo
from tests.daemon.support import cli, command_campaign, read_all, submitted


def _outcomes(home: Path) -> dict[str, str]:
    records = read_all(home)
    streams = sorted({r.stream for r in records if r.stream.startswith("cell/")})
    out = {}
    for stream in streams:
        state = fold([r for r in records if r.stream == stream])
        assert state is not None
        out[state.cell_id] = cell_outcome(state)
    return out


def test_reverify_with_a_fixed_verify_flips_verdicts(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    base = make_repo(repo, {"a.txt": "a\n"})
    camp = command_campaign(
        tmp_path / "c.toml",
        name="rv",
        repo=repo,
        base=base,
        argv=["bash", "-c", "echo fixed > fix.txt"],
        # The verify script's bug: a typo no agent can satisfy.
        verify_cmd="grep -q fixd fix.txt",
        instances=("i1", "i2", "i3"),
    )
    home = submitted(tmp_path / "home", camp)
    done = cli(home, "daemon", "--until-idle")
    assert done.returncode == 0, done.stderr
    assert set(_outcomes(home).values()) == {"unresolved"}
    started_before = sum(isinstance(r.event, ev.RunStarted) for r in read_all(home))
    # i3's stored patch is gone: named and skipped, never a crash.
    gone = next(
        e.patch_path
        for r in read_all(home)
        if isinstance(e := r.event, ev.CellVerified) and r.stream == "cell/rv:i3:CMD:0"
    )
    assert gone is not None
    os.unlink(gone)

    out = cli(
        home,
        "reverify",
        "--campaign",
        "rv",
        "--where",
        "verify-failed",
        "--verify-cmd",
        "grep -q fixed fix.txt",
        "--reason",
        "verify typo fixed",
    )
    assert out.returncode == 0, out.stderr
    assert "rv:i1:CMD:0: unresolved -> resolved" in out.stdout
    assert "rv:i3:CMD:0: skipped: stored patch cannot be read" in out.stdout
    assert "arm CMD: resolved 0/2 -> 2/2 (+2)" in out.stdout
    assert "2 cell(s) re-graded, 1 skipped" in out.stdout

    records = read_all(home)
    assert sum(isinstance(r.event, ev.RunStarted) for r in records) == started_before
    assert not [r for r in records if isinstance(r.event, ev.CellRetried)]
    i1 = [r for r in records if r.stream == "cell/rv:i1:CMD:0"]
    verdicts = [r for r in i1 if isinstance(r.event, ev.CellVerified)]
    # The old verdict is kept; the new one names it and wins.
    assert len(verdicts) == 2
    old, new = verdicts[0], verdicts[1].event
    assert isinstance(new, ev.CellReverified) and old.event.verify_pass is False
    assert new.previous_seq == old.seq and new.previous_pass is False
    assert new.verify_pass is True and new.verify_cmd == "grep -q fixed fix.txt"
    assert new.patch_sha256 == old.event.patch_sha256 and new.patch_applied is True
    # Spend is counted once: no second recovery.
    assert sum(isinstance(r.event, ev.CellRecovered) for r in i1) == 1
    assert _outcomes(home) == {
        "rv:i1:CMD:0": "resolved",
        "rv:i2:CMD:0": "resolved",
        "rv:i3:CMD:0": "unresolved",
    }
    history = cli(home, "history", "rv:i1:CMD:0")
    assert history.returncode == 0, history.stderr
    assert "cell.reverified" in history.stdout

    # Back again with the campaign's own (buggy) verify: resolved -> unresolved.
    back = cli(home, "reverify", "rv:i1:CMD:0")
    assert back.returncode == 0, back.stderr
    assert "rv:i1:CMD:0: resolved -> unresolved" in back.stdout
    assert _outcomes(home)["rv:i1:CMD:0"] == "unresolved"


def test_reverify_refuses_bad_input(tmp_path: Path) -> None:
    home = tmp_path / "home"
    assert cli(home, "init").returncode == 0
    both = cli(home, "reverify", "x:i:A:0", "--campaign", "c")
    assert both.returncode == 2 and "not both" in both.stderr
    where = cli(home, "reverify", "--campaign", "c", "--where", "nope")
    assert where.returncode == 2 and "--where must be one of" in where.stderr
    missing = cli(home, "reverify", "--campaign", "c")
    assert missing.returncode == 2 and "no campaign 'c'" in missing.stderr
