"""Which improvement-loop candidate a cell's campaign evaluates. Pure: names only.

A campaign says so with its ``[candidate]`` keys (``id``, ``generation``, ``index``;
``events.specs.CandidateSpec``). Without them, the campaign's name decides when it is
one of the names the proposer gives the campaigns it evaluates: ``baseline`` (-1, -1)
or ``gen<G>-cand<C>`` in canonical numbers (so two names never share a candidate), the
id being that name (the reference's ``candidateId``). Any other campaign has no candidate:
its lines carry ``candidate_id``, ``generation`` and ``candidate_index`` null.
"""

from __future__ import annotations

import re

from arenad.proposer.layout import candidate_id
from events.specs import CandidateSpec, CellSpec

__all__ = ["campaign_candidate", "candidate_key", "cell_candidate"]

_CANDIDATE_CAMPAIGN = re.compile(r"gen(0|[1-9][0-9]*)-cand(0|[1-9][0-9]*)", re.ASCII)


def candidate_key(campaign: str) -> tuple[int, int] | None:
    """The (generation, candidate index) a campaign name stands for, else None."""
    if campaign == "baseline":
        return (-1, -1)
    match = _CANDIDATE_CAMPAIGN.fullmatch(campaign)
    return (int(match[1]), int(match[2])) if match is not None else None


def campaign_candidate(campaign: str) -> CandidateSpec | None:
    """The candidate a campaign name stands for (the fallback), else None."""
    key = candidate_key(campaign)
    if key is None:
        return None
    return CandidateSpec(id=candidate_id(*key), generation=key[0], index=key[1])


def cell_candidate(spec: CellSpec) -> CandidateSpec | None:
    """The cell's candidate: its campaign's explicit keys, else its campaign's name."""
    return spec.candidate if spec.candidate is not None else campaign_candidate(spec.campaign)
