"""Human and JSON views of the log and the read models: pure formatting.

Every string that came from the log is printed through :func:`arenad.terminal.printable`
(JSON through :func:`arenad.terminal.json_printable`): what an agent wrote into a reason
or a path reaches the reader's terminal as visible escapes, never as control sequences.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import msgspec

from arenad.cell.overdue import Overdue
from arenad.readmodels.tallies import ArmOutcomes
from arenad.terminal import json_printable, printable
from events.base import Recorded
from events.cell import SandboxView

_json = msgspec.json.Encoder()


def iso(ms: int | None) -> str:
    if ms is None:
        return "-"
    stamp = dt.datetime.fromtimestamp(ms / 1000, tz=dt.UTC)
    return stamp.strftime("%Y-%m-%dT%H:%M:%S.") + f"{ms % 1000:03d}Z"


def recorded_to_json(r: Recorded) -> bytes:
    """One event as one JSON object (the `events --json` line format)."""
    return json_printable(
        _json.encode(
            {
                "seq": r.seq,
                "stream": r.stream,
                "version": r.version,
                "tag": r.tag,
                "schema_version": r.schema_version,
                "recorded_at": iso(r.recorded_at_ms),
                "event": r.event,
            }
        )
    )


_SUMMARY_SKIP = {"type", "v", "spec", "attempt"}


def _summary(r: Recorded) -> str:
    fields = msgspec.structs.asdict(r.event)
    if r.tag == "cell.submitted":
        spec = fields["spec"]
        return (
            f"instance {spec.instance.instance_id}, arm {spec.arm.name}, rep {spec.rep},"
            f" attempt {fields['attempt']}"
        )
    parts = []
    for key, value in fields.items():
        if key in _SUMMARY_SKIP or value is None or value == [] or value == {}:
            continue
        if isinstance(value, SandboxView):
            # Whole: the audit trail of what the run could see is never cut.
            parts.append(f"sandbox={_sandbox_text(value)}")
            continue
        if isinstance(value, msgspec.Struct):
            value = {k: v for k, v in msgspec.structs.asdict(value).items() if v is not None}
        text = str(value)
        if len(text) > 80:
            text = text[:77] + "..."
        parts.append(f"{key}={text}")
    return ", ".join(parts)


def _sandbox_text(view: SandboxView) -> str:
    network = ""
    if view.network is not None:
        network = f" network {view.network}"
        if view.endpoints:
            network += f" [{', '.join(view.endpoints)}]"
    if view.kind == "none":
        return "none (not confined)" + network
    return (
        f"{view.kind} {view.version or '?'} read-only [{', '.join(view.read_only)}]"
        f" read-write [{', '.join(view.read_write)}]{network}"
    )


def history_lines(events: Iterable[Recorded]) -> list[str]:
    """The audit trail of one cell: every event as a readable timeline row."""
    lines = []
    for r in events:
        attempt = getattr(r.event, "attempt", None)
        at = f"a{attempt}" if attempt is not None else "  "
        line = f"{iso(r.recorded_at_ms)}  #{r.seq:<7} {at:<4} {r.tag:<24} {_summary(r)}"
        lines.append(printable(line))
    return lines


STATUS_COLUMNS = (
    "cell",
    "arm",
    "rep",
    "att",
    "state",
    "wall_s",
    "verify",
    "tokens",
    "cost",
    "reason",
)
# The table's reason column is cut here; `status --json` has it whole.
REASON_WIDTH = 60


def _verify_text(scored: Any, verify_pass: Any) -> str:
    if scored is None:
        return "-"
    if not scored:
        return "not scored"
    return "pass" if verify_pass else "fail"


def _cut(text: str, width: int) -> str:
    """``text`` in ``width`` characters, cut in the middle: its start says what failed,
    its end why (a command's stderr tail comes last), so neither is lost."""
    if len(text) <= width:
        return text
    head = width // 3
    tail = width - head - 1
    return text[:head] + "…" + text[len(text) - tail :]


def _usd(value: Any) -> str:
    return f"{value:.4f}" if value is not None else "-"


def _cost_text(row: Mapping[str, Any]) -> str:
    """The cost of record; a supervisor cell's is its driver's own total, and the worker
    sessions it captured follow under their name (one figure per name, finding 9)."""
    if "driver_usd" in row:
        return f"{_usd(row['driver_usd'])} (workers {_usd(row.get('workers_usd'))})"
    return _usd(row["cost_usd"])


def status_table(
    counts: Sequence[tuple[str, int]],
    rows: Sequence[dict[str, Any]],
    campaigns: Sequence[Any] = (),
    overdue: Sequence[Overdue] = (),
    *,
    wide: bool = False,
    more: bool = False,
    by_campaign: Mapping[str, Mapping[str, int]] | None = None,
    by_arm: Sequence[ArmOutcomes] = (),
) -> str:
    """``wide``: the reason whole (else cut in its middle); ``more``: rows past the limit
    were left out (said in the last line); ``by_campaign`` (--summary): each campaign's
    cells by state, in place of the rows."""
    out = ["states: " + (", ".join(f"{s} {n}" for s, n in counts) or "no cells")]
    out += spend_lines(campaigns)
    for name, cells in (by_campaign or {}).items():
        by_state = ", ".join(f"{s} {n}" for s, n in sorted(cells.items()))
        out.append(f"campaign {name}: {sum(cells.values())} cell(s): {by_state}")
        for arm in (a for a in by_arm if a.campaign == name):
            out.append("  " + arm_line(arm))
    if rows:
        table = [STATUS_COLUMNS]
        for row in rows:
            tokens = (
                f"{row['tokens_in']}/{row['tokens_out']}"
                if row["tokens_in"] is not None or row["tokens_out"] is not None
                else "-"
            )
            state = row["state"] + (" (paused)" if row["paused"] else "")
            table.append(
                (
                    row["cell_id"],
                    row["arm"],
                    str(row["rep"]),
                    str(row["attempt"]),
                    state,
                    f"{row['wall_s']:.1f}" if row["wall_s"] is not None else "-",
                    _verify_text(row["scored"], row["verify_pass"]),
                    tokens,
                    _cost_text(row),
                    (row.get("reason") or "-")
                    if wide
                    else _cut(row.get("reason") or "-", REASON_WIDTH),
                )
            )
        shown = [[printable(c) for c in r] for r in table]
        widths = [max(len(r[i]) for r in shown) for i in range(len(STATUS_COLUMNS))]
        for r in shown:
            out.append("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip())
    if more:
        out.append(f"... more cells not shown (the first {len(rows)}; raise --limit)")
    if overdue:
        out.append(
            f"overdue: {len(overdue)} cell(s) in a transient state longer than their steps allow"
        )
        for late in overdue:
            out.append(
                f"  {late.cell_id}  {late.state} for {late.for_s:.0f} s"
                f" (limit {late.limit_s:.0f} s), waiting for {late.waiting_for}"
            )
    return "\n".join(printable(line) for line in out)


def arm_line(arm: ArmOutcomes) -> str:
    """One arm's outcomes in a line: resolved of decided (the rate), then every outcome."""
    rate = f" ({100 * arm.resolved / arm.decided:.1f} %)" if arm.decided else ""
    outcomes = ", ".join(f"{o} {n}" for o, n in arm.outcomes.items())
    cost = f"; ${arm.cost_usd:.4f} over {arm.costed} cell(s) of known cost" if arm.costed else ""
    return (
        f"arm {arm.arm}: {arm.cells} cell(s), resolved {arm.resolved} of {arm.decided}"
        f" decided{rate}, scored {arm.scored}: {outcomes}{cost}"
    )


def submit_lines(result: Any) -> list[str]:
    """What `arenad submit` prints (``result``: an :class:`arenad.app.submit.SubmitResult`);
    a dry run shows what the campaign expands to."""
    plan = result.plan
    lines: list[str] = []
    if result.dry_run:
        sel = plan.selection
        picked = [
            f"instance_ids ({len(sel.instance_ids)})" if sel.instance_ids is not None else "",
            f"instance_filter {sel.instance_filter!r}" if sel.instance_filter is not None else "",
            f"limit {sel.limit}" if sel.limit is not None else "",
        ]
        how = ", ".join(p for p in picked if p)
        lines.append(
            f"dry run: campaign {plan.campaign} expands to {plan.cells} cell(s):"
            f" {plan.instances} instance(s) of {plan.rows} row(s)"
            + (f" (selected by {how})" if how else "")
            + f" x {len(plan.arms)} arm(s) x {plan.reps} rep(s)"
        )
        for arm in plan.arms:
            lines.append(f"  arm {arm.name} ({arm.kind}): {arm.cells} cell(s)")
        lines.append("  first cells: " + ", ".join(plan.first_cells))
        for cmd in plan.verify:
            lines.append(f"  verify: {cmd}")
        if plan.budget_usd is not None:
            abort = ", running cells aborted when reached" if plan.abort_running else ""
            lines.append(f"  budget: ${plan.budget_usd:g}{abort}")
        lines.append(f"  {result.added} new, {result.already} already known; nothing was appended")
    else:
        lines.append(
            f"campaign {result.campaign}: {result.added} cell(s) submitted,"
            f" {result.already} already known"
        )
    lines += [f"note: {n}" for n in plan.notes]
    return [printable(line) for line in lines]


def money(value: float | None) -> str:
    return "unknown" if value is None else f"${value:.4f}"


def spend_text(c: Any) -> str:
    """A campaign's spend against its cap (``c``: an :class:`arenad.app.campaigns.
    CampaignFigures`): unknown attempts are said, never counted as $0."""
    text = money(c.spent_usd)
    if c.cap_usd is not None:
        text += f" of ${c.cap_usd:g} cap" + (" (reached: no new cell starts)" if c.at_cap else "")
    extra = []
    if c.running:
        extra.append(f"{c.running} running, {money(c.live_usd)} of it live")
    if c.unknown_attempts:
        extra.append(f"+ {c.unknown_attempts} attempt(s) of unknown cost")
    return text + (f" ({'; '.join(extra)})" if extra else "")


def spend_lines(figures: Sequence[Any]) -> list[str]:
    return [
        printable(f"spend {c.name}: {spend_text(c)}") for c in figures if c.attempts or c.cap_usd
    ]


def campaigns_table(figures: Sequence[Any]) -> str:
    """One line per campaign: cells by state, spend and cap, first and last event."""
    if not figures:
        return "no campaigns"
    table = [("campaign", "cells", "by state", "spend", "cap", "submitted", "last event")]
    for c in figures:
        spent = money(c.spent_usd)
        if c.unknown_attempts:
            spent += f" + {c.unknown_attempts} unknown"
        cap = "-" if c.cap_usd is None else f"${c.cap_usd:g}" + (" reached" if c.at_cap else "")
        table.append(
            (
                c.name,
                str(c.total),
                ", ".join(f"{s} {n}" for s, n in c.cells.items()) or "-",
                spent,
                cap,
                iso(c.submitted_at_ms),
                iso(c.last_event_ms),
            )
        )
    shown = [[printable(c) for c in r] for r in table]
    widths = [max(len(r[i]) for r in shown) for i in range(len(shown[0]))]
    return "\n".join(
        "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in shown
    )
