"""Shared fixtures. Real parts only: SQLite files in tmp_path, real subprocesses, real git."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

# CI shares two cores with real subprocesses; input generation speed is not what the
# property tests are about, so a slow machine must not fail them.
settings.register_profile("arenad", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("arenad")

pytest_plugins = ["tests.opencode_support", "tests.ray_support"]

GIT_ENV = {
    "GIT_AUTHOR_NAME": "arenad tests",
    "GIT_AUTHOR_EMAIL": "tests@arenad",
    "GIT_COMMITTER_NAME": "arenad tests",
    "GIT_COMMITTER_EMAIL": "tests@arenad",
}


def git(repo: Path, *args: str, env: dict[str, str] | None = None) -> str:
    out = subprocess.run(
        ["git", "-C", str(repo), *args],
        check=True,
        capture_output=True,
        text=True,
        env={**os.environ, **GIT_ENV, **(env or {})},
    )
    return out.stdout.strip()


def make_repo(
    path: Path, files: dict[str, str], message: str = "base", *, date: str | None = None
) -> str:
    """A real git repo with ``files`` committed; returns the commit. With ``date`` (e.g.
    ``"2026-01-01T00:00:00Z"``) the commit is the same in every run."""
    path.mkdir(parents=True, exist_ok=True)
    if not (path / ".git").exists():
        git(path, "init", "-q", "-b", "main")
    for name, content in files.items():
        target = path / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(content)
    git(path, "add", "-A")
    dates = {"GIT_AUTHOR_DATE": date, "GIT_COMMITTER_DATE": date} if date else None
    git(path, "commit", "-q", "-m", message, env=dates)
    return git(path, "rev-parse", "HEAD")


@pytest.fixture
def home_dir(tmp_path: Path) -> Path:
    return tmp_path / "home"


class DemoRun:
    """A finished `arenad demo` (real opencode, scripted model): its home and output."""

    def __init__(self, home: Path, stdout: str) -> None:
        self.home = home
        self.stdout = stdout

    def copy(self, dest: Path) -> Path:
        """The demo's home copied to ``dest``, for a test that changes it. Its events
        still name the original run dirs (nothing that reads the log reads those)."""
        shutil.copytree(self.home, dest, symlinks=True)
        return dest


@pytest.fixture(scope="session")
def demo_run(tmp_path_factory: pytest.TempPathFactory) -> DemoRun:
    # One demo per test process: it takes half a minute on a quiet machine (four real
    # opencode runs), and several slow tests read what it left (report, ledger, view).
    home = tmp_path_factory.mktemp("demo") / "h"
    exe = str(Path(sys.executable).parent / "arenad")
    done = subprocess.run(
        [exe, "--home", str(home), "demo"], capture_output=True, text=True, timeout=900
    )
    assert done.returncode == 0, done.stderr
    return DemoRun(home, done.stdout)
