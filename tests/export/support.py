"""Running `arenad export` as a user does, and comparing what it wrote."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ARENAD = str(Path(sys.executable).parent / "arenad")


def run_export(home: Path, fmt: str, out: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [ARENAD, "--home", str(home), "export", fmt, str(out), *args],
        capture_output=True,
        text=True,
        timeout=600,
    )


def export_ok(home: Path, fmt: str, out: Path, *args: str) -> str:
    done = run_export(home, fmt, out, *args)
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""  # not a terminal: no progress line
    return done.stdout


def tree_bytes(root: Path) -> dict[str, bytes]:
    """Every file under ``root`` by its relative path, with its bytes."""
    return {
        str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()
    }
