"""`arenad campaigns` prints the same bytes (table and --json) whether its spend comes
from the spend read model or from the fold of the whole log, and after `arenad rebuild`."""

from __future__ import annotations

import asyncio
import json
import sqlite3
from pathlib import Path

from arenad.home import Home, open_store
from arenad.store.base import AppendRequest
from events import cell as ev
from events.control import CampaignSubmitted
from events.ingest import LineIngested
from tests.daemon.support import cli
from tests.events.samples import make_spec
from tests.report.arena_log import Tick, arena_requests, run_events


def _step(cost: float, offset: int) -> LineIngested:
    raw = json.dumps({"type": "step_finish", "part": {"type": "step-finish", "cost": cost}})
    return LineIngested(
        source="stdout", path="oc.jsonl", offset=offset, length=len(raw), raw=raw,
        kind="step_finish",
    )  # fmt: skip


async def _build(root: Path) -> None:
    """The arena (recovered, failed, retried and never-started cells), its campaign's arms'
    kinds, and a running cell whose live cost is in its ingested lines."""
    kinds = {"ALPHA": "solo", "BETA": "solo"}
    submitted = CampaignSubmitted(
        name="arena", source_path="/a.toml", spec_sha256="0", cell_ids=[], arm_kinds=kinds
    )
    running = make_spec(campaign="arena", instance_id="i5", arm="ALPHA", rep=0)
    started = run_events(1, "pass", wall_s=1.0, cost=0.0, tokens=(1, 1))[:2]
    async with open_store(Home(root), clock=Tick(), create=True) as store:
        await store.append_many([AppendRequest("campaign/arena", 0, [submitted])])
        for request in arena_requests():
            await store.append_many([request])
        await store.append_many(
            [
                AppendRequest(
                    f"cell/{running.cell_id}", 0, [ev.CellSubmitted(spec=running), *started]
                ),
                AppendRequest(f"ingest/{running.cell_id}/1", 0, [_step(0.0625, 0)]),
            ]
        )


def _outputs(root: Path) -> tuple[str, str]:
    table, as_json = cli(root, "campaigns"), cli(root, "campaigns", "--json")
    assert table.returncode == 0, table.stderr
    assert as_json.returncode == 0, as_json.stderr
    return table.stdout, as_json.stdout


def test_campaigns_prints_the_folds_bytes_from_the_read_model(tmp_path: Path) -> None:
    asyncio.run(_build(tmp_path))
    from_model = _outputs(tmp_path)
    figures = {c["name"]: c for c in json.loads(from_model[1])}
    # Every part of the spend is exercised: recovered, live, open and running attempts.
    arena = figures["arena"]
    assert arena["recovered_usd"] > 0 and arena["live_usd"] == 0.0625
    assert arena["running"] == 1 and arena["attempts"] > arena["running"]
    # The model marked incomplete: the same command folds the whole log instead.
    with sqlite3.connect(tmp_path / "arenad.db") as db:
        db.execute("INSERT INTO spend_incomplete (id) VALUES (1)")
    assert _outputs(tmp_path) == from_model
    assert cli(tmp_path, "rebuild").returncode == 0
    with sqlite3.connect(tmp_path / "arenad.db") as db:
        assert db.execute("SELECT COUNT(*) FROM spend_incomplete").fetchone() == (0,)
    assert _outputs(tmp_path) == from_model
