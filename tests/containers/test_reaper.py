"""The reaper against a real engine: this home's orphans go (an agent container whose
attempt is over, a judge container older than the daemon); a live attempt's container and
every other home's stay (skipped, saying why, without an engine)."""

from __future__ import annotations

import asyncio
import datetime as dt
import os
import subprocess
from pathlib import Path

import pytest

from arenad.containers import reaper
from arenad.containers.docker import engine_problem, image_exists

BASE = "local/deb-py:bookworm"


def _create(name: str, labels: dict[str, str]) -> None:
    argv = ["docker", "create", "--name", name]
    for key, value in labels.items():
        argv += ["--label", f"{key}={value}"]
    subprocess.run([*argv, BASE, "true"], capture_output=True, check=True)


def _exists(name: str) -> bool:
    done = subprocess.run(["docker", "inspect", name], capture_output=True, check=False)
    return done.returncode == 0


def test_only_this_homes_orphans_are_removed(tmp_path: Path) -> None:
    if (problem := engine_problem()) is not None:
        pytest.skip(f"no container engine: {problem}")
    if not image_exists(BASE):
        pytest.skip(f"{BASE} is not in the engine (scripts/build-base-image)")
    home = tmp_path / "home"
    other = tmp_path / "other-home"
    tag = f"arenad-test-reaper-{os.getpid()}"
    agent = {"arenad.cell": "c:i:A:0", "arenad.home": str(home)}
    containers = {
        f"{tag}-over": {**agent, "arenad.attempt": "1"},
        f"{tag}-live": {**agent, "arenad.attempt": "2"},
        f"{tag}-elsewhere": {**agent, "arenad.home": str(other), "arenad.attempt": "1"},
        f"{tag}-judge": {"arenad.judge": "i", "arenad.run_dir": f"{home}/campaigns/c/r"},
        f"{tag}-judge-elsewhere": {"arenad.judge": "i", "arenad.run_dir": f"{other}/c/r"},
    }
    for name, labels in containers.items():
        _create(name, labels)

    async def live(cell_id: str, attempt: int) -> bool:
        return (cell_id, attempt) == ("c:i:A:0", 2)

    try:
        # A daemon that started after every judge container above was made.
        later = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=30)
        removed = asyncio.run(reaper.reap(str(home), live, started_at=later))
        assert sorted(removed) == [f"{tag}-judge", f"{tag}-over"]
        assert {name: _exists(name) for name in containers} == {
            f"{tag}-over": False,
            f"{tag}-live": True,
            f"{tag}-elsewhere": True,
            f"{tag}-judge": False,
            f"{tag}-judge-elsewhere": True,
        }
        # A judge of this daemon (made after it started) is not an orphan.
        _create(f"{tag}-judge", containers[f"{tag}-judge"])
        earlier = dt.datetime.now(dt.UTC) - dt.timedelta(seconds=30)
        assert asyncio.run(reaper.reap(str(home), live, started_at=earlier)) == []
    finally:
        for name in containers:
            subprocess.run(["docker", "rm", "-f", name], capture_output=True, check=False)
