"""The daemon runs the campaign's judge with verify, and captures proposer shots."""

from __future__ import annotations

import json
from pathlib import Path

from events import cell as ev
from events.capture import ProposerShotCaptured
from tests.conftest import make_repo
from tests.daemon.support import cli, command_campaign, read_all, start_daemon, submitted

CELL = "jp:i1:CMD:0"


def test_the_judge_verdict_commits_with_verify(tmp_path: Path) -> None:
    home = tmp_path / "home"
    repo = tmp_path / "repo"
    base = make_repo(repo, {"a.txt": "a\n"})
    verdict = json.dumps({"resolved": True, "score": 1})
    camp = command_campaign(
        tmp_path / "c.toml",
        name="jp",
        repo=repo,
        base=base,
        argv=["bash", "-c", "echo b >> a.txt"],
        extra=f"[judge]\ncommand = {json.dumps(f'echo {json.dumps(verdict)}')}",
    )
    submitted(home, camp)
    daemon = start_daemon(home, "--until-idle", stderr=tmp_path / "daemon.err")
    assert daemon.wait(timeout=60) == 0, (tmp_path / "daemon.err").read_text()
    records = [r for r in read_all(home) if r.stream == f"cell/{CELL}"]
    verified = next(r for r in records if isinstance(r.event, ev.CellVerified))
    judged = next(r for r in records if isinstance(r.event, ev.JudgeVerdictRecorded))
    # One append: the verdict is the next version of the stream, in the same commit.
    assert judged.version == verified.version + 1
    assert judged.recorded_at_ms == verified.recorded_at_ms
    assert judged.event.resolved is True and judged.event.source == "command"  # type: ignore[attr-defined]
    assert judged.event.attempts == 1 and judged.event.wall_s is not None  # type: ignore[attr-defined]
    assert isinstance(records[-1].event, ev.CellRecovered)
    # What verify saw is in that commit too: the patch (the run's one line) and the log.
    patch = next(r for r in records if isinstance(r.event, ev.PatchCaptured))
    assert patch.recorded_at_ms == verified.recorded_at_ms
    assert "+b" in patch.event.patch.text.splitlines()  # type: ignore[attr-defined]
    assert any(isinstance(r.event, ev.VerifyLogCaptured) for r in records)


def test_the_daemon_captures_proposer_shots(tmp_path: Path) -> None:
    home = tmp_path / "home"
    assert cli(home, "init").returncode == 0
    shots = home / "proposer-shots" / "alice"
    shots.mkdir(parents=True)
    receipt = {"receipt": {"generation": 0, "candidateIndex": 1, "shot": 1}, "stdoutTail": ""}
    (shots / "gen0-cand1-shot1.json").write_text(json.dumps(receipt))
    daemon = start_daemon(
        home,
        "--until-idle",
        "--claude-projects-dir",
        str(tmp_path / "claude"),
        stderr=tmp_path / "daemon.err",
    )
    assert daemon.wait(timeout=60) == 0, (tmp_path / "daemon.err").read_text()
    captured = [r.event for r in read_all(home) if isinstance(r.event, ProposerShotCaptured)]
    assert len(captured) == 1
    assert (captured[0].generation, captured[0].candidate_index, captured[0].shot) == (0, 1, 1)
    assert captured[0].author == "alice"


def test_an_unscored_attempt_is_not_judged(tmp_path: Path) -> None:
    home = tmp_path / "home"
    repo = tmp_path / "repo"
    base = make_repo(repo, {"a.txt": "a\n"})
    marker = tmp_path / "judged"
    judge = f"touch {marker}; echo {json.dumps(json.dumps({'resolved': True}))}"
    camp = command_campaign(
        tmp_path / "c.toml",
        name="jp",
        repo=repo,
        base=base,
        argv=["bash", "-c", "echo b >> a.txt; exit 3"],  # the agent fails: not scored
        extra=f"[judge]\ncommand = {json.dumps(judge)}",
    )
    submitted(home, camp)
    daemon = start_daemon(home, "--until-idle", stderr=tmp_path / "daemon.err")
    assert daemon.wait(timeout=60) == 0, (tmp_path / "daemon.err").read_text()
    events = [r.event for r in read_all(home) if r.stream == f"cell/{CELL}"]
    verified = next(e for e in events if isinstance(e, ev.CellVerified))
    assert verified.scored is False and verified.not_scored_reason == "agent exited 3"
    assert not any(isinstance(e, ev.JudgeVerdictRecorded) for e in events)
    assert not marker.exists()  # the judge never ran
    assert isinstance(events[-1], ev.CellRecovered)
