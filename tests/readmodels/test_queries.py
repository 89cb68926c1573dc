"""The scheduler's query of the cells read model, on a real store."""

from __future__ import annotations

from pathlib import Path

from arenad.cell.machine import TERMINAL
from arenad.home import Home, open_store
from arenad.readmodels.queries import RUNNABLE_WHERE, runnable_cells
from events.cell import CellFailed, CellSubmitted
from tests.events.samples import make_spec


def test_the_runnable_clause_names_exactly_the_terminal_states() -> None:
    for state in TERMINAL:
        assert f"'{state}'" in RUNNABLE_WHERE
    assert RUNNABLE_WHERE.count("'") == 2 * len(TERMINAL)


async def test_runnable_cells_oldest_first_excluding_and_limited(tmp_path: Path) -> None:
    async with open_store(Home(tmp_path), create=True) as store:
        for i in range(5):
            spec = make_spec(instance_id=f"i{i}")
            await store.append(f"cell/{spec.cell_id}", 0, [CellSubmitted(spec=spec)])
        done = make_spec(instance_id="i1").cell_id
        await store.append(
            f"cell/{done}",
            1,
            [CellFailed(attempt=1, stage="x", error="e", classification="infrastructure")],
        )
        db = store.connection
        ids = [c for c, _ in await runnable_cells(db)]
        assert ids == [make_spec(instance_id=f"i{i}").cell_id for i in (0, 2, 3, 4)]
        some = await runnable_cells(db, exclude=[ids[0]], limit=2)
        assert [c for c, _ in some] == ids[1:3]
        plan = await db.execute_fetchall(
            f"EXPLAIN QUERY PLAN SELECT cell_id FROM cells WHERE {RUNNABLE_WHERE}"
            " ORDER BY submitted_at_ms, cell_id LIMIT 10"
        )
        assert any("cells_runnable" in str(row) for row in plan), plan
