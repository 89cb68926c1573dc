"""A local SWE-bench end to end: submit, the daemon, the swebench judge in the instance's
real image, the ledger's reward (a real docker engine; skipped, saying why, without one)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from events import cell as ev
from tests.daemon.support import cli, read_all, start_daemon, wait_for
from tests.swebench_support import LocalSwebench, local_swebench  # noqa: F401

IID = "arenad__textkit-3"
# The "agents" (command arms, no model): the fix, a wrong fix, and one that leaves the bug
# and rewrites the tests to pass (the median test to expect it, a conftest that patches it).
WRONG = r"sed -i 's/^    return data\[mid\]$/    return data[mid - 1]/' textkit/stats.py"
FIX = (
    r"sed -i 's/^    return data\[mid\]$/    return (data[mid - 1] + data[mid]) \/ 2/'"
    " textkit/stats.py"
)
CHEAT = (
    "sed -i 's/== 2.5/== 3/; s/== 5.5/== 10/' tests/test_stats.py && "
    "printf 'def test_median_even():\\n    pass\\n' >> tests/test_stats.py && "
    "printf 'import textkit.stats\\n' > tests/conftest.py"
)


def _arm(name: str, script: str) -> str:
    return (
        f'[[arms]]\nname = "{name}"\nkind = "command"\nuses_model = false\n'
        f"argv = {json.dumps(['bash', '-c', script])}\n"
    )


def test_the_official_grade_decides_the_reward(
    local_swebench: LocalSwebench,  # noqa: F811
    tmp_path: Path,
) -> None:
    home = tmp_path / "home"
    gold = (local_swebench.parquet.parents[1] / "gold.toml").read_text()
    camp = tmp_path / "c.toml"
    # The builder's own campaign (the gold arm), plus the other agents on one instance.
    camp.write_text(
        gold.replace('name = "swebench-local-gold"', f'name = "sl"\ninstance_ids = ["{IID}"]')
        + _arm("FIX", FIX)
        + _arm("WRONG", WRONG)
        + _arm("CHEAT", CHEAT)
    )
    assert cli(home, "init").returncode == 0
    done = cli(home, "submit", str(camp))
    assert done.returncode == 0, done.stderr
    daemon = start_daemon(home, "--until-idle", stderr=tmp_path / "daemon.err")
    assert daemon.wait(timeout=600) == 0, (tmp_path / "daemon.err").read_text()
    verdicts = {
        r.stream.split(":")[2]: r.event
        for r in read_all(home)
        if isinstance(r.event, ev.JudgeVerdictRecorded)
    }
    assert set(verdicts) == {"GOLD", "FIX", "WRONG", "CHEAT"}
    resolved = {arm: v.resolved for arm, v in verdicts.items()}  # type: ignore[attr-defined]
    assert resolved == {"GOLD": True, "FIX": True, "WRONG": False, "CHEAT": False}, {
        arm: v.verdict_json
        for arm, v in verdicts.items()  # type: ignore[attr-defined]
    }
    # The test log is in the log, bounded, with the whole file's size and digest.
    assert all(v.test_log is not None for arm, v in verdicts.items() if arm != "CHEAT")  # type: ignore[attr-defined]
    ledger = tmp_path / "ledger.jsonl"
    assert cli(home, "project-ledger", str(ledger)).returncode == 0
    rewards = {
        line["policy"]["harness"]
        if False
        else line["outcome"]["verdict"]["instance_id"] + "/" + str(line["outcome"]["reward"])
        for line in map(json.loads, ledger.read_text().splitlines())
    }
    assert rewards == {f"{IID}/1", f"{IID}/0"}


def test_submit_refuses_an_instance_whose_image_is_missing(
    local_swebench: LocalSwebench,  # noqa: F811
    tmp_path: Path,
) -> None:
    home = tmp_path / "home"
    gold = (local_swebench.parquet.parents[1] / "gold.toml").read_text()
    rows = tmp_path / "rows.jsonl"
    row = dict(local_swebench.rows[IID], instance_id="arenad__missing-1")
    rows.write_text(json.dumps(row) + "\n")
    camp = tmp_path / "c.toml"
    camp.write_text(
        gold.replace(
            f"instances_file = {json.dumps(str(local_swebench.parquet))}",
            f"instances_file = {json.dumps(str(rows))}",
        )
    )
    assert cli(home, "init").returncode == 0
    done = cli(home, "submit", str(camp))
    assert done.returncode == 2, done.stderr
    assert "arenad__missing-1" in done.stderr and "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


def _judge_containers(home: Path) -> list[str]:
    out = subprocess.run(
        [
            "docker",
            "ps",
            "-a",
            "--filter",
            f"label=arenad.judge={IID}",
            "--format",
            '{{.Names}} {{.Label "arenad.run_dir"}}',
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return [line.split()[0] for line in out.splitlines() if f" {home}/" in line]


def test_a_daemon_killed_mid_grade_grades_once_and_leaves_no_container(
    local_swebench: LocalSwebench,  # noqa: F811
    tmp_path: Path,
) -> None:
    home = tmp_path / "home"
    gold = (local_swebench.parquet.parents[1] / "gold.toml").read_text()
    camp = tmp_path / "c.toml"
    # A slow test command: the daemon is killed while the judge's container runs it.
    camp.write_text(
        gold.replace(
            'name = "swebench-local-gold"', f'name = "kg"\ninstance_ids = ["{IID}"]'
        ).replace('test_cmd = "', 'test_cmd = "sleep 6; ')
    )
    assert cli(home, "init").returncode == 0
    assert cli(home, "submit", str(camp)).returncode == 0
    first = start_daemon(home, stderr=tmp_path / "daemon1.err")
    try:
        wait_for(lambda: _judge_containers(home), "the judge's container", timeout_s=300)
    finally:
        first.kill()
        first.wait()
    second = start_daemon(home, "--until-idle", stderr=tmp_path / "daemon2.err")
    assert second.wait(timeout=600) == 0, (tmp_path / "daemon2.err").read_text()
    verdicts = [r.event for r in read_all(home) if isinstance(r.event, ev.JudgeVerdictRecorded)]
    assert [(v.attempt, v.resolved) for v in verdicts] == [(1, True)]  # type: ignore[attr-defined]
    # The orphaned container bounded itself and was removed (--rm); none is left over.
    wait_for(lambda: not _judge_containers(home), "no judge container left", timeout_s=120)
