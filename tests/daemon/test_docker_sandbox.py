"""``[sandbox] kind = "docker"`` end to end: the agent runs in a container of the instance's
real image (a real docker engine and the local SWE-bench; skipped, saying why, without one).
The gold patch applied in the container is resolved by the swebench judge; a memory hog is
killed alone and recorded so; a daemon SIGKILLed mid-run has its run adopted, nothing runs
twice, and no container is left over."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from arenad.sandbox.container import LABEL_HOME, container_name
from events import cell as ev
from tests.daemon.support import cli, read_all, start_daemon, wait_for
from tests.swebench_support import LocalSwebench, local_swebench  # noqa: F401

IID = "arenad__textkit-3"
# Proof of where the agent ran: the image's /etc/os-release (a Debian bookworm), its
# working dir, and the host's own home, which must not exist inside.
WHERE = (
    'grep -q bookworm /etc/os-release && [ "$PWD" = /testbed ] && [ "$(pwd)" = /testbed ]'
    ' && test ! -e /work && echo in-container > "$HOME/where.txt"'
)


def _containers(home: Path) -> list[str]:
    out = subprocess.run(
        ["docker", "ps", "-a", "--filter", f"label={LABEL_HOME}={home}", "--format", "{{.Names}}"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return out.split()


def _campaign(local: LocalSwebench, tmp_path: Path, name: str, arms: str, sandbox: str) -> Path:
    gold = (local.parquet.parents[1] / "gold.toml").read_text()
    camp = tmp_path / f"{name}.toml"
    text = gold.replace(
        'name = "swebench-local-gold"', f'name = "{name}"\ninstance_ids = ["{IID}"]'
    ).replace("[sandbox]\n", f'[sandbox]\nkind = "docker"\n{sandbox}')
    camp.write_text(text + arms)
    return camp


def _arm(name: str, script: str) -> str:
    return (
        f'[[arms]]\nname = "{name}"\nkind = "command"\nuses_model = false\n'
        f"argv = {json.dumps(['bash', '-c', script])}\n"
    )


def test_the_gold_patch_applied_in_the_container_is_resolved(
    local_swebench: LocalSwebench,  # noqa: F811
    tmp_path: Path,
) -> None:
    home = tmp_path / "home"
    gold_dir = local_swebench.parquet.parents[0] / "gold"
    camp = _campaign(local_swebench, tmp_path, "dk", "", "")
    # The GOLD arm, proving first that it runs inside the image.
    text = camp.read_text().replace(
        'argv = ["bash", "-c", "git apply',
        f'argv = ["bash", "-c", {json.dumps(WHERE + " && git apply")[:-1]}',
    )
    camp.write_text(text)
    assert str(gold_dir) in text
    assert cli(home, "init").returncode == 0
    done = cli(home, "submit", str(camp))
    assert done.returncode == 0, done.stderr
    daemon = start_daemon(home, "--until-idle", stderr=tmp_path / "daemon.err")
    assert daemon.wait(timeout=600) == 0, (tmp_path / "daemon.err").read_text()
    records = read_all(home)
    runs = [r for r in records if isinstance(r.event, ev.RunStarted)]
    assert len(runs) == 1
    started = [runs[0].event]
    cell_id = runs[0].stream.removeprefix("cell/")
    box = runs[0].event.sandbox
    assert box is not None and box.kind == "docker" and box.network == "none"
    assert box.container == container_name(str(home), cell_id, 1)
    assert box.image is not None and "textkit" in box.image
    assert "--name" in started[0].argv and box.container in started[0].argv
    verdicts = [r.event for r in records if isinstance(r.event, ev.JudgeVerdictRecorded)]
    assert [v.resolved for v in verdicts] == [True], records  # type: ignore[attr-defined]
    where = list(home.rglob("where.txt"))
    assert [p.read_text() for p in where] == ["in-container\n"]
    assert _containers(home) == []


HOG = "python3 -c \"b = b'x' * (400 << 20); import time; time.sleep(60)\""


def test_a_memory_hog_in_its_container_is_killed_alone_and_recorded(
    local_swebench: LocalSwebench,  # noqa: F811
    tmp_path: Path,
) -> None:
    home = tmp_path / "home"
    camp = _campaign(local_swebench, tmp_path, "hog", _arm("HOG", HOG), 'memory = "128MiB"\n')
    assert cli(home, "init").returncode == 0
    done = cli(home, "submit", str(camp))
    assert done.returncode == 0, done.stderr
    daemon = start_daemon(home, "--until-idle", stderr=tmp_path / "daemon.err")
    assert daemon.wait(timeout=600) == 0, (tmp_path / "daemon.err").read_text()
    records = read_all(home)
    by_arm = {r.stream.split(":")[2]: [] for r in records if r.stream.startswith("cell/")}
    for r in records:
        if r.stream.startswith("cell/"):
            by_arm[r.stream.split(":")[2]].append(r.event)
    hog = by_arm["HOG"]
    aborted = [e for e in hog if isinstance(e, ev.RunAborted)]
    assert [(e.limit, e.reason) for e in aborted] == [("memory", "out of memory")], hog
    # The other cell, on the same daemon, is untouched by it.
    verdicts = [e for e in by_arm["GOLD"] if isinstance(e, ev.JudgeVerdictRecorded)]
    assert [v.resolved for v in verdicts] == [True]
    assert _containers(home) == []


def test_a_daemon_killed_mid_run_adopts_the_container_and_leaves_none(
    local_swebench: LocalSwebench,  # noqa: F811
    tmp_path: Path,
) -> None:
    home = tmp_path / "home"
    camp = _campaign(local_swebench, tmp_path, "kd", "", "")
    # A slow agent: the daemon is killed while its container runs.
    text = camp.read_text().replace('"bash", "-c", "git apply', '"bash", "-c", "sleep 8; git apply')
    camp.write_text(text)
    assert cli(home, "init").returncode == 0
    assert cli(home, "submit", str(camp)).returncode == 0
    first = start_daemon(home, stderr=tmp_path / "daemon1.err")
    try:
        wait_for(lambda: _containers(home), "the agent's container", timeout_s=300)
    finally:
        first.kill()
        first.wait()
    second = start_daemon(home, "--until-idle", stderr=tmp_path / "daemon2.err")
    assert second.wait(timeout=600) == 0, (tmp_path / "daemon2.err").read_text()
    records = read_all(home)
    started = [r.event for r in records if isinstance(r.event, ev.RunStarted)]
    assert len(started) == 1, started
    verdicts = [r.event for r in records if isinstance(r.event, ev.JudgeVerdictRecorded)]
    assert [(v.attempt, v.resolved) for v in verdicts] == [(1, True)]  # type: ignore[attr-defined]
    assert _containers(home) == []


def test_the_reaper_removes_a_container_whose_attempt_is_over(
    local_swebench: LocalSwebench,  # noqa: F811
    tmp_path: Path,
) -> None:
    home = tmp_path / "home"
    camp = _campaign(local_swebench, tmp_path, "rp", "", "")
    assert cli(home, "init").returncode == 0
    assert cli(home, "submit", str(camp)).returncode == 0
    # A leftover of this home for an attempt the log does not hold as running, and one of
    # another home (never this daemon's to remove).
    leftover = f"arenad-test-leftover-{home.name}-{abs(hash(str(home))) % 10**8}"
    other = leftover + "-other"
    for name, label_home in ((leftover, str(home)), (other, str(tmp_path / "elsewhere"))):
        subprocess.run(
            [
                "docker",
                "create",
                "--name",
                name,
                "--label",
                f"{LABEL_HOME}={label_home}",
                "--label",
                "arenad.cell=nope:i:A:0",
                "--label",
                "arenad.attempt=7",
                "local/deb-py:bookworm",
                "true",
            ],
            capture_output=True,
            check=True,
        )
    try:
        daemon = start_daemon(home, "--until-idle", stderr=tmp_path / "daemon.err")
        assert daemon.wait(timeout=600) == 0, (tmp_path / "daemon.err").read_text()
        assert _containers(home) == []
        assert _containers(tmp_path / "elsewhere") == [other]
    finally:
        for name in (leftover, other):
            subprocess.run(["docker", "rm", "-f", name], capture_output=True, check=False)


# Ignores TERM (the daemon's TERM reaches it through the client and docker's init), so the
# grace runs out and the group is KILLed: the client dies, the container is removed by name.
STUBBORN = "trap '' TERM; echo started; while true; do sleep 1; done"
GENTLE = "trap 'echo got-term; exit 3' TERM; echo started; while true; do sleep 1; done"


def test_a_timeout_ends_the_container_with_or_without_its_agent_s_consent(
    local_swebench: LocalSwebench,  # noqa: F811
    tmp_path: Path,
) -> None:
    home = tmp_path / "home"
    arms = "".join(
        _arm(name, script) + "timeout_s = 6\nkill_grace_s = 2\n"
        for name, script in (("STUBBORN", STUBBORN), ("GENTLE", GENTLE))
    )
    camp = _campaign(local_swebench, tmp_path, "to", arms, "")
    assert cli(home, "init").returncode == 0
    done = cli(home, "submit", str(camp))
    assert done.returncode == 0, done.stderr
    daemon = start_daemon(home, "--until-idle", stderr=tmp_path / "daemon.err")
    assert daemon.wait(timeout=600) == 0, (tmp_path / "daemon.err").read_text()
    records = read_all(home)
    for arm in ("STUBBORN", "GENTLE"):
        events = [r.event for r in records if r.stream.startswith("cell/") and arm in r.stream]
        assert len([e for e in events if isinstance(e, ev.RunTimedOut)]) == 1, events
    outputs = {p.parent.name: p.read_text() for p in home.rglob("cmd.out")}
    assert "got-term" in outputs["GENTLE"] and "got-term" not in outputs["STUBBORN"], outputs
    assert _containers(home) == []
