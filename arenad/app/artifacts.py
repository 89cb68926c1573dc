"""`arenad export-artifacts`: write again the run-dir documents that are projections of
the log (result.json, judge.json; :mod:`arenad.arms.documents`), for the named cells or
all, atomically, making a run dir a user deleted. Nothing is appended: same log, same
bytes as the daemon wrote."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path

from arenad.arms.documents import document_streams, documented_attempt, run_documents
from arenad.atomic import write_atomically
from arenad.cell.kinds import kind_of_arm
from arenad.errors import UserError
from arenad.home import Home, open_store
from arenad.readmodels.view import cells_view


async def export_artifacts(home: Home, cell_ids: Sequence[str]) -> list[str]:
    """The paths written, cell by cell (in the order asked, else the status order)."""
    async with open_store(home) as store:
        view = cells_view(store)
        ids = list(dict.fromkeys(cell_ids)) or [str(r["cell_id"]) for r in await view.rows()]
        states = await view.states(ids)
        unknown = [c for c in ids if c not in states]
        if unknown:
            raise UserError(f"no such cell: {unknown[0]}")
        written: list[str] = []
        for cell_id in ids:
            state = states[cell_id]
            if state.run_dir is None:
                continue  # never materialized: no run dir, no document
            # The current attempt, as the attempts fold records it from its documents' streams.
            n = state.attempt
            streams = document_streams(cell_id, n, kind_of_arm(state.spec.arm))
            found = documented_attempt(await store.read_streams(streams), n)
            if found is None:
                continue
            spec, attempt = found
            run_dir = attempt.run_dir
            if run_dir is None:
                continue
            for name, data in run_documents(spec, attempt).items():
                path = Path(run_dir) / name
                await asyncio.to_thread(write_atomically, path, data)
                written.append(str(path))
        return written
