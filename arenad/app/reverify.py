"""``arenad reverify``: a new verdict on stored patches, the agents not re-run (issue 29).

A verify script with a bug leaves cells "verify fail"; paying for the agents again is not
the way out. For each chosen cell this re-runs verify (and the judge, for a scored attempt
of a campaign with one) on a fresh grading checkout of base + the attempt's stored patch
(:mod:`arenad.verdict.grade`, the same entry point the daemon grades with), then appends
a ``CellReverified`` (a CellVerified: every fold takes it as the attempt's newest verdict)
with the new judge verdict and the log's end, in one append at the version the cell was
read at. The old verdict stays in the log, named by ``previous_seq``.

Decisions where the issue is silent:

- Only a recovered cell is re-graded (its attempt is over and its spend recorded: spend
  is counted once, no ``CellRecovered`` is added). A cell in flight, failed, or whose
  attempt kept no patch, no seal (a workspace made before seals) or a patch whose bytes
  no longer match the recorded sha256 is named with why and skipped.
- The grade is always made on a checkout, even for a campaign that chose
  ``verify_in = "workspace"``: the agent's workspace is not a place to decide a verdict
  after the fact (it may be gone, or changed).
- It runs here, on this machine (the run dirs must be local: a Ray campaign's are on
  its nodes' shared disk, which must be mounted at the same path).
- ``scored`` is the run's (an unscored run stays unscored: what it did is not changed
  by a new verify); so are the patch fields and the tampering found.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Sequence
from pathlib import Path

import msgspec

from arenad.app.control import RETRY_WHERE, RetryWhere, retry_matches
from arenad.cell.machine import CellState, CellStatus
from arenad.cell.writer import CellMovedOn, CellWriter
from arenad.daemon.runner import recorded_seal
from arenad.errors import UserError
from arenad.home import Home, open_store
from arenad.readmodels.view import cells_view
from arenad.report.project import cell_outcome
from arenad.sandbox.confine import CellSandbox
from arenad.store.base import EventStore
from arenad.verdict.grade import GradeError, Grading, judge_graded, verify_graded
from arenad.verdict.judge import no_verdict
from events import cell as ev
from events.base import Event
from events.streams import cell_stream


class Regraded(msgspec.Struct, frozen=True, kw_only=True):
    """One cell's re-grade: its outcome before and after (the report's), or why skipped."""

    cell_id: str
    arm: str
    before: str
    after: str | None = None
    skipped: str | None = None
    verify_rc: int | None = None


def why_not(state: CellState) -> str | None:
    """Why this cell cannot be re-graded (None: it can). Reads the stored patch's bytes."""
    if state.status != CellStatus.RECOVERED:
        return f"is {state.status}: only a recovered cell is re-graded"
    verified = state.verified
    if verified is None:
        return "has no verdict to replace"
    if verified.patch_path is None:
        return "has no stored patch"
    if recorded_seal(state) is None or state.run_dir is None:
        return "has no seal of its base (a workspace made before seals)"
    try:
        data = Path(verified.patch_path).read_bytes()
    except OSError as exc:
        return f"stored patch cannot be read: {exc.strerror or exc}"
    if verified.patch_sha256 is not None and hashlib.sha256(data).hexdigest() != (
        verified.patch_sha256
    ):
        return "stored patch no longer matches its recorded sha256"
    return None


async def _select(
    store: EventStore, cells: Sequence[str], campaign: str | None, where: str | None
) -> list[CellState]:
    view = cells_view(store)
    if cells:
        states = await view.states(list(cells))
        missing = [c for c in cells if c not in states]
        if missing:
            raise UserError(f"no cell {missing[0]!r} (see `arenad status`)")
        return [states[c] for c in cells]
    assert campaign is not None
    ids = [str(row["cell_id"]) for row in await view.rows(campaign)]
    if not ids:
        raise UserError(f"no campaign {campaign!r} (see `arenad campaigns`)")
    out: list[CellState] = []
    for i in range(0, len(ids), 500):
        states = await view.states(ids[i : i + 500])
        for cell_id in ids[i : i + 500]:
            state = states.get(cell_id)
            if state is None:
                continue
            if where is None or retry_matches(state, where):  # type: ignore[arg-type]
                out.append(state)
    return out


async def _regrade(
    store: EventStore, home: Home, state: CellState, verify_cmd: str | None, reason: str
) -> Regraded:
    spec = state.spec
    before = cell_outcome(state)

    def skipped(why: str) -> Regraded:
        return Regraded(cell_id=state.spec.cell_id, arm=spec.arm.name, before=before, skipped=why)

    if (why := why_not(state)) is not None:
        return skipped(why)
    verified = state.verified
    assert verified is not None and state.run_dir is not None
    cmd = verify_cmd if verify_cmd is not None else spec.instance.verify_cmd
    prior = await store.read_stream(cell_stream(spec.cell_id))
    verdict_seq = max((r.seq for r in prior if isinstance(r.event, ev.CellVerified)), default=None)
    n = sum(isinstance(r.event, ev.CellReverified) for r in prior) + 1
    run_dir = state.run_dir
    base_env = dict(os.environ)
    secrets = spec.secrets
    grading = Grading(
        verify_in="checkout",
        run_dir=run_dir,
        workspace=state.workspace or run_dir,
        env={},
        sandbox=CellSandbox(
            spec=spec.sandbox,
            run_dir=run_dir,
            workspace=state.workspace or run_dir,
            home_root=str(home.root),
            secrets_dir=secrets.dir if secrets is not None else None,
        ),
        seal=recorded_seal(state),
        patch_path=verified.patch_path,
        base_env=base_env,
    )
    log_path = os.path.join(run_dir, f"verify.reverify-{n}.log")
    try:
        graded = await verify_graded(grading, cmd, log_path, spec.verify_timeout_s)
    except GradeError as exc:
        return skipped(f"grading checkout could not be made: {exc}")
    result, place = graded.verify, graded.place
    events: list[Event] = [
        ev.CellReverified(
            attempt=state.attempt,
            scored=verified.scored,
            not_scored_reason=verified.not_scored_reason,
            patch_path=verified.patch_path,
            patch_lines=verified.patch_lines,
            patch_sha256=verified.patch_sha256,
            verify_rc=result.rc if result is not None else None,
            verify_pass=result.passed if result is not None else False,
            verify_log=log_path,
            verify_limit=result.limit if result is not None else None,
            tampered=verified.tampered,
            nested_repos=verified.nested_repos,
            verify_in="checkout",
            patch_applied=place.applied,
            patch_apply_note=place.note,
            patch_left_out=place.left_out,
            tampered_paths=verified.tampered_paths,
            verify_cmd=cmd,
            reason=reason,
            previous_seq=verdict_seq,
            previous_pass=verified.verify_pass,
            previous_rc=verified.verify_rc,
        )
    ]
    if spec.judge is not None and verified.scored:
        try:
            judged = await judge_graded(
                grading,
                spec.judge,
                state.attempt,
                run_dir,
                instance=spec.instance,
                arm=spec.arm.name,
            )
        except GradeError as exc:
            judged = no_verdict(spec.judge, state.attempt, f"no grading checkout: {exc}")
        events.append(judged)
    if result is not None and result.log_excerpt is not None:
        events.append(ev.VerifyLogCaptured(attempt=state.attempt, log=result.log_excerpt))
    writer = CellWriter(store, spec.cell_id)
    # At the version it was read at: a side event meanwhile is folded under it; a new
    # attempt meanwhile refuses the append (the verdict is of an attempt no longer current).
    writer.state = state
    try:
        after_state = await writer.append(events)
    except CellMovedOn as exc:
        return skipped(f"moved on while it was re-graded ({exc}); try again")
    return Regraded(
        cell_id=spec.cell_id,
        arm=spec.arm.name,
        before=before,
        after=cell_outcome(after_state),
        verify_rc=result.rc if result is not None else None,
    )


async def reverify(
    home: Home,
    cells: Sequence[str] = (),
    *,
    campaign: str | None = None,
    where: str | None = None,
    verify_cmd: str | None = None,
    reason: str = "operator reverify",
) -> list[Regraded]:
    """Re-grade the chosen cells' stored patches (cell ids, or a campaign's cells that
    ``where`` picks, as ``retry --where`` does); one result per cell, in order."""
    if bool(cells) == (campaign is not None):
        raise UserError("reverify takes cell ids, or --campaign NAME [--where ...] (not both)")
    if where is not None and campaign is None:
        raise UserError("--where needs --campaign")
    if where is not None and where not in RETRY_WHERE:
        raise UserError(f"--where must be one of {', '.join(RETRY_WHERE)}, not {where!r}")
    if verify_cmd is not None and not verify_cmd.strip():
        raise UserError("--verify-cmd is empty")
    async with open_store(home) as store:
        states = await _select(store, cells, campaign, where)
        return [await _regrade(store, home, s, verify_cmd, reason) for s in states]


def diff_lines(results: Sequence[Regraded]) -> list[str]:
    """What changed: one line per cell whose outcome moved or that was skipped, then one
    line per arm (resolved before → after, over the cells re-graded)."""
    lines: list[str] = []
    arms: dict[str, list[int]] = {}
    for r in results:
        if r.skipped is not None:
            lines.append(f"{r.cell_id}: skipped: {r.skipped}")
            continue
        tally = arms.setdefault(r.arm, [0, 0, 0])
        tally[0] += 1
        tally[1] += r.before == "resolved"
        tally[2] += r.after == "resolved"
        if r.after != r.before:
            lines.append(f"{r.cell_id}: {r.before} -> {r.after}")
    for arm, (n, was, now) in sorted(arms.items()):
        lines.append(f"arm {arm}: resolved {was}/{n} -> {now}/{n} ({now - was:+d})")
    regraded = sum(r.skipped is None for r in results)
    lines.append(f"{regraded} cell(s) re-graded, {len(results) - regraded} skipped")
    return lines


__all__ = ["Regraded", "RetryWhere", "diff_lines", "reverify", "why_not"]
