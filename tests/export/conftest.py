from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.conftest import DemoRun, built_once
from tests.export.mixed_log import add_mixed

# The view's browser (Debian's chromium through Playwright), for `inspect view`'s test.
from tests.view.conftest import browser  # noqa: F401


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


@pytest.fixture(scope="session")
def daemon_home(tmp_path_factory: pytest.TempPathFactory, demo_run: DemoRun) -> Path:
    """The demo's home (real opencode solo cells) where the daemon then ran a supervisor
    cell (the stand-in driver, as tests/arms runs it) and two command cells (one edits a
    file, one fails its verify); built once per session, only read by the tests."""
    from tests.arms.support import daemon_until_idle, supervisor_campaign
    from tests.conftest import make_repo
    from tests.daemon.support import command_campaign, env_with, submitted

    def build(root: Path) -> None:
        home = demo_run.copy(root / "h")
        repo, loops = root / "repo", root / "loops"
        base = make_repo(repo, {"a.txt": "a\n"})
        make_repo(loops, {"README": "loops\n"})
        submitted(
            home,
            supervisor_campaign(root / "sup.toml", name="sup", repo=repo, base=base, loops=loops),
        )
        submitted(
            home,
            command_campaign(
                root / "cmd.toml",
                name="cmd",
                repo=repo,
                base=base,
                argv=["bash", "-c", "echo b > a.txt"],
                verify_cmd="grep -q b a.txt",
                instances=("i1", "i2"),
            ),
        )
        env = env_with(FAKE_SUP_MODE="ok", FAKE_SUP_PAUSE="0.2")
        daemon_until_idle(home, env, root / "daemon.err", timeout_s=600)

    return built_once(tmp_path_factory, "export-daemon", build) / "h"
