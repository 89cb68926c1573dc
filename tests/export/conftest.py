from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.conftest import DemoRun, built_once
from tests.export.mixed_log import add_mixed


@pytest.fixture(scope="session")
def mixed_home(tmp_path_factory: pytest.TempPathFactory, demo_run: DemoRun) -> Path:
    """The demo's home (real opencode solo cells) with campaign ``mixed`` appended
    (``tests.export.mixed_log``); built once per session, only read by the tests."""

    def build(root: Path) -> None:
        demo_run.copy(root / "h")
        add_mixed(root / "h")

    return built_once(tmp_path_factory, "export-mixed", build) / "h"


@pytest.fixture
def home_copy(mixed_home: Path, tmp_path: Path) -> Path:
    """A copy of the mixed home a test may change (its run dirs deleted, say)."""
    dest = tmp_path / "h"
    shutil.copytree(mixed_home, dest, symlinks=True)
    return dest
