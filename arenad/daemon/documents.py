"""At daemon start: write again the run-dir documents a crash (or a user) lost.

result.json is written after its cell's recovery commit, so a daemon that dies in
between leaves a recovered cell without one, and nothing would write it later (terminal
cells are not driven). The document is a projection of the log
(:mod:`arenad.arms.documents`), so the next daemon writes it from there: same log, same
bytes. Only a run dir that still exists is completed; one a user deleted comes back
with ``arenad export-artifacts``.
"""

from __future__ import annotations

import asyncio
import logging

from arenad.arms.documents import (
    RESULT_JSON,
    document_streams,
    documented_attempt,
    has_result_json,
    result_json_bytes,
    write_documents_step,
)
from arenad.cell.kinds import kind_of
from arenad.home import Home
from arenad.readmodels.view import CellsView
from arenad.runs.executor import Executor
from arenad.store.base import EventStore

log = logging.getLogger("arenad.daemon")


async def rewrite_missing_documents(
    store: EventStore, cells: CellsView, executor: Executor, home: Home
) -> list[str]:
    """Write result.json for every recovered supervisor cell whose run dir lacks it; the
    paths written. Only the cells whose file is missing are read from the log (a stat per
    recovered supervisor cell, then one read of its documents' streams and the attempts
    fold). Run dirs on other machines (a cluster executor) are left to ``arenad
    export-artifacts``: looking at each would start a site per finished cell."""
    if executor.kind != "local":
        return []
    candidates = {
        str(r["cell_id"]): (
            int(r["attempt"]),
            kind_of(str(r["arm_kind"])),
            home.run_dir(
                str(r["campaign"]),
                int(r["rep"]),
                int(r["attempt"]),
                str(r["instance_id"]),
                str(r["arm"]),
            ),
        )
        for r in await cells.rows()
        if r["state"] == "recovered" and kind_of(str(r["arm_kind"])).result_document
    }

    def lacking() -> list[str]:
        return [
            c
            for c, (_, _, d) in candidates.items()
            if d.is_dir() and not (d / RESULT_JSON).exists()
        ]

    written: list[str] = []
    for cell_id in await asyncio.to_thread(lacking):
        n, kind, _ = candidates[cell_id]
        found = documented_attempt(await store.read_streams(document_streams(cell_id, n, kind)), n)
        if found is None:
            continue
        spec, attempt = found
        if not has_result_json(spec, attempt) or attempt.run_dir is None:
            continue
        doc = result_json_bytes(spec, attempt)
        site = await executor.site(cell_id, n, spec)
        written += await site.call_blocking(
            write_documents_step, attempt.run_dir, {RESULT_JSON: doc}
        )
        log.info("%s: wrote its missing %s from the log", cell_id, RESULT_JSON)
    return written
