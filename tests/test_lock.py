"""The lock is the dependency set: uv.lock must agree with pyproject.toml's ranges, and the
packages arenad implements an interface of are bounded above there too (a plain pip user
gets a working set)."""

from __future__ import annotations

import subprocess
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_uv_lock_agrees_with_pyproject() -> None:
    done = subprocess.run(
        [REPO / "scripts" / "uv", "lock", "--check", "--offline"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, f"uv.lock is out of date: run scripts/uv lock\n{done.stderr}"


def test_the_interfaces_arenad_implements_are_bounded_above() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    deps = {d.split(">")[0].split("=")[0].split("<")[0].strip(): d for d in project["dependencies"]}
    ray = next(d for d in project["optional-dependencies"]["ray"] if d.startswith("ray"))
    for spec in (deps["watchdog"], deps["uvicorn"], deps["starlette"]):
        assert "<" in spec, spec
    assert "==" in ray, ray


def test_the_locked_watchdog_is_the_one_installed() -> None:
    # What setup installed is what the lock names (a stale venv would hide a new release).
    import watchdog.version

    lock = tomllib.loads((REPO / "uv.lock").read_text())
    (locked,) = [p["version"] for p in lock["package"] if p["name"] == "watchdog"]
    assert locked == watchdog.version.VERSION_STRING
