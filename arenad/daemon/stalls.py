"""No silent stall: a daemon step that passes its limit is logged, naming the cell and
the step, and again each time it has taken twice as long (limits and their rationale:
:mod:`arenad.cell.overdue`). Nothing is stopped here; the warning is the point."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator

from arenad.cell.overdue import STEP_LIMITS_S

log = logging.getLogger("arenad.stalls")


@contextlib.asynccontextmanager
async def reported(cell_id: str, step: str, limit_s: float | None = None) -> AsyncIterator[None]:
    """Log a warning when the block takes longer than ``limit_s`` (default: the step's
    documented limit), then at each doubling of that, until it ends."""
    loop = asyncio.get_running_loop()
    started = loop.time()
    limit = STEP_LIMITS_S[step] if limit_s is None else limit_s
    handle: asyncio.TimerHandle | None = None

    def warn(next_after: float) -> None:
        nonlocal handle
        log.warning(
            "%s: %s has taken %.0f s (its limit is %.0f s); still waiting",
            cell_id,
            step,
            loop.time() - started,
            limit,
        )
        handle = loop.call_later(next_after, warn, next_after * 2)

    handle = loop.call_later(max(limit, 0.0), warn, max(limit, 0.001))
    try:
        yield
    finally:
        handle.cancel()
