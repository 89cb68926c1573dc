"""arenad.sandbox.secrets: the wrapper argv, the auth bootstrap, and secret stripping."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import msgspec
import pytest

from arenad.runs.commands import run
from arenad.sandbox.secrets import (
    AUTH_BOOTSTRAP,
    is_provider_secret,
    shq,
    strip_provider_secrets,
    stripped_names,
    wrap_bash,
)
from events.specs import SecretsSpec

SENTINEL = "sk-SENTINEL-9d2e7c-never-seen"


def test_wrapped_argv_shape() -> None:
    spec = SecretsSpec(dir="/secrets", env_files=[".env", ".env.models"])
    cmd = wrap_bash(spec, "opencode run x")
    assert cmd.cwd == "/secrets"
    assert cmd.argv == [
        "dotenvx",
        "run",
        "-f",
        ".env",
        "-f",
        ".env.models",
        "--",
        "bash",
        "-c",
        AUTH_BOOTSTRAP + "\nopencode run x",
    ]
    custom = wrap_bash(SecretsSpec(dir="/s", env_files=["a"], wrapper=["/opt/w", "exec"]), "s")
    assert custom.argv[:5] == ["/opt/w", "exec", "-f", "a", "--"]


def test_no_secrets_is_bash_with_the_auth_bootstrap() -> None:
    # The reference prepends the bootstrap whatever the secrets: a user's `opencode auth`
    # login reaches the agent without a [secrets] table too.
    cmd = wrap_bash(None, "echo hi")
    assert cmd.argv == ["bash", "-c", f"{AUTH_BOOTSTRAP}\necho hi"] and cmd.cwd is None


def test_without_secrets_the_bootstrap_exports_the_auth_file_s_content(tmp_path: Path) -> None:
    auth = tmp_path / "auth.json"
    auth.write_text('{"p": {"type": "api"}}')
    cmd = wrap_bash(None, 'printf %s "$OPENCODE_AUTH_CONTENT"')
    env = {"PATH": os.environ["PATH"], "SWE_ARENA_OPENCODE_AUTH_FILE": str(auth)}
    out = subprocess.run(cmd.argv, env=env, capture_output=True, text=True, check=True)
    assert out.stdout == auth.read_text()


def test_auth_bootstrap_text_is_the_seeds() -> None:
    assert AUTH_BOOTSTRAP == (
        'if [ -n "${SWE_ARENA_OPENCODE_AUTH_FILE:-}" ] && [ -r "$SWE_ARENA_OPENCODE_AUTH_FILE" ];'
        " then\n"
        '  export OPENCODE_AUTH_CONTENT="$(cat -- "$SWE_ARENA_OPENCODE_AUTH_FILE")"\n'
        "fi"
    )


async def test_auth_bootstrap_exports_content_inside_the_child(tmp_path: Path) -> None:
    auth = tmp_path / "auth.json"
    auth.write_text('{"p": 1}')
    spec = SecretsSpec(dir=str(tmp_path), env_files=[])
    bash_part = wrap_bash(spec, 'printf %s "$OPENCODE_AUTH_CONTENT"').argv[-3:]
    result = await run(bash_part, env={"SWE_ARENA_OPENCODE_AUTH_FILE": str(auth)})
    assert result.stdout_text == '{"p": 1}'
    missing = await run(bash_part, env={"SWE_ARENA_OPENCODE_AUTH_FILE": str(tmp_path / "no")})
    assert missing.code == 0 and missing.stdout_text == ""


def test_secret_values_in_env_files_never_surface(tmp_path: Path) -> None:
    (tmp_path / ".env").write_text(f"OPENAI_API_KEY={SENTINEL}\n")
    spec = SecretsSpec(dir=str(tmp_path), env_files=[".env"])
    cmd = wrap_bash(spec, "opencode run")
    assert SENTINEL not in repr(cmd)
    assert SENTINEL not in msgspec.json.encode(list(cmd)).decode()
    # The wrapper never needs the file to exist: it handles names only.
    assert wrap_bash(SecretsSpec(dir="/nowhere", env_files=["gone"]), "x").argv[2:4] == [
        "-f",
        "gone",
    ]


@pytest.mark.parametrize(
    "name",
    [
        "ANTHROPIC_BASE_URL",
        "openai_api_key",
        "OpenAI_Org",
        "TANGLE_TOKEN",
        "INTELLIGENCE_KEY",
        "intelligence_base",
        "ZAI_KEY",
        "Z_AI_TOKEN",
        "OPENROUTER_X",
        "GROQ_Y",
        "DEEPSEEK_Z",
        "MOONSHOT_A",
        "XAI_B",
        "GEMINI_C",
        "MY_SERVICE_API_KEY",
        "some_auth_token",
    ],
)
def test_provider_secret_names(name: str) -> None:
    assert is_provider_secret(name)


@pytest.mark.parametrize(
    "name", ["PATH", "HOME", "OPENCODE_DB", "ZAI", "XAIX", "INTELLIGENCEBASE", "API_KEYS", "LANG"]
)
def test_other_names_are_kept(name: str) -> None:
    assert not is_provider_secret(name)


def test_strip_provider_secrets() -> None:
    env = {"PATH": "/bin", "OPENAI_API_KEY": SENTINEL, "gemini_key": SENTINEL, "A_AUTH_TOKEN": "t"}
    assert strip_provider_secrets(env) == {"PATH": "/bin"}
    assert stripped_names(env) == ["A_AUTH_TOKEN", "OPENAI_API_KEY", "gemini_key"]
    assert env["OPENAI_API_KEY"] == SENTINEL  # the input is not mutated


@pytest.mark.parametrize(
    "value", ["plain", "with space", "it's", "'''", '"$HOME" `id` $(id)', "multi\nline", ""]
)
async def test_shq_round_trips_through_bash(value: str) -> None:
    result = await run(["bash", "-c", f"printf %s {shq(value)}"])
    assert result.stdout_text == value
