"""The built wheel is a working arenad: it ships events/, cli.py and the migrations, installs
into a fresh virtualenv, and runs from a directory where this checkout is not importable.

Slow (a wheel build and a pip install; dependencies come from PyPI through pip's cache).
"""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import venv
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.slow


def run(argv: list[str | Path], cwd: Path, timeout: float = 600) -> str:
    # No PYTHONPATH (pytest's pythonpath=["."] must not leak the checkout into the
    # installed arenad) and no ARENAD_HOME (the commands say --home).
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "ARENAD_HOME")}
    done = subprocess.run(
        [str(a) for a in argv],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 0, f"{argv} exited {done.returncode}:\n{done.stdout}{done.stderr}"
    return done.stdout


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    run([sys.executable, "-m", "build", "--wheel", "--outdir", out, REPO], cwd=REPO)
    (built,) = out.glob("arenad-*.whl")
    return built


def test_the_wheel_ships_events_cli_and_the_migrations(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    assert "cli.py" in names
    event_modules = {p.name for p in (REPO / "events").glob("*.py")}
    assert {n.removeprefix("events/") for n in names if n.startswith("events/")} == event_modules
    migrations = {p.name for p in (REPO / "migrations").glob("*.sql")}
    assert migrations, "the checkout has no migrations"
    shipped = {n.removeprefix("arenad/migrations/") for n in names if "/migrations/" in n}
    assert shipped == migrations
    # The view's templates and static files, which are not Python modules.
    view = [p for d in ("templates", "static") for p in (REPO / "arenad/view" / d).iterdir()]
    assert view and {p.relative_to(REPO).as_posix() for p in view} <= names
    # Only the three roots: no top-level migrations/, tests/ or bench/ in site-packages.
    roots = {n.split("/")[0] for n in names if not n.startswith("arenad-")}
    assert roots == {"arenad", "events", "cli.py"}


def test_the_installed_wheel_runs_outside_the_checkout(wheel: Path, tmp_path: Path) -> None:
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    bin_dir = env_dir / "bin"
    run([bin_dir / "python", "-m", "pip", "install", "--quiet", wheel], cwd=tmp_path)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()

    usage = run([bin_dir / "arenad", "--help"], cwd=elsewhere)
    assert "Usage: arenad" in usage and "init" in usage

    home = tmp_path / "home"
    said = run([bin_dir / "arenad", "--home", home, "init"], cwd=elsewhere)
    migrations = sorted(p.name for p in (REPO / "migrations").glob("*.sql"))
    assert said == f"arenad home {home} ready ({len(migrations)} migration(s) applied)\n"
    with sqlite3.connect(home / "arenad.db") as db:
        applied = [r[0] for r in db.execute("SELECT name FROM schema_migrations ORDER BY name")]
    assert applied == migrations

    # `events`, `cli` and the migrations resolve to the installed arenad, not the checkout
    # and not the unrelated PyPI distribution named `events` (STYLE.md, "known traps").
    where = run(
        [
            bin_dir / "python",
            "-c",
            "import importlib.metadata as md, cli, events.codec;"
            " from arenad.store.migrations import migrations_dir;"
            " print(events.__file__); print(cli.__file__); print(migrations_dir());"
            " print(md.packages_distributions()['events'])",
        ],
        cwd=elsewhere,
    ).splitlines()
    site_packages = next((env_dir / "lib").glob("python3*/site-packages"))
    assert where[:3] == [
        str(site_packages / "events" / "__init__.py"),
        str(site_packages / "cli.py"),
        str(site_packages / "arenad" / "migrations"),
    ]
    assert where[3] == "['arenad']"
