"""`arenad submit`: validate a campaign completely, then append its new cells at once.

A campaign is validated in one pass over its instances before anything is written (see
:mod:`arenad.campaign`), then its cells are made, checked against the log and appended a
batch at a time inside one transaction: memory stays flat in the number of cells (only
the ids are kept, for the campaign's record), and the campaign appears whole or not at
all. ``dry_run`` does all of that but the append.

The instances file is read twice (validated, then made into cells), each row parsed by
msgspec; the preflight reads what the validating pass collected. The store pipelines the
batches (a batch's SQL runs while the next is made and encoded).

The write lock is held for the whole transaction, as "all or nothing" asks: at 100 000
cells that is seconds (the raw ``executemany`` of the same rows alone takes several), so a
daemon appending meanwhile waits that long (its appends wait up to
``arenad.daemon.daemon.DAEMON_LOCK_WAIT_S`` rather than fail a cell's step). Holding the
lock under a second at that size needs the cells written in transactions of their own with
the daemon gated on the campaign's record (the runnable query and the read models counting
a campaign only once its ``campaign.submitted`` is in the log, a rerun completing an
interrupted submit): not done here (issue 33).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Sequence
from pathlib import Path

import msgspec

from arenad.app.preflight import arm_problems, commit_problems
from arenad.budget.cap import fold_budget
from arenad.campaign import Campaign, load_campaign, spec_sha256
from arenad.containers.docker import missing_images
from arenad.errors import UserError
from arenad.home import Home, open_store
from arenad.readmodels.view import CellsView, cells_view
from arenad.runs import netns
from arenad.sandbox.confine import host_problem, share_problem, user_homes
from arenad.sandbox.secrets import wrapper_problem
from arenad.store.base import AppendRequest
from events.cell import CellSubmitted
from events.control import CampaignSubmitted, InstanceSelection
from events.specs import CellSpec
from events.streams import campaign_stream, cell_stream

# Problems listed by a refused submit (then a count of the rest).
MAX_PROBLEMS = 20

# Cells per batch: a few MiB of specs at SWE-bench row sizes, and one lookup of their states.
BATCH_CELLS = 500

Progress = Callable[[int, int], None]
"""Called as cells are checked and written: (cells done, cells in the campaign)."""


class ArmPlan(msgspec.Struct, frozen=True):
    name: str
    kind: str
    cells: int


class SubmitPlan(msgspec.Struct, frozen=True, kw_only=True):
    """What the campaign expands to (what a dry run prints)."""

    campaign: str
    cells: int
    instances: int
    rows: int
    reps: int
    arms: list[ArmPlan]
    first_cells: list[str]
    verify: list[str]
    selection: InstanceSelection
    budget_usd: float | None
    abort_running: bool
    notes: list[str]


class SubmitResult(msgspec.Struct, frozen=True, kw_only=True):
    campaign: str
    added: int
    already: int
    plan: SubmitPlan
    dry_run: bool = False


def check_runnable(home: Home, path: Path, campaign: Campaign) -> None:
    """Refuse (UserError) a campaign whose every cell would fail on this machine: no
    bubblewrap for a sandboxed campaign, a secrets wrapper that is not there, a share that
    would show the arenad home."""
    problems = []
    if campaign.sandbox.kind == "bwrap":
        problems.append(host_problem())
    if campaign.sandbox.network != "host":
        problems.append(netns.problem())
    if campaign.secrets is not None:
        problems.append(wrapper_problem(campaign.secrets))
    shares = sorted(set(campaign.sandbox.read_only))
    homes = user_homes()
    for share in shares:
        problem = share_problem(share, home_root=str(home.root), secrets_dir=None, homes=homes)
        problems.append(None if problem is None else f"[sandbox] read_only: {problem}")
    if campaign.images:
        # Every cell of an instance whose image is missing would fail at its first step.
        problems.extend(missing_images(campaign.images))
    found = [p for p in problems if p is not None]
    if not found:
        # What would fail each cell at its first step: a source or base commit that is not
        # there, an agent the sandbox would not show (checked only once the host can run).
        # (Collected by the validating pass: no pass over the instances of its own.)
        found = [
            *commit_problems(campaign.local_sources),
            *arm_problems(campaign.first_cells, str(home.root)),
        ]
    if found:
        shown = [f"{path}: {p}" for p in found[:MAX_PROBLEMS]]
        if len(found) > MAX_PROBLEMS:
            shown.append(f"{path}: ... and {len(found) - MAX_PROBLEMS} more problem(s)")
        raise UserError("\n".join(shown) + "; nothing was appended")


def plan_of(campaign: Campaign, notes: Sequence[str] = ()) -> SubmitPlan:
    per_arm = campaign.instance_count * campaign.reps
    return SubmitPlan(
        campaign=campaign.name,
        cells=campaign.cell_count,
        instances=campaign.instance_count,
        rows=campaign.selection.rows,
        reps=campaign.reps,
        arms=[ArmPlan(name, kind, per_arm) for name, kind in campaign.arm_kinds.items()],
        first_cells=campaign.preview_cell_ids,
        verify=campaign.preview_verify,
        selection=campaign.selection,
        budget_usd=campaign.budget.max_usd if campaign.budget is not None else None,
        abort_running=campaign.budget.abort_running if campaign.budget is not None else False,
        notes=list(notes),
    )


def _budget_notes(campaign: Campaign) -> list[str]:
    unknown = campaign.cost_unknown_arms
    if campaign.budget is None or not unknown:
        return []
    return [
        f"arm(s) {', '.join(unknown)} cannot report cost: their spend is unknown and does not"
        f" count against the ${campaign.budget.max_usd:g} cap"
    ]


class _Tally:
    def __init__(self) -> None:
        self.new: list[str] = []
        self.already = 0


async def _checked_batches(
    campaign: Campaign,
    cells: CellsView,
    path: Path,
    tally: _Tally,
    progress: Progress | None,
) -> AsyncIterator[list[AppendRequest]]:
    """The campaign's new cells, a batch at a time; a cell already in the log must have the
    same spec (else a UserError, and the transaction drawing these rolls back)."""
    batch: list[CellSpec] = []
    done = 0

    async def flush() -> list[AppendRequest]:
        nonlocal done
        existing = await cells.states([spec.cell_id for spec in batch])
        requests = []
        for spec in batch:
            digest = spec_sha256(spec)
            known = existing.get(spec.cell_id)
            if known is not None:
                if spec_sha256(known.spec) != digest:
                    raise UserError(
                        f"{path}: cell {spec.cell_id} was already submitted with a different"
                        " spec; give the changed campaign a new name (nothing was appended)"
                    )
                tally.already += 1
                continue
            tally.new.append(spec.cell_id)
            requests.append(
                AppendRequest(
                    cell_stream(spec.cell_id), 0, [CellSubmitted(spec=spec, spec_sha256=digest)]
                )
            )
        done += len(batch)
        batch.clear()
        if progress is not None:
            progress(done, campaign.cell_count)
        return requests

    for spec in campaign.iter_cells():
        batch.append(spec)
        if len(batch) >= BATCH_CELLS:
            yield await flush()
    if batch:
        yield await flush()


async def submit_campaign(
    home: Home, path: Path, *, dry_run: bool = False, progress: Progress | None = None
) -> SubmitResult:
    campaign = load_campaign(path)  # every check of the file happens before anything else
    check_runnable(home, path, campaign)
    notes = _budget_notes(campaign)
    plan = plan_of(campaign, notes)
    if dry_run and not home.db_path.exists():
        # Nothing to compare with: every cell would be new.
        return SubmitResult(
            campaign=campaign.name, added=campaign.cell_count, already=0, plan=plan, dry_run=True
        )
    async with open_store(home) as store:
        stream = campaign_stream(campaign.name)
        budget = fold_budget(campaign.name, await store.read_stream(stream))
        if (
            campaign.budget is not None
            and budget.cap_usd is not None
            and campaign.budget.max_usd != budget.cap_usd
        ):
            raise UserError(
                f"{path}: [budget] max_usd = {campaign.budget.max_usd:g}, but campaign"
                f" {campaign.name!r} is capped at ${budget.cap_usd:g}; change a cap with"
                f" `arenad set-budget {campaign.name} USD` (nothing was appended)"
            )
        cells = cells_view(store)
        tally = _Tally()
        batches = _checked_batches(campaign, cells, path, tally, progress)
        if dry_run:
            async for _ in batches:
                pass
        else:

            async def with_record() -> AsyncIterator[list[AppendRequest]]:
                async for batch in batches:
                    yield batch
                if tally.new:
                    yield [AppendRequest(stream, None, [_record(campaign, tally.new)])]

            # One transaction: the campaign's cells appear together or not at all.
            await store.append_batches(with_record())
    return SubmitResult(
        campaign=campaign.name,
        added=len(tally.new),
        already=tally.already,
        plan=plan,
        dry_run=dry_run,
    )


def _record(campaign: Campaign, cell_ids: list[str]) -> CampaignSubmitted:
    return CampaignSubmitted(
        name=campaign.name,
        source_path=campaign.source_path,
        spec_sha256=campaign.spec_sha256,
        cell_ids=cell_ids,
        max_parallel=campaign.max_parallel,
        budget_usd=campaign.budget.max_usd if campaign.budget is not None else None,
        abort_running=campaign.budget.abort_running if campaign.budget is not None else False,
        selection=campaign.selection,
        arm_kinds=campaign.arm_kinds,
        breaker_after=campaign.breaker_after,
        expected_usd_per_attempt=(
            campaign.budget.expected_usd_per_attempt if campaign.budget is not None else None
        ),
    )
