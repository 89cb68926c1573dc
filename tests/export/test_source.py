"""The export's reading of the log: the ledger's own lines, as the log stood at its head."""

from __future__ import annotations

import json
from pathlib import Path

from arenad.export.source import cells_of, log_head
from arenad.home import Home, open_store
from arenad.ledger.rollout import serialize_rollout_line_bytes
from arenad.ledger.service import project_store
from bench.ledger import build


async def test_lines_are_the_ledgers(tmp_path: Path) -> None:
    await build(tmp_path / "h", 0, 6, 4)
    async with open_store(Home(tmp_path / "h")) as store:
        await project_store(store, tmp_path / "ledger.jsonl")
        head = await log_head(store)
        lines = [
            serialize_rollout_line_bytes(la.line)
            async for cell in cells_of(store, head)
            for la in cell.lines
        ]
    assert lines == (tmp_path / "ledger.jsonl").read_bytes().splitlines()
    assert head.seq > 0 and head.hash is not None and len(head.hash) == 64


async def test_rows_after_the_head_are_left_out(tmp_path: Path) -> None:
    await build(tmp_path / "h", 0, 3, 4)
    async with open_store(Home(tmp_path / "h")) as store:
        head = await log_head(store)
        before = [
            (cell.cell_id, [la.lineage for la in cell.lines])
            async for cell in cells_of(store, head)
        ]
    await build(tmp_path / "h", 3, 6, 4)  # a daemon appending while an export runs
    async with open_store(Home(tmp_path / "h")) as store:
        after = [
            (cell.cell_id, [la.lineage for la in cell.lines])
            async for cell in cells_of(store, head)
        ]
        assert await store.last_seq() > head.seq
    assert after == before
    for _, lineages in after:
        for lineage in lineages:
            assert lineage.first_seq <= lineage.last_seq <= head.seq == lineage.head_seq


async def test_progress_counts_cells(tmp_path: Path) -> None:
    await build(tmp_path / "h", 0, 40, 2)
    seen: list[tuple[int, int]] = []
    async with open_store(Home(tmp_path / "h")) as store:
        head = await log_head(store)
        n = len([c async for c in cells_of(store, head, progress=lambda d, t: seen.append((d, t)))])
    assert n == 40 and seen == [(32, 40), (40, 40)]


async def test_every_format_same_bytes_twice(tmp_path: Path) -> None:
    from arenad.export.service import FORMATS, export
    from tests.export.support import tree_bytes

    await build(tmp_path / "h", 0, 9, 4)
    for fmt in FORMATS:
        if fmt == "atif":
            continue
        a = await export(Home(tmp_path / "h"), fmt, tmp_path / fmt / "a")
        await export(Home(tmp_path / "h"), fmt, tmp_path / fmt / "b")
        assert tree_bytes(tmp_path / fmt / "a") == tree_bytes(tmp_path / fmt / "b"), fmt
        manifest = json.loads((tmp_path / fmt / "a" / "export.json").read_text())
        assert manifest == json.loads(json.dumps(a))
