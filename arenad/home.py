"""The arenad home: where the store and the artifact tree live.

    <home>/arenad.db                 the event log (+ -wal, -shm)
    <home>/daemon.lock               the daemon lease (flock)
    <home>/campaigns/<campaign>/rep-<r>/attempt-<a>/runs/<iid>/<ARM>/   one cell attempt
    <home>/campaigns/<campaign>/rep-<r>/attempt-<a>/patches/<iid>.<arm>.patch
    <home>/campaigns/<campaign>/rep-<r>/attempt-<a>/git/<iid>.<arm>/     its sealed git root
    <home>/proposer-shots/           watched proposer shot receipts

Inside an attempt dir the reference's names are kept (runs/<iid>/<ARM>/…, patches/…),
so existing tooling reads them; rep and attempt dirs above keep every run's files.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import NamedTuple

import msgspec

from arenad.clock import Clock, system_clock
from arenad.errors import UserError
from arenad.readmodels.cells import CellsProjector
from arenad.readmodels.report_facts import ReportFactsProjector
from arenad.readmodels.spend import SpendProjector
from arenad.store.faults import FaultPlan
from arenad.store.sqlite import SqliteEventStore, Synchronous
from events.specs import CellSpec

DB_NAME = "arenad.db"


class Home(msgspec.Struct, frozen=True):
    root: Path

    @property
    def db_path(self) -> Path:
        return self.root / DB_NAME

    @property
    def lock_path(self) -> Path:
        return self.root / "daemon.lock"

    def attempt_root(self, campaign: str, rep: int, attempt: int) -> Path:
        return self.root / "campaigns" / campaign / f"rep-{rep}" / f"attempt-{attempt}"

    def run_dir(self, campaign: str, rep: int, attempt: int, instance_id: str, arm: str) -> Path:
        return self.attempt_root(campaign, rep, attempt) / "runs" / instance_id / arm

    def git_root(self, campaign: str, rep: int, attempt: int, instance_id: str, arm: str) -> Path:
        """The cell attempt's daemon-owned git state (arenad.materialize.seal): outside its
        run dir, so the sandbox hides it from the agent."""
        return self.attempt_root(campaign, rep, attempt) / "git" / f"{instance_id}.{arm.lower()}"

    def patch_path(self, campaign: str, rep: int, attempt: int, instance_id: str, arm: str) -> Path:
        return (
            self.attempt_root(campaign, rep, attempt)
            / "patches"
            / f"{instance_id}.{arm.lower()}.patch"
        )

    def attempt_paths(self, spec: CellSpec, attempt: int) -> AttemptPaths:
        """A cell attempt's places, computed from its spec in one spot."""
        where = (spec.campaign, spec.rep, attempt, spec.instance.instance_id, spec.arm.name)
        run_dir = self.run_dir(*where)
        return AttemptPaths(
            attempt=attempt,
            run_dir=run_dir,
            workspace=run_dir / "ws",
            git_root=self.git_root(*where),
            patch_path=self.patch_path(*where),
        )


class AttemptPaths(NamedTuple):
    """Where one attempt of a cell lives: its run dir (the agent's) with its workspace in
    it, the daemon's git state for it, and its stored patch."""

    attempt: int
    run_dir: Path
    workspace: Path
    git_root: Path
    patch_path: Path


def resolve_home(option: str | None) -> Home:
    raw = option or os.environ.get("ARENAD_HOME") or "./arenad-home"
    return Home(Path(raw).expanduser().resolve())


def require_initialized(home: Home) -> None:
    if not home.db_path.exists():
        raise UserError(f"no arenad store at {home.db_path}; run `arenad --home {home.root} init`")


@asynccontextmanager
async def open_store(
    home: Home,
    *,
    clock: Clock = system_clock,
    synchronous: Synchronous = "NORMAL",
    create: bool = False,
    faults: FaultPlan | None = None,
    lock_wait_s: float = 10.0,
) -> AsyncIterator[SqliteEventStore]:
    """The home's store; an append waits up to ``lock_wait_s`` for another writer's
    transaction (SQLite's busy timeout) before it fails."""
    if not create:
        require_initialized(home)
    home.root.mkdir(parents=True, exist_ok=True)
    store = await SqliteEventStore.open(
        home.db_path,
        clock=clock,
        projectors=[CellsProjector(), SpendProjector(), ReportFactsProjector()],
        synchronous=synchronous,
        faults=faults,
        busy_timeout_ms=int(lock_wait_s * 1000),
    )
    try:
        yield store
    finally:
        await store.close()
