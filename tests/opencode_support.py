"""Pytest support for tests that drive the real opencode CLI against the scripted model.

Registered as a plugin (``pytest_plugins = ["tests.opencode_support"]`` in tests/conftest.py),
it gives every test module:

* ``opencode_bin`` (session): the pinned opencode binary, installed once by
  ``scripts/install-opencode``; skips only if npm is not installed.
* ``scripted_model`` (function): a factory ``scripted_model(script_or_toml) -> RunningModel``
  that starts a scripted model server in a background thread and stops it after the test.
* ``isolated_opencode_env(root, config)``: an environment for ``opencode run`` whose HOME,
  XDG dirs and TMPDIR live under ``root`` and whose config is ``config`` (facts §5 recipe).
* ``opencode_db_path(env)``: where that environment's opencode SQLite store lives.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from arenad.scripted_model import Cost, Reply, Script, parse_script
from arenad.scripted_model.opencode_config import DEFAULT_PROVIDER_ID, opencode_config_for_script
from arenad.scripted_model.server import ThreadedScriptedModel

REPO = Path(__file__).resolve().parent.parent
INSTALL_SCRIPT = REPO / "scripts" / "install-opencode"
OPENCODE_VERSION = "1.18.33"


@pytest.fixture(scope="session")
def opencode_bin() -> Path:
    """The pinned opencode binary (installed into the cache on first use)."""
    if shutil.which("npm") is None:
        pytest.skip("npm is not on PATH, so the pinned opencode CLI cannot be installed")
    proc = subprocess.run(
        [str(INSTALL_SCRIPT)],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    if proc.returncode != 0:
        pytest.fail(
            f"scripts/install-opencode failed (rc {proc.returncode}):\n{proc.stderr[-4000:]}"
        )
    lines = proc.stdout.strip().splitlines()
    path = Path(lines[-1]) if lines else Path()
    if not lines or not path.exists():
        pytest.fail(f"scripts/install-opencode printed no binary path: {proc.stdout!r}")
    return path


class RunningModel:
    """A started scripted model server, as the ``scripted_model`` fixture hands it out."""

    def __init__(self, server: ThreadedScriptedModel) -> None:
        self._server = server

    @property
    def port(self) -> int:
        return self._server.port

    @property
    def base_url(self) -> str:
        return self._server.base_url

    @property
    def requests(self) -> list[dict[str, Any]]:
        """The request bodies received so far, of every endpoint (live list)."""
        return self._server.requests

    @property
    def authorizations(self) -> list[str | None]:
        """Each chat request's Authorization header (live list; in memory only)."""
        return self._server.authorizations

    @property
    def api_keys(self) -> list[str | None]:
        """Each request's x-api-key header (live list; in memory only)."""
        return self._server.api_keys

    @property
    def replies(self) -> list[Reply]:
        """What was chosen to answer each of them (live list)."""
        return self._server.replies

    @property
    def script(self) -> Script:
        return self._server.script

    @script.setter
    def script(self, script: Script) -> None:
        self._server.script = script

    def opencode_config(
        self,
        *,
        provider_id: str = DEFAULT_PROVIDER_ID,
        model: str | None = None,
        costs: Mapping[str, Cost] | None = None,
        permission: Mapping[str, Any] | None = None,
    ) -> dict[str, Any]:
        """The opencode config dict pointing at this server (all of the script's models)."""
        return opencode_config_for_script(
            self.script,
            port=self.port,
            provider_id=provider_id,
            model=model,
            costs=costs,
            permission=permission,
        )

    def stop(self) -> None:
        self._server.stop()


@pytest.fixture
def scripted_model() -> Iterator[Callable[[Script | str], RunningModel]]:
    """Factory: ``scripted_model(Script | toml_text)`` -> a running server, stopped at teardown."""
    started: list[RunningModel] = []

    def start(script: Script | str) -> RunningModel:
        parsed = parse_script(script, "<test script>") if isinstance(script, str) else script
        server = ThreadedScriptedModel(parsed)
        server.start()
        running = RunningModel(server)
        started.append(running)
        return running

    yield start
    for running in started:
        running.stop()


def isolated_opencode_env(root: Path, config: Mapping[str, Any]) -> dict[str, str]:
    """An env for ``opencode run`` that touches nothing outside ``root`` and needs no network.

    HOME, XDG_{CONFIG,DATA,CACHE,STATE}_HOME and TMPDIR point under ``root`` (created); the
    config travels inline in OPENCODE_CONFIG_CONTENT; models.dev refresh and autoupdate are
    off; PATH is kept. A git identity is set so git works under the fresh HOME. The opencode
    store is then ``root/data/opencode/opencode.db`` (see :func:`opencode_db_path`).
    """
    dirs = {
        "HOME": root / "home",
        "XDG_CONFIG_HOME": root / "config",
        "XDG_DATA_HOME": root / "data",
        "XDG_CACHE_HOME": root / "cache",
        "XDG_STATE_HOME": root / "state",
        "TMPDIR": root / "tmp",
    }
    for path in dirs.values():
        path.mkdir(parents=True, exist_ok=True)
    env = {name: str(path) for name, path in dirs.items()}
    env.update(
        {
            "PATH": os.environ.get("PATH", "/usr/local/bin:/usr/bin:/bin"),
            "LANG": os.environ.get("LANG", "C.UTF-8"),
            "OPENCODE_CONFIG_CONTENT": json.dumps(config),
            "OPENCODE_DISABLE_MODELS_FETCH": "1",
            "OPENCODE_DISABLE_AUTOUPDATE": "1",
            "GIT_AUTHOR_NAME": "arenad test",
            "GIT_AUTHOR_EMAIL": "arenad-test@example.invalid",
            "GIT_COMMITTER_NAME": "arenad test",
            "GIT_COMMITTER_EMAIL": "arenad-test@example.invalid",
        }
    )
    return env


def opencode_db_path(env: Mapping[str, str]) -> Path:
    """The SQLite store an ``isolated_opencode_env`` run writes (npm build: channel latest)."""
    return Path(env["XDG_DATA_HOME"]) / "opencode" / "opencode.db"
