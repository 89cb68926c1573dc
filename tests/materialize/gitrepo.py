"""A real git repository with two commits, for materializer and patch tests."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import msgspec

IDENTITY = {
    "GIT_AUTHOR_NAME": "Test",
    "GIT_AUTHOR_EMAIL": "test@example.invalid",
    "GIT_COMMITTER_NAME": "Test",
    "GIT_COMMITTER_EMAIL": "test@example.invalid",
}


def git(cwd: Path, *args: str) -> str:
    out = subprocess.run(
        ["git", "-C", str(cwd), *args],
        check=True,
        capture_output=True,
        text=True,
        env={**os.environ, **IDENTITY},
    )
    return out.stdout.strip()


class Repo(msgspec.Struct, frozen=True, kw_only=True):
    path: Path
    first: str
    second: str


def make_repo(path: Path) -> Repo:
    """``first``: app.py = "v1"; ``second``: app.py = "v2" plus new.py. HEAD is on second."""
    path.mkdir(parents=True)
    git(path, "init", "-q", "-b", "main")
    (path / "app.py").write_text("v1\n")
    (path / ".gitignore").write_text("*.pyc\n")
    git(path, "add", "-A")
    git(path, "commit", "-q", "-m", "first")
    first = git(path, "rev-parse", "HEAD")
    (path / "app.py").write_text("v2\n")
    (path / "new.py").write_text("added\n")
    git(path, "add", "-A")
    git(path, "commit", "-q", "-m", "second")
    second = git(path, "rev-parse", "HEAD")
    return Repo(path=path, first=first, second=second)
