"""Daemon, campaign and control events (streams ``daemon``, ``campaign/<name>``, ``control``)."""

from __future__ import annotations

from events.base import Event


class CampaignSubmitted(Event, tag="campaign.submitted", frozen=True, kw_only=True):
    name: str
    source_path: str
    spec_sha256: str
    cell_ids: list[str]
    max_parallel: int | None = None


class DaemonStarted(Event, tag="daemon.started", frozen=True, kw_only=True):
    pid: int
    hostname: str
    max_parallel: int
    version: str


class DaemonStopped(Event, tag="daemon.stopped", frozen=True, kw_only=True):
    pid: int
    reason: str


class MaxParallelChanged(Event, tag="control.max-parallel", frozen=True, kw_only=True):
    max_parallel: int
