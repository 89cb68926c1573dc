"""The secrets wrapper and the verify gate's secret stripping.

Model-touching children run as ``<wrapper> -f <file>… -- bash -c <auth bootstrap + script>``
with cwd = the secrets dir (the reference's dotenvxBash; wrapper default ``dotenvx run``). arenad
handles env *names* and file *names* only: it never opens an env file or the auth file — the
key values are expanded inside the wrapper's child.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping
from typing import NamedTuple

from events.specs import SecretsSpec

# Inside the wrapper's child: hand opencode the ambient auth.json's content (the cell's HOME
# is private, so opencode would not find it otherwise). Exact text of the reference.
AUTH_BOOTSTRAP = "\n".join(
    [
        'if [ -n "${SWE_ARENA_OPENCODE_AUTH_FILE:-}" ] && [ -r "$SWE_ARENA_OPENCODE_AUTH_FILE" ];'
        " then",
        '  export OPENCODE_AUTH_CONTENT="$(cat -- "$SWE_ARENA_OPENCODE_AUTH_FILE")"',
        "fi",
    ]
)

# Provider secrets the verify gate must not see (compared case-insensitively).
SECRET_PREFIXES: tuple[str, ...] = (
    "ANTHROPIC_",
    "OPENAI_",
    "TANGLE_",
    "INTELLIGENCE_",
    "ZAI_",
    "Z_AI_",
    "OPENROUTER_",
    "GROQ_",
    "DEEPSEEK_",
    "MOONSHOT_",
    "XAI_",
    "GEMINI_",
)
SECRET_SUFFIXES: tuple[str, ...] = ("_API_KEY", "_AUTH_TOKEN")
SECRET_NAMES: frozenset[str] = frozenset({"INTELLIGENCE_BASE"})


class WrappedCommand(NamedTuple):
    argv: list[str]
    # None: run in the caller's chosen cwd (no wrapper configured).
    cwd: str | None


def shq(value: str) -> str:
    """Single-quote ``value`` for bash, always (``'`` becomes ``'\\''``)."""
    return "'" + value.replace("'", "'\\''") + "'"


def wrap_bash(secrets: SecretsSpec | None, script: str) -> WrappedCommand:
    """argv and cwd that run ``script`` under the secrets wrapper.

    With secrets: ``[*wrapper, -f f1, -f f2, --, bash, -c, AUTH_BOOTSTRAP + "\\n" + script]``,
    cwd = the secrets dir (env files resolve relative to it). Without:
    ``[bash, -c, AUTH_BOOTSTRAP + "\\n" + script]``: the reference always prepends the
    bootstrap, so a user's ``opencode auth`` login reaches the agent without ``[secrets]``
    too (its content is read by this bash, outside the sandbox; arenad never reads it).
    """
    if secrets is None:
        return WrappedCommand(argv=["bash", "-c", f"{AUTH_BOOTSTRAP}\n{script}"], cwd=None)
    argv = list(secrets.wrapper)
    for name in secrets.env_files:
        argv += ["-f", name]
    argv += ["--", "bash", "-c", f"{AUTH_BOOTSTRAP}\n{script}"]
    return WrappedCommand(argv=argv, cwd=secrets.dir)


def wrapper_problem(secrets: SecretsSpec, search_path: str | None = None) -> str | None:
    """Why the secrets wrapper cannot start (None: its executable is there); a relative
    path is taken from the secrets dir, the wrapper's cwd. Without it every cell of the
    campaign would fail at launch."""
    if not secrets.wrapper:
        return "[secrets] wrapper is empty"
    exe = secrets.wrapper[0]
    if "/" in exe:
        path = os.path.join(secrets.dir, exe)
        if os.path.isfile(path) and os.access(path, os.X_OK):
            return None
        return f"[secrets] wrapper: {path} is not an executable file"
    if shutil.which(exe, path=search_path) is not None:
        return None
    return (
        f"[secrets] wrapper: {exe!r} is not found on PATH (install it, or set [secrets]"
        " wrapper to the command that loads the env files)"
    )


def is_provider_secret(name: str) -> bool:
    upper = name.upper()
    return (
        upper in SECRET_NAMES
        or upper.startswith(SECRET_PREFIXES)
        or upper.endswith(SECRET_SUFFIXES)
    )


def strip_provider_secrets(env: Mapping[str, str]) -> dict[str, str]:
    """``env`` without provider secrets (by name; values are never looked at)."""
    return {k: v for k, v in env.items() if not is_provider_secret(k)}


def stripped_names(env: Mapping[str, str]) -> list[str]:
    """The names strip_provider_secrets would remove (safe to log: names only)."""
    return sorted(k for k in env if is_provider_secret(k))
