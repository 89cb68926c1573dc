"""What every executor does alike on the machine a run lives on: its activity marks (the
outputs' sizes, the cap markers' mtimes) read from real files, missing ones as -1."""

from __future__ import annotations

import os
from pathlib import Path

from arenad.executors.spawn import activity
from arenad.runs.files import RunFiles, capped_marker


def test_activity_reads_sizes_and_cap_markers(tmp_path: Path) -> None:
    files = RunFiles(
        run_dir=str(tmp_path), stdout=str(tmp_path / "out"), stderr=str(tmp_path / "err")
    )
    # Nothing written yet: every mark is missing.
    assert activity(files) == (-1, -1, -1, -1)
    Path(files.stdout).write_bytes(b"12345")
    Path(files.stderr).write_bytes(b"")
    marker = capped_marker(files.stdout)
    Path(marker).write_bytes(b"")
    os.utime(marker, ns=(1_000, 2_000))
    assert activity(files) == (5, 0, 2_000, -1)
