"""Shared fixtures. Real parts only: SQLite files in tmp_path, real subprocesses, real git."""

from __future__ import annotations

import fcntl
import itertools
import os
import shutil
import signal
import stat
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

# CI shares two cores with real subprocesses; input generation speed is not what the
# property tests are about, so a slow machine must not fail them.
settings.register_profile("arenad", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("arenad")

pytest_plugins = ["tests.opencode_support", "tests.ray_support"]

# The tests interrupt daemons and commands as a terminal's Ctrl-C would. A suite started as
# a background job (`scripts/test &`, nohup, some CI runners) inherits SIGINT *ignored*
# (POSIX, for asynchronous lists), and an ignored signal stays ignored across exec: every
# arenad the tests start would then ignore their interrupts. A handled one is reset to the
# default in a child, so the children get a terminal's Ctrl-C whatever started the suite.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

# -- test order: a hint to pytest-xdist's scheduler --------------------------------------
# `--dist worksteal` hands each of N workers one contiguous Nth of the collection, then
# moves work from the tail of a busy worker's queue to an idle one. So the order decides
# what runs where and when: the long tests (the real opencode CLI, the Ray cluster) go at
# the head of the slices, spread over the workers longest first, where they overlap the
# other worker's short tests instead of ending the run alone; tests that share a costly
# session resource (the Ray cluster, the demo, a crash-matrix arm's reference run) stay in
# one slice, so one worker builds it and no other waits for it. Only the order changes.
WEIGHT_SLOW = 10  # a real opencode run or more
WEIGHT_RAY = 5  # a test on the Ray cluster


def _unit_of(item: pytest.Item) -> str | None:
    """The group a long test belongs to (kept in one slice), or None for a short test."""
    names = getattr(item, "fixturenames", ())
    if "ray_cluster" in names:
        return "ray"
    if "mixed_home" in names or "daemon_home" in names:
        # The export tests' homes (built once from the demo, then read): a slice of their
        # own, so they do not all land with the demo's other readers.
        return "export"
    if "demo_run" in names:
        return "demo"
    callspec = getattr(item, "callspec", None)
    if item.path.name == "test_crash_matrix.py" and callspec is not None:
        return f"crash-matrix:{callspec.params.get('arm')}"
    if item.get_closest_marker("slow") is not None:
        return item.nodeid
    return None


def _weight(item: pytest.Item) -> int:
    if "ray_cluster" in getattr(item, "fixturenames", ()):
        return WEIGHT_RAY
    return WEIGHT_SLOW if item.get_closest_marker("slow") is not None else 1


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    workerinput = getattr(config, "workerinput", None)
    slices = int(workerinput["workercount"]) if workerinput else 1
    units: dict[str, list[pytest.Item]] = {}
    short: list[pytest.Item] = []
    for item in items:
        unit = _unit_of(item)
        if unit is None:
            short.append(item)
        else:
            units.setdefault(unit, []).append(item)
    # Longest first, each to the lightest slice (ties: collection order, so every worker
    # computes the same order).
    ranked = sorted(units.values(), key=lambda u: -sum(_weight(i) for i in u))
    heads: list[list[pytest.Item]] = [[] for _ in range(slices)]
    loads = [0] * slices
    for group in ranked:
        lightest = loads.index(min(loads))
        heads[lightest].extend(group)
        loads[lightest] += sum(_weight(i) for i in group)
    # Each slice is then filled up with short tests, in collection order, to its share of
    # the count (worksteal splits by count).
    size, extra = divmod(len(items), slices)
    ordered: list[pytest.Item] = []
    rest = iter(short)
    for n, head in enumerate(heads):
        ordered.extend(head)
        fill = size + (1 if n < extra else 0) - len(head)
        ordered.extend(itertools.islice(rest, max(fill, 0)))
    ordered.extend(rest)
    assert len(ordered) == len(items)
    items[:] = ordered


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


def session_shared(tmp_path_factory: pytest.TempPathFactory, name: str) -> Path:
    """A path shared by every process of this test session: under xdist, the session's
    base temp dir that each worker's own base dir sits in; else this process's own."""
    base = tmp_path_factory.getbasetemp()
    return (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / name


def built_once(
    tmp_path_factory: pytest.TempPathFactory, name: str, build: Callable[[Path], None]
) -> Path:
    """A directory ``build`` fills once per test session, whichever process asks first;
    the others wait for it (an exclusive lock) and reuse it. A build that fails is not
    marked built: the next process to ask clears what it left and builds it again."""
    root = session_shared(tmp_path_factory, name)
    done = root / ".built"
    with open(root.with_name(name + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not done.exists():
            shutil.rmtree(root, ignore_errors=True)
            root.mkdir()
            build(root)
            done.touch()
    return root


class DemoRun:
    """A finished `arenad demo` (real opencode, scripted model): its home and output.

    Built once per test session and shared by its processes: ``home`` is only read (SQLite
    takes care of readers in several processes); a test that changes it works on a copy."""

    def __init__(self, home: Path, stdout: str, pristine: Path) -> None:
        self.home = home
        self.stdout = stdout
        self._pristine = pristine

    def copy(self, dest: Path) -> Path:
        """The demo's home copied to ``dest``, for a test that changes it. Its events
        still name the original run dirs (nothing that reads the log reads those). Copied
        from a copy made right after the demo, which nothing opens: a store another test
        process has open is never copied halfway through a checkpoint."""
        shutil.copytree(self._pristine, dest, symlinks=True)
        return dest


def _sockets(directory: str, names: list[str]) -> list[str]:
    """A live socket (the model gateway's, until it has stopped) is not a file to copy."""
    return [n for n in names if stat.S_ISSOCK(os.lstat(os.path.join(directory, n)).st_mode)]


@pytest.fixture(scope="session")
def demo_run(tmp_path_factory: pytest.TempPathFactory) -> DemoRun:
    # One demo per test session: it takes half a minute on a quiet machine (four real
    # opencode runs), and several slow tests read what it left (report, ledger, view),
    # possibly in different xdist workers.
    def build(root: Path) -> None:
        exe = str(Path(sys.executable).parent / "arenad")
        done = subprocess.run(
            [exe, "--home", str(root / "h"), "demo"], capture_output=True, text=True, timeout=900
        )
        assert done.returncode == 0, done.stderr
        shutil.copytree(root / "h", root / "pristine", symlinks=True, ignore=_sockets)
        (root / "stdout.txt").write_text(done.stdout)

    root = built_once(tmp_path_factory, "demo", build)
    return DemoRun(root / "h", (root / "stdout.txt").read_text(), root / "pristine")
