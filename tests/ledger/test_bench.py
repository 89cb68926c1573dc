"""A smoke run of bench/ledger.py: tiny sizes, real store and subprocesses, no timings."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.ledger import main


def _expected_lines(cells: int) -> int:
    # Solo: one agent line. Supervisor (every third cell): the supervisor line, two
    # worker sessions, and a gap line for the unmatched cwd of every fourth cell.
    return sum(1 if i % 3 != 2 else 3 + (i % 4 == 3) for i in range(cells))


def test_bench_ledger_runs_end_to_end(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    results = main(["--small", "4", "--large", "12", "--messages", "5", "--keep", str(tmp_path)])
    for size in (4, 12):
        row = results[str(size)]
        assert row["lines"] == _expected_lines(size)
        assert row["stats"]["lines"] == row["lines"]
        assert row["events"] > 0 and row["projection_rss_kib"] > 0
        assert (tmp_path / f"{size}.jsonl").read_text().count("\n") == row["lines"]
    assert results["rss_ratio"] > 0
    out = capsys.readouterr().out
    assert "proj ev/s" in out and "projection peak RSS 12 / 4 cells" in out
