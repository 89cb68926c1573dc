"""`arenad submit`: a dry run appends nothing; a large campaign is written a batch at a time
in one transaction (all or nothing), with progress on a terminal."""

from __future__ import annotations

import asyncio
import json
import os
import pty
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from arenad.app import submit as submit_module
from arenad.app.log import init_home
from arenad.app.submit import submit_campaign
from arenad.errors import UserError
from arenad.home import Home
from events.control import CampaignSubmitted
from tests.conftest import make_repo
from tests.daemon.support import read_all

REPO_ROOT = Path(__file__).resolve().parents[2]


def campaign_text(name: str, rows: str, extra: str = "", arms: str = "") -> str:
    return (
        f'name = "{name}"\nreps = 2\ninstances_file = "{rows}"\n'
        'verify_template = "pytest -q {test_file}"\n'
        f"{extra}\n"
        '[materializer]\nkind = "git"\nsource = "./repo"\n'
        '[[arms]]\nname = "SOLO"\nkind = "solo"\nmodel = "p/m"\n'
        f"{arms}"
    )


def write_rows(path: Path, n: int, *, statement: str = "fix {i}") -> Path:
    """``n`` rows of instances whose base is the one commit of ``./repo`` beside ``path``
    (submit checks the source holds each base commit)."""
    repo = path.parent / "repo"
    base = (
        make_repo(repo, {"a.txt": "a\n"})
        if not repo.exists()
        else subprocess.run(
            ["git", "-C", str(repo), "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    )
    path.write_text(
        "".join(
            json.dumps(
                {
                    "instance_id": f"org__p-{i}",
                    "base_commit": base,
                    "problem_statement": statement.format(i=i),
                    "test_file": f"tests/test_{i}.py",
                }
            )
            + "\n"
            for i in range(n)
        )
    )
    return path


def event_rows(home: Path) -> int:
    with sqlite3.connect(home / "arenad.db") as db:
        return int(db.execute("SELECT COUNT(*) FROM events").fetchone()[0])


def arenad(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "cli", "--home", str(home), *args],
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
        check=False,
    )


def test_a_dry_run_shows_the_campaign_and_appends_nothing(tmp_path: Path) -> None:
    home = tmp_path / "home"
    write_rows(tmp_path / "rows.jsonl", 4)
    camp = tmp_path / "c.toml"
    camp.write_text(
        campaign_text(
            "dry",
            "rows.jsonl",
            'instance_filter = "-[123]$"\n[budget]\nmax_usd = 5.0',
            '[[arms]]\nname = "CMD"\nkind = "command"\nargv = ["true"]\n',
        )
    )
    assert arenad(home, "init").returncode == 0
    # Something in the log already, so "nothing appended" is a count that stays put.
    other = tmp_path / "other.toml"
    other.write_text(campaign_text("other", "rows.jsonl"))
    assert arenad(home, "submit", str(other)).returncode == 0
    before = event_rows(home)

    result = arenad(home, "submit", "--dry-run", str(camp))
    assert result.returncode == 0, result.stderr
    assert event_rows(home) == before
    out = result.stdout
    assert (
        "dry run: campaign dry expands to 12 cell(s): 3 instance(s) of 4 row(s) (selected by"
        " instance_filter '-[123]$') x 2 arm(s) x 2 rep(s)"
    ) in out
    assert "arm SOLO (solo): 6 cell(s)" in out and "arm CMD (command): 6 cell(s)" in out
    assert "first cells: dry:org__p-1:SOLO:0, dry:org__p-1:SOLO:1, dry:org__p-1:CMD:0" in out
    assert "verify: pytest -q tests/test_1.py" in out
    assert "budget: $5" in out
    assert "12 new, 0 already known; nothing was appended" in out
    # A cap with an arm that cannot report cost is said at submit.
    assert "note: arm(s) CMD cannot report cost" in out

    # A dry run also finds what a submit would refuse, still appending nothing.
    changed = tmp_path / "changed.toml"
    changed.write_text(campaign_text("other", "rows.jsonl").replace("p/m", "p/changed"))
    refused = arenad(home, "submit", "--dry-run", str(changed))
    assert refused.returncode == 2 and "different spec" in refused.stderr
    assert event_rows(home) == before

    # Without a store yet, a dry run still validates and counts.
    fresh = arenad(tmp_path / "no-home", "submit", "--dry-run", str(camp))
    assert fresh.returncode == 0 and "12 new" in fresh.stdout
    assert not (tmp_path / "no-home").exists()


def test_the_selection_is_recorded_in_the_campaign_event(tmp_path: Path) -> None:
    write_rows(tmp_path / "rows.jsonl", 5)
    camp = tmp_path / "c.toml"
    camp.write_text(
        campaign_text(
            "sel",
            "rows.jsonl",
            'instance_ids = ["org__p-0", "org__p-2", "org__p-4"]\n'
            'instance_filter = "[24]$"\nlimit = 1\n[budget]\nmax_usd = 2.5\nabort_running = true',
        )
    )
    home = Home(tmp_path / "home")

    async def go() -> None:
        await init_home(home)
        result = await submit_campaign(home, camp)
        assert result.added == 2

    asyncio.run(go())
    [record] = [r.event for r in read_all(home.root) if isinstance(r.event, CampaignSubmitted)]
    assert record.selection is not None
    assert record.selection.instance_ids == ["org__p-0", "org__p-2", "org__p-4"]
    assert record.selection.instance_filter == "[24]$" and record.selection.limit == 1
    assert (record.selection.rows, record.selection.selected) == (5, 1)
    assert record.cell_ids == ["sel:org__p-2:SOLO:0", "sel:org__p-2:SOLO:1"]
    assert (record.budget_usd, record.abort_running) == (2.5, True)
    assert record.arm_kinds == {"SOLO": "solo"}


def test_a_large_campaign_is_written_in_batches_in_one_transaction(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(submit_module, "BATCH_CELLS", 7)
    home = Home(tmp_path / "home")
    camp = tmp_path / "c.toml"
    camp.write_text(campaign_text("big", "rows.jsonl"))
    seen: list[tuple[int, int]] = []

    async def go() -> None:
        await init_home(home)
        # A first, smaller submission whose last instance's spec the big one changes.
        write_rows(tmp_path / "rows.jsonl", 30, statement="other {i}")
        small = tmp_path / "small.toml"
        small.write_text(campaign_text("big", "small.jsonl"))
        (tmp_path / "small.jsonl").write_text(
            (tmp_path / "rows.jsonl").read_text().splitlines()[-1] + "\n"
        )
        await submit_campaign(home, small)
        before = event_rows(home.root)
        write_rows(tmp_path / "rows.jsonl", 30)
        # The conflict is in the last batch: every batch before it was already inserted in
        # the transaction, and all of them roll back.
        with pytest.raises(UserError, match="big:org__p-29:SOLO:0 was already submitted"):
            await submit_campaign(home, camp, progress=lambda d, t: seen.append((d, t)))
        assert event_rows(home.root) == before
        assert seen[-1] == (56, 60)  # 8 batches of 7 checked before the 9th failed

        seen.clear()
        (tmp_path / "small.jsonl").unlink()
        write_rows(tmp_path / "rows.jsonl", 30)
        other = tmp_path / "other.toml"
        other.write_text(campaign_text("big2", "rows.jsonl"))
        result = await submit_campaign(home, other, progress=lambda d, t: seen.append((d, t)))
        assert result.added == 60
        assert seen == [(min(n, 60), 60) for n in range(7, 67, 7)]
        assert event_rows(home.root) == before + 61

    asyncio.run(go())
    recorded = [
        r for r in read_all(home.root) if r.stream.startswith(("cell/big2", "campaign/big2"))
    ]
    assert [r.seq for r in recorded] == list(range(recorded[0].seq, recorded[0].seq + 61))
    assert recorded[-1].tag == "campaign.submitted"  # the campaign's record comes last


def test_submit_shows_progress_on_a_terminal(tmp_path: Path) -> None:
    home = tmp_path / "home"
    assert arenad(home, "init").returncode == 0
    write_rows(tmp_path / "rows.jsonl", 3)
    camp = tmp_path / "c.toml"
    camp.write_text(campaign_text("tty", "rows.jsonl"))
    leader, follower = pty.openpty()
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "cli", "--home", str(home), "submit", str(camp)],
            stdout=subprocess.PIPE,
            stderr=follower,
            cwd=REPO_ROOT,
            check=False,
            timeout=120,
        )
        os.close(follower)
        follower = -1
        shown = b""
        while True:
            try:
                chunk = os.read(leader, 4096)
            except OSError:  # EIO: the terminal's other side is closed
                break
            if not chunk:
                break
            shown += chunk
    finally:
        if follower >= 0:
            os.close(follower)
        os.close(leader)
    assert proc.returncode == 0
    assert b"6/6 cells written" in shown
    assert proc.stdout.decode() == "campaign tty: 6 cell(s) submitted, 0 already known\n"
    # Not a terminal: no progress line.
    again = arenad(home, "submit", str(camp))
    assert again.stderr == ""


def test_a_changed_budget_is_refused_at_submit_and_set_budget_changes_it(tmp_path: Path) -> None:
    from arenad.app.campaigns import set_budget

    write_rows(tmp_path / "rows.jsonl", 2)
    home = Home(tmp_path / "home")
    first = tmp_path / "first.toml"
    first.write_text(campaign_text("b", "rows.jsonl", "[budget]\nmax_usd = 5.0"))
    raised = tmp_path / "raised.toml"
    raised.write_text(campaign_text("b", "rows.jsonl", "[budget]\nmax_usd = 7.0"))
    none = tmp_path / "none.toml"
    none.write_text(campaign_text("b", "rows.jsonl"))

    async def go() -> None:
        await init_home(home)
        await submit_campaign(home, first)
        before = event_rows(home.root)
        with pytest.raises(UserError, match=r"capped at \$5; change a cap with `arenad set-budget"):
            await submit_campaign(home, raised)
        again = await submit_campaign(home, none)  # no opinion on the cap: it stays
        assert (again.added, again.already) == (0, 4)
        assert event_rows(home.root) == before
        budget = await set_budget(home, "b", 7.0)
        assert budget.cap_usd == 7.0
        assert (await submit_campaign(home, raised)).already == 4
        for bad in (0.0, -1.0, float("nan"), float("inf")):
            with pytest.raises(UserError, match="is not a finite number of USD > 0"):
                await set_budget(home, "b", bad)
        with pytest.raises(UserError, match="no campaign 'nope'"):
            await set_budget(home, "nope", 1.0)

    asyncio.run(go())


def test_daemon_max_usd_must_be_a_finite_positive_number(tmp_path: Path) -> None:
    for bad in ("-1", "nan", "inf", "0"):
        result = arenad(tmp_path / "home", "daemon", "--max-usd", bad)
        assert result.returncode == 2, bad
        assert result.stderr.strip().splitlines() == [
            f"arenad: --max-usd {float(bad)} must be a finite number of USD > 0"
        ]
