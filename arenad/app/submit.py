"""`arenad submit`: validate a campaign completely, then append its new cells at once."""

from __future__ import annotations

from pathlib import Path

import msgspec

from arenad.campaign import Campaign, load_campaign, spec_sha256
from arenad.errors import UserError
from arenad.home import Home, open_store
from arenad.readmodels.view import cells_view
from arenad.sandbox.confine import host_problem, share_problem, user_homes
from arenad.sandbox.secrets import wrapper_problem
from arenad.store.base import AppendRequest
from events.cell import CellSubmitted
from events.control import CampaignSubmitted
from events.streams import campaign_stream, cell_of, cell_stream


class SubmitResult(msgspec.Struct, frozen=True):
    campaign: str
    added: list[str]
    already: int


def check_runnable(home: Home, path: Path, campaign: Campaign) -> None:
    """Refuse (UserError) a campaign whose every cell would fail on this machine: no
    bubblewrap for a sandboxed campaign, a secrets wrapper that is not there, a share that
    would show the arenad home."""
    specs = {spec_sha256(c): c for c in campaign.cells}.values()
    problems = []
    if any(c.sandbox.kind == "bwrap" for c in specs):
        problems.append(host_problem())
    wrappers = {tuple(c.secrets.wrapper): c.secrets for c in specs if c.secrets is not None}
    problems += [wrapper_problem(secrets) for secrets in wrappers.values()]
    shares = sorted({p for c in specs for p in c.sandbox.read_only})
    homes = user_homes()
    for share in shares:
        problem = share_problem(share, home_root=str(home.root), secrets_dir=None, homes=homes)
        problems.append(None if problem is None else f"[sandbox] read_only: {problem}")
    for problem in problems:
        if problem is not None:
            raise UserError(f"{path}: {problem}; nothing was appended")


async def submit_campaign(home: Home, path: Path) -> SubmitResult:
    campaign = load_campaign(path)  # every check happens before anything is written
    check_runnable(home, path, campaign)
    async with open_store(home) as store:
        cells = cells_view(store)
        new: list[AppendRequest] = []
        already = 0
        for spec in campaign.cells:
            existing = await cells.state(spec.cell_id)
            digest = spec_sha256(spec)
            if existing is not None:
                if spec_sha256(existing.spec) != digest:
                    raise UserError(
                        f"{path}: cell {spec.cell_id} was already submitted with a different"
                        " spec; give the changed campaign a new name (nothing was appended)"
                    )
                already += 1
                continue
            new.append(
                AppendRequest(
                    cell_stream(spec.cell_id), 0, [CellSubmitted(spec=spec, spec_sha256=digest)]
                )
            )
        if new:
            stream = campaign_stream(campaign.name)
            record = CampaignSubmitted(
                name=campaign.name,
                source_path=campaign.source_path,
                spec_sha256=campaign.spec_sha256,
                cell_ids=[cell_of(r.stream) for r in new],
                max_parallel=campaign.max_parallel,
            )
            # One transaction: the campaign's cells appear together or not at all.
            await store.append_many([*new, AppendRequest(stream, None, [record])])
    return SubmitResult(campaign.name, [cell_of(r.stream) for r in new], already)
