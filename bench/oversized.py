"""Benchmark: peak memory of the daemon, and of `verify-log`, when an agent prints one huge line.

    .venv/bin/python -m bench.oversized [--quick] [--mib 50]

One cell of a command arm whose agent writes one line of ``--mib`` MiB of NUL bytes (the
issue's case: valid UTF-8, not JSON) and a newline to its stdout, which the daemon ingests
live. The baseline, measured in the same run, is the same cell with a one-line agent
(``echo ok``), so the ratio is what the huge line costs over a run that prints nothing.

Each figure is the peak resident set (``ru_maxrss`` from ``wait4``) of a fresh ``arenad``
process: ``daemon --until-idle`` from submit to idle, then ``verify-log``. Also printed:
the largest event row the line left in the log. ``--quick`` uses 8 MiB.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
from pathlib import Path

GIT_ENV = {
    "GIT_AUTHOR_NAME": "bench",
    "GIT_AUTHOR_EMAIL": "bench@arenad",
    "GIT_COMMITTER_NAME": "bench",
    "GIT_COMMITTER_EMAIL": "bench@arenad",
}
ARENAD = [str(Path(sys.executable).parent / "arenad")]


def make_repo(path: Path) -> str:
    env = {**os.environ, **GIT_ENV}
    path.mkdir(parents=True)
    subprocess.run(["git", "-C", str(path), "init", "-q", "-b", "main"], check=True, env=env)
    (path / "a.txt").write_text("a\n")
    subprocess.run(["git", "-C", str(path), "add", "-A"], check=True, env=env)
    subprocess.run(["git", "-C", str(path), "commit", "-q", "-m", "base"], check=True, env=env)
    done = subprocess.run(
        ["git", "-C", str(path), "rev-parse", "HEAD"], check=True, capture_output=True, text=True
    )
    return done.stdout.strip()


def campaign(path: Path, repo: Path, base: str, script: str) -> Path:
    lines = [
        'name = "big"',
        'split = "dev"',
        "[materializer]",
        'kind = "git"',
        f"source = {json.dumps(str(repo))}",
        "[[instances]]",
        'instance_id = "i1"',
        f'base_commit = "{base}"',
        'problem_statement = "print"',
        'verify_cmd = "true"',
        "[[arms]]",
        'name = "CMD"',
        'kind = "command"',
        f"argv = {json.dumps(['bash', '-c', script])}",
        "uses_model = false",
        "timeout_s = 600",
    ]
    path.write_text("\n".join(lines) + "\n")
    return path


def peak_mib(argv: list[str], home: Path) -> float:
    """Run ``arenad --home HOME ARGV...`` and return its peak RSS in MiB (it must succeed)."""
    proc = subprocess.Popen(
        [*ARENAD, "--home", str(home), *argv],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    err = proc.stderr.read().decode() if proc.stderr is not None else ""
    if proc.returncode != 0:
        raise SystemExit(f"arenad {' '.join(argv)} exited {proc.returncode}: {err[-2000:]}")
    return usage.ru_maxrss / 1024


def largest_row(home: Path) -> tuple[str, int]:
    with sqlite3.connect(home / "arenad.db") as db:
        tag, size = db.execute(
            "SELECT tag, length(payload) FROM events ORDER BY length(payload) DESC LIMIT 1"
        ).fetchone()
    return str(tag), int(size)


def one(root: Path, repo: Path, base: str, script: str) -> tuple[float, float, tuple[str, int]]:
    home = root / "home"
    subprocess.run([*ARENAD, "--home", str(home), "init"], check=True, capture_output=True)
    camp = campaign(root / "c.toml", repo, base, script)
    subprocess.run(
        [*ARENAD, "--home", str(home), "submit", str(camp)], check=True, capture_output=True
    )
    daemon = peak_mib(["daemon", "--until-idle"], home)
    verify = peak_mib(["verify-log"], home)
    return daemon, verify, largest_row(home)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="an 8 MiB line: a smoke run")
    parser.add_argument("--mib", type=int, default=None, help="the line's size (default 50)")
    args = parser.parse_args()
    mib = args.mib or (8 if args.quick else 50)
    root = Path(tempfile.mkdtemp(prefix="arenad-bench-oversized-"))
    try:
        repo = root / "repo"
        base = make_repo(repo)
        (root / "base").mkdir()
        (root / "big").mkdir()
        base_daemon, base_verify, base_row = one(root / "base", repo, base, "echo ok")
        big_daemon, big_verify, big_row = one(
            root / "big", repo, base, f"head -c {mib << 20} /dev/zero; echo"
        )
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(f"arenad oversized-line benchmark: one line of {mib} MiB of NUL bytes on stdout")
    print(f"{'':28}{'baseline (echo ok)':>20}{f'{mib} MiB line':>16}{'ratio':>8}")
    print(
        f"{'daemon peak RSS':28}{base_daemon:>16.1f} MiB{big_daemon:>12.1f} MiB"
        f"{big_daemon / base_daemon:>8.2f}"
    )
    print(
        f"{'verify-log peak RSS':28}{base_verify:>16.1f} MiB{big_verify:>12.1f} MiB"
        f"{big_verify / base_verify:>8.2f}"
    )
    print(f"{'largest event row':28}{base_row[1]:>14,} B  {big_row[1]:>10,} B ({big_row[0]})")


if __name__ == "__main__":
    main()
