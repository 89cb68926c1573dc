"""arenad.verdict.judge: the campaign judge in a real shell, and the verdict document's rules."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from arenad.verdict.judge import VerdictError, parse_verdict, run_judge
from events.specs import JudgeSpec

SENTINEL = "sk-SENTINEL-judge-7d21"


def test_parse_reads_resolved_score_and_judge_and_keeps_the_text() -> None:
    text = '{"resolved": true, "composite": 0.75, "note": "é"}\n'
    event = parse_verdict(text, attempt=3, default_judge="j", source="command")
    assert (event.attempt, event.judge, event.resolved, event.score) == (3, "j", True, 0.75)
    assert event.verdict_json == text and event.source == "command"
    named = parse_verdict('{"resolved": null, "score": 1, "judge": "op"}', attempt=1)
    assert (named.judge, named.resolved, named.score) == ("op", None, 1.0)
    # An operator's verdict: no run was timed here (the ledger reads the document's own).
    assert (named.attempts, named.wall_s) == (None, None)


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("nope", "not JSON"),
        ("[1]", "must be a JSON object"),
        ('{"resolved": 1}', "'resolved' must be true, false or null"),
        ('{"score": true}', "'score' must be a number or null"),
        ('{"score": "0.5"}', "'score' must be a number or null"),
        ('{"judge": ""}', "'judge' must be a non-empty string"),
    ],
)
def test_parse_refuses_what_is_not_a_verdict(text: str, error: str) -> None:
    with pytest.raises(VerdictError, match=error):
        parse_verdict(text, attempt=1)


async def test_the_judge_runs_in_the_workspace_without_provider_secrets(tmp_path: Path) -> None:
    ws, run_dir = tmp_path / "ws", tmp_path / "run"
    ws.mkdir()
    script = (
        'echo "judging $(pwd)" >&2; '
        'printf \'{"resolved": true, "score": 1, "key": "%s"}\' "${OPENAI_API_KEY:-}"'
    )
    event = await run_judge(
        JudgeSpec(command=script, name="official"),
        attempt=2,
        workspace=ws,
        run_dir=run_dir,
        env={"PATH": "/usr/bin:/bin", "OPENAI_API_KEY": SENTINEL},
    )
    assert (event.attempt, event.judge, event.resolved, event.score) == (2, "official", True, 1.0)
    assert event.source == "command"
    # The reference's judgeAttempts / judgeWallS: it ran once, for a measured time.
    assert event.attempts == 1
    assert event.wall_s is not None and 0 <= event.wall_s < 60
    assert json.loads(event.verdict_json)["key"] == ""
    assert (run_dir / "judge.json").read_text() == event.verdict_json
    assert (run_dir / "judge.log").read_text() == f"judging {ws}\n"


@pytest.mark.parametrize(
    ("command", "timeout_s", "error"),
    [
        ("echo '{\"resolved\": true}'; exit 3", 60.0, "judge exited 3"),
        ("echo 'all good'", 60.0, "judge printed no verdict: not JSON"),
        ("sleep 1000", 0.3, "judge timed out after 0.3s"),
    ],
)
async def test_a_failed_judge_is_a_verdict_without_a_reward(
    tmp_path: Path, command: str, timeout_s: float, error: str
) -> None:
    event = await run_judge(
        JudgeSpec(command=command, name="official", timeout_s=timeout_s),
        attempt=1,
        workspace=tmp_path,
        run_dir=tmp_path / "run",
    )
    assert (event.resolved, event.score, event.judge) == (None, None, "official")
    doc = json.loads(event.verdict_json)
    assert doc["error"].startswith(error)
    assert event.attempts == 1 and event.wall_s is not None  # it ran, and took that long


@pytest.mark.parametrize(
    "text",
    [
        '{"resolved": true, "score": NaN}',
        '{"resolved": true, "score": Infinity}',
        '{"resolved": true, "score": -Infinity}',
        '{"resolved": true, "score": 1e400}',
    ],
)
def test_a_non_finite_score_is_not_a_verdict(text: str) -> None:
    """JSON.parse refuses NaN / Infinity literals; a score past the double range is not a
    finite number either (finding 9: a NaN score gave a null reward labelled as the judge's)."""
    with pytest.raises(VerdictError):
        parse_verdict(text, attempt=1)
