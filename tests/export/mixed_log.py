"""A log with every arm kind for the export tests: the demo's solo cells (real opencode
against the scripted model, ``tests.conftest.demo_run``) and, appended to a copy of it,
campaign ``mixed``: supervisor cells (two worker sessions each, one with a worker cwd no
session matched) and command cells, recorded as the daemon records them
(``bench.ledger.cell_requests``), each verified with its patch captured in the log;
plus a command cell whose run failed before verification, and one whose patch the log
kept only the head of — two records a predictions file cannot carry.
"""

from __future__ import annotations

import asyncio
import hashlib
from pathlib import Path
from typing import Any

import msgspec

from arenad.home import Home, open_store
from arenad.store.base import AppendRequest
from bench.ledger import cell_requests
from events import cell as ev
from events.specs import CommandArm

MIXED = "mixed"
PATCH = "diff --git a/w.py b/w.py\n--- a/w.py\n+++ b/w.py\n@@ -1 +1 @@\n-x = 1\n+x = 2\n"


def _patch(text: str, cut: bool = False) -> ev.PatchCaptured:
    data = text.encode()
    kept = data[:20] if cut else data
    return ev.PatchCaptured(
        attempt=1,
        patch=ev.TextExcerpt(
            text=kept.decode(),
            kept_bytes=len(kept),
            size=len(data),
            sha256=hashlib.sha256(data).hexdigest(),
            cut="head" if cut else "none",
        ),
    )


def _retarget(requests: list[AppendRequest], i: int, kind: str) -> list[AppendRequest]:
    """``bench.ledger``'s cell ``i`` moved to campaign ``mixed`` (as a command cell for
    ``kind == "command"``), its patch captured (cut for the fifth cell); the fourth
    command cell's run fails before verification instead."""
    out: list[AppendRequest] = []
    for req in requests:
        events: list[Any] = []
        for e in req.events:
            if isinstance(e, ev.CellSubmitted):
                spec = e.spec
                arm = spec.arm
                if kind == "command":
                    arm = CommandArm(name="CMD", argv=["./agent.sh"], model="local/cmd")
                spec = msgspec.structs.replace(spec, campaign=MIXED, arm=arm)
                e = ev.CellSubmitted(spec=spec)
            if kind == "command" and i == 4 and isinstance(e, ev.CellVerified):
                events.append(
                    ev.CellFailed(
                        attempt=1,
                        stage="verify",
                        error="verify crashed",
                        classification="infrastructure",
                    )
                )
                break
            events.append(e)
            if isinstance(e, ev.CellVerified):
                events.append(_patch(PATCH, cut=(i == 5)))
        stream = req.stream.replace(":", "@", 0)
        cell = stream.split("/", 1)[1].split("/")[0]
        new_cell = cell.replace("bench:", f"{MIXED}:", 1)
        if kind == "command":
            new_cell = new_cell.replace(":SOLO:", ":CMD:")
        out.append(AppendRequest(stream.replace(cell, new_cell, 1), 0, events))
    return out


def mixed_requests() -> list[AppendRequest]:
    requests: list[AppendRequest] = []
    for i in (2, 5, 8):  # supervisor cells (i % 3 == 2)
        requests += _retarget(cell_requests(i, 6), i, "supervisor")
    for i in (0, 1, 3, 4):  # command cells; 4: failed before verification
        requests += _retarget(cell_requests(i, 6), i, "command")
    return requests


async def _append(home: Path) -> None:
    async with open_store(Home(home)) as store:
        await store.append_many(mixed_requests())


def add_mixed(home: Path) -> None:
    asyncio.run(_append(home))
