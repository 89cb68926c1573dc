"""arenad.verdict.verify: the verify gate in a real shell."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from arenad.verdict.verify import run_verify

SENTINEL = "sk-SENTINEL-verify-31b0"


async def test_pass_writes_stdout_then_stderr(tmp_path: Path) -> None:
    log = tmp_path / "verify.log"
    result = await run_verify("echo err >&2; echo out; pwd", tmp_path, log)
    assert result.rc == 0 and result.passed and not result.timed_out
    assert log.read_text() == f"out\n{tmp_path}\nerr\n"
    assert result.log_path == str(log)
    assert not (tmp_path / "verify.log.stderr").exists()
    assert result.log_excerpt is not None and result.log_excerpt.text == log.read_text()


async def test_the_log_tail_comes_back_bounded(tmp_path: Path) -> None:
    log = tmp_path / "verify.log"
    result = await run_verify("seq 1 5000; echo FAILED >&2", tmp_path, log, keep_bytes=20)
    excerpt = result.log_excerpt
    assert excerpt is not None and excerpt.text.endswith("4999\n5000\nFAILED\n")
    assert (excerpt.kept_bytes, excerpt.size, excerpt.cut) == (20, log.stat().st_size, "tail")


async def test_fail(tmp_path: Path) -> None:
    result = await run_verify("echo no; exit 3", tmp_path, tmp_path / "verify.log")
    assert result.rc == 3 and not result.passed


async def test_timeout_is_124_and_not_a_pass(tmp_path: Path) -> None:
    result = await run_verify("sleep 1000", tmp_path, tmp_path / "verify.log", timeout_s=0.3)
    assert result.rc == 124 and result.timed_out and not result.passed


async def test_provider_secrets_are_stripped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", SENTINEL)
    monkeypatch.setenv("my_service_auth_token", SENTINEL)
    monkeypatch.setenv("KEEP_ME", "kept")
    log = tmp_path / "verify.log"
    script = 'echo "key=${OPENAI_API_KEY-absent} keep=$KEEP_ME"; env'
    result = await run_verify(script, tmp_path, log)
    text = log.read_text()
    assert "key=absent keep=kept" in text
    assert SENTINEL not in text
    assert result.passed
    assert "OPENAI_API_KEY" in result.stripped and "my_service_auth_token" in result.stripped

    env = {"PATH": os.environ["PATH"], "ANTHROPIC_API_KEY": SENTINEL}
    result = await run_verify("env", tmp_path, log, env=env)
    assert SENTINEL not in log.read_text() and result.stripped == ["ANTHROPIC_API_KEY"]
