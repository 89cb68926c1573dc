"""Proposer lines: a captured shot receipt joined to a captured Claude transcript. Pure.

The reference backfill's PROPOSER mapping (fact sheet §5), over events instead of files:

- one line per receipt stream (``proposer/shot/<rel>``), from its latest capture;
- the transcript join: the latest captures of the transcripts in the project dir of the
  receipt's worktree (``<slug(worktree)>``), in file-name order (JS code-unit order).
  Candidates are those whose ``startedAt`` lies in
  ``[receipt.startedAt − 120 s, receipt.completedAt + 120 s]``; when either receipt time
  is missing or unparseable, the one transcript there is joined only if there is
  exactly one. Of the candidates, the one starting nearest ``receipt.startedAt`` wins
  (ties: the first by name). No candidate → a gap line;
- reward: the candidate's resolved fraction when it is known (``CandidateTally``), else
  null with ``reward_source`` null — never 0 for unknown; over the baseline's instance
  count when a baseline was evaluated (the reference's manifest), else its own.

Decisions where the reference reads files arenad does not have: the candidate's cells are
those whose campaign's candidate (``arenad.ledger.candidate``: its ``[candidate]`` keys,
else its name ``gen<G>-cand<C>``) is (G, C), and the line's ``candidate_id`` is the id
they carry (``gen<G>-cand<C>`` when no cell has it), so proposer and episode lines join
on it; a cell counts as resolved only when its attempt is scored; ``profile_commit`` is
the one commit its cells recorded (null when none or several); ``patch_path`` is null (arenad
keeps no candidate diff); ``instance_count`` is null while the fraction is unknown. A
receipt that could not be read or parsed still gives its line: ``outcome.error`` and
``metrics.receipt_error`` carry the capture error. ``captured_at`` is the later of the
receipt's and the joined transcript's capture; ``rollout_id`` is a UUIDv5 over
(run_id, "proposer", receipt path under proposer-shots).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import msgspec

from arenad.js import iso_ms, js_date_parse, js_parse, js_round
from arenad.ledger.candidate import candidate_key
from arenad.ledger.claude_transcript import ClaudeTranscript, claude_transcript
from arenad.ledger.lines import (
    Artifacts,
    Cost,
    LedgerStats,
    LineHead,
    Number,
    Outcome,
    Policy,
    Provenance,
    Task,
    number_or_none,
    rollout_line,
    tally_line,
)
from arenad.ledger.project import CellResolution
from arenad.ledger.rollout import rollout_id
from arenad.proposer.layout import SHOT_PREFIX, candidate_id
from events.base import Recorded
from events.capture import ClaudeTranscriptCaptured, ProposerShotCaptured

__all__ = [
    "JOIN_WINDOW_MS",
    "PROPOSER_SUITE",
    "CandidateOutcome",
    "CandidateTally",
    "CapturedTranscript",
    "candidate_key",
    "captured_transcript",
    "join_transcript",
    "js_code_unit_key",
    "project_shot",
]

JOIN_WINDOW_MS = 120_000
PROPOSER_SUITE = "swe-arena-proposer"
DEFAULT_JUDGE = "swe-arena-official-judge"


def js_code_unit_key(s: str) -> bytes:
    """A sort key ordering strings as JS's default sort does (UTF-16 code units)."""
    return s.encode("utf-16-be", errors="surrogatepass")


# --------------------------------------------------------------------------- candidates


class CandidateOutcome(msgspec.Struct, frozen=True, kw_only=True):
    campaign: str
    # The id its cells carry (the join key of proposer and episode lines).
    candidate_id: str
    # Both None while any cell is pending: the fraction is not known.
    resolved_count: int | None
    instance_count: int | None
    judge: str | None
    profile_commit: str | None

    @property
    def reward(self) -> Number | None:
        if self.resolved_count is None or not self.instance_count:
            return None
        return self.resolved_count / self.instance_count


class _CampaignTally:
    def __init__(self, campaign: str, candidate_id: str) -> None:
        self.campaign = campaign
        self.candidate_id = candidate_id
        self.reps = 0
        self.resolved: dict[str, set[int]] = {}
        self.pending = 0
        self.judges: set[str] = set()
        self.commits: set[str] = set()

    def add(self, cell: CellResolution) -> None:
        self.reps = max(self.reps, cell.rep + 1)
        reps = self.resolved.setdefault(cell.instance_id, set())
        if cell.status == "resolved":
            reps.add(cell.rep)
        elif cell.status == "pending":
            self.pending += 1
        if cell.judge is not None:
            self.judges.add(cell.judge)
        if cell.profile_commit is not None:
            self.commits.add(cell.profile_commit)

    def outcome(self) -> CandidateOutcome:
        known = self.pending == 0
        # An instance counts only when every rep 0..reps-1 resolved (the reference rule).
        resolved = sum(1 for reps in self.resolved.values() if len(reps) == self.reps)
        judges = sorted(self.judges)
        return CandidateOutcome(
            campaign=self.campaign,
            candidate_id=self.candidate_id,
            resolved_count=resolved if known else None,
            instance_count=len(self.resolved) if known else None,
            judge="+".join(judges) if judges else DEFAULT_JUDGE,
            profile_commit=next(iter(self.commits)) if len(self.commits) == 1 else None,
        )


# The baseline's (generation, candidate index): arenad.ledger.candidate.
BASELINE_KEY = (-1, -1)


class CandidateTally:
    """A fold over the cells of candidate campaigns, one cell at a time (O(instances))."""

    def __init__(self) -> None:
        self._by_key: dict[tuple[int, int], _CampaignTally] = {}

    def add(self, cell: CellResolution) -> None:
        """Count a cell toward its candidate (a cell with none counts for nothing)."""
        c = cell.candidate
        if c is not None:
            tally = self._by_key.get((c.generation, c.index))
            if tally is None:
                tally = self._by_key[(c.generation, c.index)] = _CampaignTally(cell.campaign, c.id)
            tally.add(cell)

    def outcome(self, generation: int, candidate_index: int) -> CandidateOutcome | None:
        """The candidate's outcome. Its reward's denominator is the *baseline's* instance
        count when a baseline (-1, -1) was evaluated: the reference divides by its
        manifest's instances (``manifest.instances.length``), the set every candidate is
        evaluated on, so a candidate that ran on fewer instances is not rewarded for it
        (issue 29, finding 9). Without a baseline, the candidate's own instances."""
        tally = self._by_key.get((generation, candidate_index))
        if tally is None:
            return None
        out = tally.outcome()
        baseline = self._by_key.get(BASELINE_KEY)
        if baseline is not None and out.resolved_count is not None and baseline.resolved:
            out = msgspec.structs.replace(out, instance_count=len(baseline.resolved))
        return out


# --------------------------------------------------------------------------- the join


class CapturedTranscript(msgspec.Struct, frozen=True, kw_only=True):
    path: str
    name: str
    recorded_at_ms: int
    transcript: ClaudeTranscript


def captured_transcript(rec: Recorded) -> CapturedTranscript:
    """A transcript capture, parsed (fact sheet §3: the main thread only)."""
    e = rec.event
    assert isinstance(e, ClaudeTranscriptCaptured)
    return CapturedTranscript(
        path=e.path,
        name=rec.stream.rsplit("/", 1)[-1],
        recorded_at_ms=rec.recorded_at_ms,
        transcript=claude_transcript(e.content),
    )


def join_transcript(
    started_ms: int | None, completed_ms: int | None, transcripts: Sequence[CapturedTranscript]
) -> CapturedTranscript | None:
    """The reference's time-window join (``None`` = an unparseable time, JS NaN)."""
    ordered = sorted(transcripts, key=lambda t: js_code_unit_key(t.name))
    windowed: list[tuple[CapturedTranscript, int | None]] = []
    for t in ordered:
        if t.transcript.started_at is None:
            continue
        start = js_date_parse(t.transcript.started_at)
        if started_ms is None or completed_ms is None:
            in_window = len(ordered) == 1
        else:
            in_window = (
                start is not None
                and started_ms - JOIN_WINDOW_MS <= start <= completed_ms + JOIN_WINDOW_MS
            )
        if in_window:
            windowed.append((t, start))
    if not windowed:
        return None

    # JS sorts by |start − (startedAt || start)|: no receipt start (NaN, or 0) prefers none.
    def distance(item: tuple[CapturedTranscript, int | None]) -> int:
        start = item[1]
        return abs(start - started_ms) if started_ms and start is not None else 0

    return min(windowed, key=distance)[0]  # min keeps the first of equals: a stable sort


# --------------------------------------------------------------------------- the line


def _receipt(content: str | None) -> dict[str, Any] | None:
    if content is None:
        return None
    try:
        doc = js_parse(content)
    except ValueError:
        return None
    receipt = doc.get("receipt") if isinstance(doc, dict) else None
    return receipt if isinstance(receipt, dict) else None


def _time_ms(receipt: dict[str, Any] | None, key: str) -> int | None:
    value = receipt.get(key) if receipt is not None else None
    return js_date_parse(value) if isinstance(value, str) else None


def _string(receipt: dict[str, Any] | None, key: str) -> str | None:
    value = receipt.get(key) if receipt is not None else None
    return value if isinstance(value, str) else None


def _number(receipt: dict[str, Any] | None, key: str) -> Number | None:
    return number_or_none(receipt.get(key)) if receipt is not None else None


def _wall_s(duration_ms: Number | None) -> int | None:
    # Math.round(durationMs / 1000); a non-finite result is what JSON.stringify writes null.
    if duration_ms is None or not math.isfinite(duration_ms / 1000):
        return None
    return js_round(duration_ms / 1000)


def project_shot(
    shot: Recorded,
    transcripts: Sequence[CapturedTranscript],
    candidate: CandidateOutcome | None,
    run_id: str,
    stats: LedgerStats,
) -> dict[str, Any]:
    """The proposer line of one receipt capture, validated; ``stats`` updated in place.

    ``transcripts``: the latest captures in the project dir of the shot's worktree.
    """
    e = shot.event
    assert isinstance(e, ProposerShotCaptured)
    rel = shot.stream.removeprefix(SHOT_PREFIX)
    receipt = _receipt(e.content)
    worktree = e.worktree
    joined = (
        join_transcript(
            _time_ms(receipt, "startedAt"), _time_ms(receipt, "completedAt"), transcripts
        )
        if worktree is not None
        else None
    )
    t = joined.transcript if joined is not None else None
    stats["proposerShotsJoined" if joined is not None else "proposerShotsMissed"] += 1

    # The id the candidate's cells carry, so proposer and episode lines join on it.
    cand_id = (
        candidate.candidate_id
        if candidate is not None
        else candidate_id(e.generation, e.candidate_index)
    )
    reward = candidate.reward if candidate is not None else None
    exit_code = _number(receipt, "exitCode")
    timed_out = receipt.get("timedOut") if receipt is not None else None
    duration_ms = _number(receipt, "durationMs")
    receipt_error = e.error if receipt is None else None
    gap: str | None = None
    if joined is None:
        gap = (
            f"no claude transcript matched worktree {worktree} in the shot's time window"
            if worktree is not None
            else "no proposer worktree was recorded with this shot"
        )
        if receipt_error is not None:
            gap += f"; receipt unreadable: {receipt_error}"
    recorded = max(shot.recorded_at_ms, joined.recorded_at_ms if joined is not None else 0)
    line = rollout_line(
        LineHead(
            rollout_id=rollout_id(run_id, "proposer", rel),
            run_id=run_id,
            candidate_id=cand_id,
            generation=e.generation,
            candidate_index=e.candidate_index,
            role="proposer",
        ),
        Task(
            suite=PROPOSER_SUITE,
            instance_id=f"{cand_id}-{e.author}" if e.author is not None else cand_id,
            split="search",
            seed=None,
            rep=e.shot,
        ),
        Policy(
            harness=_string(receipt, "harness"),
            model=t.model if t is not None and t.model is not None else _string(receipt, "model"),
            provider=None,
            profile_commit=candidate.profile_commit if candidate is not None else None,
        ),
        t.messages if t is not None else [],
        Outcome(
            reward=reward,
            reward_source=(
                f"{candidate.judge}/candidate-resolved-fraction"
                if candidate is not None and reward is not None
                else None
            ),
            verdict=None,
            metrics={
                "resolved_count": candidate.resolved_count if candidate is not None else None,
                "instance_count": candidate.instance_count if candidate is not None else None,
                "exit_code": exit_code,
                "timed_out": timed_out if isinstance(timed_out, bool) else None,
                "author": e.author,
                "max_shots": _number(receipt, "maxShots"),
                "prompt_sha256": _string(receipt, "promptSha256"),
                "receipt_error": receipt_error,
            },
            is_completed=exit_code == 0,
            is_truncated=timed_out is True,
            error=_string(receipt, "error") if receipt is not None else receipt_error,
        ),
        Cost(
            usd=_number(receipt, "costUsd"),
            tokens_in=t.usage.tokens_in if t is not None else None,
            tokens_out=t.usage.tokens_out if t is not None else None,
            cache_read=t.usage.cache_read if t is not None else None,
            cache_write=t.usage.cache_write if t is not None else None,
            wall_s=_wall_s(duration_ms),
        ),
        Artifacts(
            patch_path=None,
            run_dir=worktree,
            transcript_ref=joined.path if joined is not None else e.path,
        ),
        Provenance(captured_at=iso_ms(recorded), gap=gap),
    )
    tally_line(stats, line, f"proposer shot {rel} line")
    return line
