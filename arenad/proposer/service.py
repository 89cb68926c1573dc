"""The one-shot capture behind ``arenad capture-proposer-shots`` (the I/O edge)."""

from __future__ import annotations

from pathlib import Path

from arenad.home import Home, open_store
from arenad.proposer.capture import CaptureCounts, ProposerPaths, scan_once

__all__ = ["capture_proposer_shots"]


async def capture_proposer_shots(
    home: Home, *, worktree_root: Path | None = None, claude_projects_dir: Path | None = None
) -> tuple[ProposerPaths, CaptureCounts]:
    """Capture every receipt and transcript that differs from the log, now."""
    paths = ProposerPaths.for_home(
        home.root, worktree_root=worktree_root, claude_projects_dir=claude_projects_dir
    )
    async with open_store(home) as store:
        return paths, await scan_once(store, paths)
