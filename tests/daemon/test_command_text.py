"""A command arm's plain-text stdout (`output = "text"`, issue 29): its lines are ingested
as text, not one `ingest.malformed` each; and a command that keeps no opencode store logs
no `capture.store-unavailable` (a real daemon, real git, a real process)."""

from __future__ import annotations

from pathlib import Path

import pytest

from events import cell as ev
from events.capture import AgentStoreUnavailable
from events.ingest import LineIngested, LineMalformed
from tests.conftest import make_repo
from tests.daemon.support import cli, command_campaign, read_all, submitted


@pytest.mark.parametrize("output", ["text", "jsonl"])
def test_plain_text_stdout(tmp_path: Path, output: str) -> None:
    repo = tmp_path / "repo"
    base = make_repo(repo, {"a.txt": "a\n"})
    script = 'echo "building..."; echo "ok: 3 tests passed"; printf "no newline"'
    camp = command_campaign(
        tmp_path / "c.toml",
        name="tx",
        repo=repo,
        base=base,
        argv=["bash", "-c", script],
        arm_extra=f'output = "{output}"',
    )
    home = submitted(tmp_path / "home", camp)
    done = cli(home, "daemon", "--until-idle")
    assert done.returncode == 0, done.stderr
    records = read_all(home)
    lines = [r.event for r in records if r.stream == "ingest/tx:i1:CMD:0/1"]
    ingested = [e for e in lines if isinstance(e, LineIngested)]
    malformed = [e for e in lines if isinstance(e, LineMalformed)]
    if output == "text":
        assert [e.raw for e in ingested] == ["building...", "ok: 3 tests passed", "no newline"]
        assert [e.partial for e in ingested] == [False, False, True]
        assert malformed == []
    else:
        # JSON lines expected: each plain line is evidence of a malformed stream.
        assert len(malformed) == 3 and ingested == []
    assert not [r for r in records if isinstance(r.event, AgentStoreUnavailable)]
    recovered = [r.event for r in records if isinstance(r.event, ev.CellRecovered)]
    assert len(recovered) == 1 and recovered[0].store_available is False
