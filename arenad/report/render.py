"""The report's three forms, pure functions of a ``Report``: rich tables for a terminal,
JSON bytes, and one self-contained HTML page with inline SVG plots.

The page loads nothing (no script, no font, no stylesheet from anywhere; its
Content-Security-Policy forbids them) and every name in it (arms, instances, campaigns:
user and agent-facing strings) is escaped. Times are printed in UTC from the events'
recorded milliseconds, with the calendar arithmetic written here (no ``datetime``: the
module is a pure projection), so the same report gives the same bytes.
"""

from __future__ import annotations

import html
import math
from collections.abc import Callable, Sequence
from typing import NamedTuple

import msgspec
from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from arenad.report.project import (
    BOOTSTRAP_MAX_INSTANCES,
    ArmReport,
    MatrixCell,
    PairReport,
    Report,
    SpendPoint,
)
from arenad.terminal import printable

__all__ = ["HTML_PAGE_CSP", "html_body", "html_css", "html_page", "json_bytes", "terminal", "utc"]

_encoder = msgspec.json.Encoder(order="deterministic")

# Arms' colours in the plots, by position (arms are sorted by name).
PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf", "#8c564b", "#e377c2")

# Past this many instances the terminal shows no matrix (it says so and where to look).
TERMINAL_MATRIX_MAX = 50


def json_bytes(report: Report) -> bytes:
    return _encoder.encode(report)


# --------------------------------------------------------------------------- formatting


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def _ci(ci: tuple[float, float] | None) -> str:
    return "-" if ci is None else f"[{100 * ci[0]:.1f}, {100 * ci[1]:.1f}]"


def _signed_ci(ci: tuple[float, float] | None) -> str:
    return "-" if ci is None else f"[{100 * ci[0]:+.1f}, {100 * ci[1]:+.1f}]"


def _usd(value: float | None) -> str:
    return "-" if value is None else f"${value:.4f}"


def _total_usd(arm: ArmReport) -> str:
    if arm.cost_usd is not None:
        return _usd(arm.cost_usd)
    return f"≥{_usd(arm.cost_usd_known)} ({arm.cost_unknown_runs} unknown)"


def _tokens(total: int | None, known: int, unknown: int) -> str:
    return str(total) if total is not None else f"≥{known} ({unknown} unknown)"


def _secs(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}s"


def _p(value: float | None) -> str:
    return "-" if value is None else f"{value:.4g}"


def _pass_k(arm: ArmReport) -> str:
    return " ".join(f"@{k}={_pct(v)}" for k, v in arm.pass_at_k.items()) or "-"


def _civil(days: int) -> tuple[int, int, int]:
    """(year, month, day) of a day count since 1970-01-01 (H. Hinnant's algorithm)."""
    z = days + 719468
    era = z // 146097
    doe = z - era * 146097
    yoe = (doe - doe // 1460 + doe // 36524 - doe // 146096) // 365
    doy = doe - (365 * yoe + yoe // 4 - yoe // 100)
    mp = (5 * doy + 2) // 153
    day = doy - (153 * mp + 2) // 5 + 1
    month = mp + 3 if mp < 10 else mp - 9
    return yoe + era * 400 + (month <= 2), month, day


def utc(ms: int) -> str:
    days, rest = divmod(ms // 1000, 86400)
    y, m, d = _civil(days)
    return f"{y:04d}-{m:02d}-{d:02d} {rest // 3600:02d}:{rest // 60 % 60:02d}:{rest % 60:02d} UTC"


# --------------------------------------------------------------------------- tables


class Grid(NamedTuple):
    """One table of the report, for either form: its first ``names`` columns are names
    (left-aligned), the rest figures."""

    title: str
    head: tuple[str, ...]
    rows: Sequence[tuple[str, ...]]
    names: int


def _outcomes(arms: Sequence[ArmReport]) -> Grid:
    head: tuple[str, ...] = ("arm", "kind", "cells", "scored", "resolved", "decided")
    head += ("infra failed", "operator failed", "interrupted", "pending")
    head += ("resolve rate", "95% CI", "CI n", "pass@k")
    rows = [
        (
            a.arm,
            a.kind,
            *map(str, (a.cells, a.scored, a.resolved, a.decided, a.infra_failed)),
            *map(str, (a.operator_failed, a.interrupted, a.pending)),
            _rate(a),
            _ci(a.ci95),
            # The interval's n (instances), beside the cells it summarises.
            f"{a.ci_instances} of {a.instances}x{a.reps}",
            _pass_k(a),
        )
        for a in arms
    ]
    return Grid("Outcomes (resolve rate = resolved / decided)", head, rows, 2)


def _rate(a: ArmReport) -> str:
    """The resolve rate, labeled when any verdict in it was the agent's own workspace's."""
    rate = _pct(a.resolve_rate)
    if a.self_reported:
        rate += f" (self-reported: {a.self_reported} of {a.decided})"
    return rate


def _spend(arms: Sequence[ArmReport]) -> Grid:
    head: tuple[str, ...] = ("arm", "runs", "cost", "mean per run", "per resolved")
    head += ("tokens in", "tokens out")
    head += ("wall median", "wall p90")
    rows: list[tuple[str, ...]] = [
        (
            a.arm,
            str(a.runs),
            _total_usd(a),
            _usd(a.mean_cost_usd),
            _usd(a.cost_per_resolved),
            _tokens(a.tokens_in, a.tokens_in_known, a.tokens_unknown_runs),
            _tokens(a.tokens_out, a.tokens_out_known, a.tokens_unknown_runs),
            _secs(a.wall_s_median),
            _secs(a.wall_s_p90),
        )
        for a in arms
    ]
    if any(a.gateway_runs for a in arms):
        # Spend per source: the gateway's own figure beside the agent store's, and where
        # the two disagree (a run counted there is named in its ledger line's cost.mismatch).
        head += ("gateway runs", "gateway cost", "sources disagree")
        rows = [
            (*row, str(a.gateway_runs), _usd(a.gateway_usd), f"{a.mismatch_runs} runs")
            for row, a in zip(rows, arms, strict=True)
        ]
    return Grid("Spend (a run = an attempt that started the agent)", head, rows, 1)


def _pairs(pairs: Sequence[PairReport]) -> Grid:
    head: tuple[str, ...] = ("a", "b", "instances", "wins", "losses", "ties", "diff (a − b)")
    head += ("95% CI",)
    head += ("McNemar p",)
    rows = [
        (
            p.a,
            p.b,
            *map(str, (p.instances, p.wins, p.losses, p.ties)),
            "-" if p.diff is None else f"{100 * p.diff:+.1f} pp",
            _signed_ci(p.diff_ci95),
            _p(p.mcnemar_p),
        )
        for p in pairs
    ]
    return Grid("Pairs over the instances both ran", head, rows, 2)


def _matrix(report: Report) -> Grid:
    arm_names = [a.arm for a in report.arms]
    rows = [
        (row.instance, *(_matrix_cell(row.arms.get(arm)) for arm in arm_names))
        for row in report.instances
    ]
    return Grid("Instances: resolved / decided reps", ("instance", *arm_names), rows, 1)


def _matrix_cell(m: MatrixCell | None) -> str:
    return "" if m is None else f"{m.resolved}/{m.decided}"


# --------------------------------------------------------------------------- terminal


def _natural_width(grid: Grid) -> int:
    """The columns a table needs with no cell folded: each column's widest entry, plus
    rich's border and padding (three per column, one at the end)."""
    widths = [len(printable(h)) for h in grid.head]
    for row in grid.rows:
        widths = [max(w, len(printable(c))) for w, c in zip(widths, row, strict=True)]
    return sum(widths) + 3 * len(widths) + 1


def _records(grid: Grid) -> RenderableType:
    """A table too wide for the terminal, one block per row: its names as a heading, then
    one ``column  value`` line per figure (nothing folded into ``…``)."""
    pad = max(len(h) for h in grid.head[grid.names :])
    lines = [Text(printable(grid.title), style="bold")]
    for row in grid.rows:
        lines.append(Text(printable("  ".join(row[: grid.names]))))
        for head, cell in zip(grid.head[grid.names :], row[grid.names :], strict=True):
            lines.append(Text(printable(f"  {head:<{pad}}  {cell}")))
    return Group(*lines)


def _fitted(grid: Grid, width: int | None) -> RenderableType:
    """The grid as a table when it fits ``width`` columns (None: any), else as records."""
    if width is not None and _natural_width(grid) > width:
        return _records(grid)
    return _rich(grid)


def _rich(grid: Grid) -> Table:
    # Text, never str: a name like "[bold]" must print as itself, not as console markup;
    # and printable: a control character prints as its escape, never as an instruction.
    table = Table(title=Text(printable(grid.title)))
    for i, col in enumerate(grid.head):
        table.add_column(Text(printable(col)), justify="left" if i < grid.names else "right")
    for row in grid.rows:
        table.add_row(*(Text(printable(cell)) for cell in row))
    return table


def _as_of(report: Report) -> str:
    return f", as the log stood at event {report.as_of_seq}" if report.as_of_seq else ""


def terminal(report: Report, width: int | None = None) -> RenderableType:
    """The report as rich tables: outcomes, spend, pairs, and the per-instance matrix. A
    table wider than ``width`` columns prints as one block per row instead (a folded
    table cuts names and figures to ``…``)."""
    names = ", ".join(report.campaigns) or "(none)"
    pooled = " (same-named arms pooled)" if report.pooled else ""
    pooled += _as_of(report)
    parts: list[RenderableType] = [Text(printable(f"arenad report: campaigns {names}{pooled}"))]
    if not report.arms:
        return Group(*parts, Text("no cells"))
    parts += [_fitted(_outcomes(report.arms), width), _fitted(_spend(report.arms), width)]
    if report.pairs:
        parts.append(_fitted(_pairs(report.pairs), width))
    if len(report.instances) > TERMINAL_MATRIX_MAX:
        count = len(report.instances)
        parts.append(Text(f"{count} instances: the per-instance matrix is in --json and --html"))
    else:
        parts.append(_fitted(_matrix(report), width))
    if report.counting:
        parts.append(Text(printable(report.counting)))
    return Group(*parts)


# --------------------------------------------------------------------------- HTML

_CSS = """
body{font:14px/1.4 system-ui,sans-serif;margin:2em;color:#222;max-width:1100px}
h1{font-size:1.5em}h2{font-size:1.15em;margin-top:2em}
table{border-collapse:collapse;margin:.5em 0}
th,td{border:1px solid #ccc;padding:.25em .6em;text-align:right;white-space:nowrap}
th{background:#f3f3f3}td.l,th.l{text-align:left}
.note{color:#666;font-size:.9em}
svg{display:block;margin:.5em 0}
svg text{font:12px system-ui,sans-serif;fill:#222}
"""


def _e(text: object) -> str:
    return html.escape(str(text), quote=True)


def _color(i: int) -> str:
    return PALETTE[i % len(PALETTE)]


def _f(x: float) -> str:
    """A coordinate: fixed decimals, so the bytes do not depend on float repr."""
    return f"{x:.2f}"


def _scale(lo: float, hi: float, out_lo: float, out_hi: float) -> Callable[[float], float]:
    span = hi - lo if hi > lo else 1.0
    return lambda v: out_lo + (v - lo) / span * (out_hi - out_lo)


def _ticks(hi: float, target: int = 4) -> list[float]:
    """Round axis ticks from 0 to at least ``hi``: steps of 1, 2 or 5 times a power of ten."""
    if hi <= 0:
        return [0.0, 1.0]
    raw = hi / target
    magnitude = 10.0 ** math.floor(math.log10(raw))
    step = next(m * magnitude for m in (1, 2, 5, 10) if m * magnitude >= raw)
    count = math.ceil(hi / step - 1e-9)
    return [k * step for k in range(count + 1)]


def _money(value: float) -> str:
    return f"${value:.4g}"


def _svg(width: int, height: int, label: str, body: Sequence[str]) -> str:
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}"'
        f' viewBox="0 0 {width} {height}" role="img" aria-label="{_e(label)}">'
        + "".join(body)
        + "</svg>"
    )


def _text(x: float, y: float, text: str, anchor: str = "start", extra: str = "") -> str:
    return f'<text x="{_f(x)}" y="{_f(y)}" text-anchor="{anchor}"{extra}>{_e(text)}</text>'


def _line(x1: float, y1: float, x2: float, y2: float, stroke: str, width: float = 1) -> str:
    return (
        f'<line x1="{_f(x1)}" y1="{_f(y1)}" x2="{_f(x2)}" y2="{_f(y2)}"'
        f' stroke="{stroke}" stroke-width="{width}"/>'
    )


def _rate_plot(arms: Sequence[ArmReport]) -> str:
    """Each arm's resolve rate (dot) and its Wilson 95 % interval (bar), on 0..100 %."""
    left, right, row, top = 170, 620, 30, 30
    height = top + row * len(arms) + 30
    x = _scale(0.0, 1.0, left, right)
    body = []
    for tick in range(0, 101, 20):
        tx = x(tick / 100)
        body.append(_line(tx, top - 10, tx, height - 25, "#e3e3e3"))
        body.append(_text(tx, height - 10, f"{tick}%", "middle"))
    for i, a in enumerate(arms):
        y = top + row * i + row / 2
        body.append(_text(left - 10, y + 4, a.arm, "end"))
        if a.resolve_rate is None or a.ci95 is None:
            body.append(_text(left + 5, y + 4, "no decided cells", extra=' fill="#888"'))
            continue
        body.append(_line(x(a.ci95[0]), y, x(a.ci95[1]), y, _color(i), 3))
        body.append(f'<circle cx="{_f(x(a.resolve_rate))}" cy="{_f(y)}" r="5" fill="{_color(i)}"/>')
        label = f"{_pct(a.resolve_rate)} {_ci(a.ci95)} n={a.decided}"
        label += " self-reported" if a.self_reported else ""
        body.append(_text(right + 8, y + 4, label))
    return _svg(right + 200, height, "resolve rate per arm with 95% interval", body)


def _cost_plot(arms: Sequence[ArmReport]) -> str:
    """Mean cost per run (x) against resolve rate (y), the rate's interval as a whisker."""
    plotted = [(i, a) for i, a in enumerate(arms) if a.mean_cost_usd is not None and a.ci95]
    missing = [a.arm for a in arms if a.mean_cost_usd is None or not a.ci95]
    note = ""
    if missing:
        note = (
            f'<p class="note">Not plotted (cost unknown or no decided cells):'
            f" {_e(', '.join(missing))}</p>"
        )
    if not plotted:
        return '<p class="note">No arm has both a known cost and a resolve rate.</p>' + note
    left, right, top, bottom = 70, 600, 20, 300
    xticks = _ticks(max(a.mean_cost_usd or 0.0 for _, a in plotted))
    x = _scale(0.0, xticks[-1], left, right)
    y = _scale(0.0, 1.0, bottom, top)
    body = [_line(left, bottom, right, bottom, "#888"), _line(left, bottom, left, top, "#888")]
    for tick in range(0, 101, 25):
        ty = y(tick / 100)
        body.append(_line(left, ty, right, ty, "#eee"))
        body.append(_text(left - 6, ty + 4, f"{tick}%", "end"))
    for cost in xticks:
        body.append(_text(x(cost), bottom + 16, _money(cost), "middle"))
    body.append(_text((left + right) / 2, bottom + 34, "mean cost per run (USD)", "middle"))
    for i, a in plotted:
        assert a.mean_cost_usd is not None and a.ci95 is not None and a.resolve_rate is not None
        px = x(a.mean_cost_usd)
        body.append(_line(px, y(a.ci95[0]), px, y(a.ci95[1]), _color(i), 2))
        body.append(
            f'<circle cx="{_f(px)}" cy="{_f(y(a.resolve_rate))}" r="5" fill="{_color(i)}"/>'
        )
        body.append(_text(px + 8, y(a.resolve_rate) - 6, a.arm))
    return _svg(right + 40, bottom + 45, "mean cost per run against resolve rate", body) + note


def _spend_plot(points: Sequence[SpendPoint], arms: Sequence[ArmReport]) -> str:
    """Each arm's cumulative known cost against recorded time, as steps."""
    if not points:
        return '<p class="note">No spend has been recorded yet.</p>'
    left, right, top, bottom = 80, 600, 20, 260
    t0 = points[0].at_ms
    span_s = (points[-1].at_ms - t0) / 1000
    unit, per = ("s", 1.0) if span_s < 120 else ("min", 60.0) if span_s < 7200 else ("h", 3600.0)
    xticks = _ticks(span_s / per)
    yticks = _ticks(max(p.cost_usd for p in points))
    x = _scale(0.0, xticks[-1], left, right)
    y = _scale(0.0, yticks[-1], bottom, top)

    def at(ms: int) -> float:
        return x((ms - t0) / 1000 / per)

    body = [_line(left, bottom, right, bottom, "#888"), _line(left, bottom, left, top, "#888")]
    for cost in yticks:
        body.append(_line(left, y(cost), right, y(cost), "#eee"))
        body.append(_text(left - 6, y(cost) + 4, _money(cost), "end"))
    for tick in xticks:
        body.append(_text(x(tick), bottom + 16, f"+{tick:g} {unit}", "middle"))
    body.append(_text(left, bottom + 34, f"since {utc(t0)}"))
    legend_y = top
    for i, a in enumerate(arms):
        mine = [p for p in points if p.arm == a.arm]
        if not mine:
            continue
        coords = [(at(t0), y(0.0))]
        for p in mine:
            coords.append((at(p.at_ms), coords[-1][1]))
            coords.append((at(p.at_ms), y(p.cost_usd)))
        coords.append((at(points[-1].at_ms), coords[-1][1]))
        path = " ".join(f"{_f(cx)},{_f(cy)}" for cx, cy in coords)
        body.append(
            f'<polyline points="{path}" fill="none" stroke="{_color(i)}" stroke-width="2"/>'
        )
        unknown = mine[-1].unknown_runs
        tail = f" + {unknown} unknown" if unknown else ""
        body.append(
            f'<rect x="{right + 12}" y="{legend_y}" width="10" height="10" fill="{_color(i)}"/>'
        )
        body.append(_text(right + 28, legend_y + 9, f"{a.arm} {_usd(mine[-1].cost_usd)}{tail}"))
        legend_y += 18
    return _svg(right + 300, bottom + 45, "cumulative known spend over time per arm", body)


def _html_grid(grid: Grid, link: Callable[[str], str | None] | None = None) -> str:
    """``link``: the address a row's first name links to (None: no link)."""

    def cls(i: int) -> str:
        return ' class="l"' if i < grid.names else ""

    def cell(i: int, value: str) -> str:
        href = link(value) if link is not None and i == 0 else None
        return _e(value) if href is None else f'<a href="{_e(href)}">{_e(value)}</a>'

    out = [f"<h2>{_e(grid.title)}</h2><table><tr>"]
    out += [f"<th{cls(i)}>{_e(h)}</th>" for i, h in enumerate(grid.head)]
    out.append("</tr>")
    for row in grid.rows:
        cells = "".join(f"<td{cls(i)}>{cell(i, v)}</td>" for i, v in enumerate(row))
        out.append(f"<tr>{cells}</tr>")
    out.append("</table>")
    return "".join(out)


# The page's own policy: nothing but its inline style and data: images.
HTML_PAGE_CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:"


def html_css() -> str:
    """The report's stylesheet (the page inlines it; ``arenad view`` serves it)."""
    return _CSS


def html_body(report: Report, instance_link: Callable[[str], str | None] | None = None) -> str:
    """The report's figures as HTML (heading, plots, tables, notes): what goes inside the
    page's body, and what ``arenad view`` shows at /report. ``instance_link``: where an
    instance of the matrix links to (``arenad view``: its cells); none in a file."""
    arms = report.arms
    names = ", ".join(report.campaigns) or "(none)"
    sections = [
        "<h1>arenad report</h1>",
        f"<p>Campaigns: {_e(names)}{' (same-named arms pooled)' if report.pooled else ''}"
        f"{_e(_as_of(report))}."
        " Computed from the event log only.</p>",
    ]
    if not arms:
        sections.append('<p class="note">No cells.</p>')
        return "\n".join(sections)
    grids = [_outcomes(arms), _spend(arms)]
    if report.pairs:
        grids.append(_pairs(report.pairs))
    matrix = _matrix(report)
    grids.append(matrix)
    sections += [
        "<h2>Resolve rate with its 95% Wilson interval over instances</h2>",
        _rate_plot(arms),
        "<h2>Cost against resolve rate</h2>",
        _cost_plot(arms),
        "<h2>Spend over time</h2>",
        _spend_plot(report.spend_over_time, arms),
        *(_html_grid(g, instance_link if g is matrix else None) for g in grids),
        f'<p class="note">{_e(report.counting)}</p>',
        '<p class="note">Resolved: scored and passed (a judge verdict, when recorded,'
        " overrides verify). pass@k: the unbiased estimator over instances"
        " with at least k decided reps. Pairs: per-instance resolve fractions; p is the"
        " exact McNemar (sign) test on the discordant instances; the interval is a"
        f" percentile bootstrap over instances ({report.bootstrap_resamples} resamples,"
        f" seed {report.bootstrap_seed}; past {BOOTSTRAP_MAX_INSTANCES} paired instances,"
        " the normal interval it tends to).</p>",
    ]
    return "\n".join(sections)


def html_page(report: Report) -> bytes:
    """The report as one self-contained HTML page (UTF-8)."""
    names = ", ".join(report.campaigns) or "(none)"
    sections = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f'<meta http-equiv="Content-Security-Policy" content="{HTML_PAGE_CSP}">',
        f"<title>arenad report: {_e(names)}</title><style>{_CSS}</style></head><body>",
        html_body(report),
        "</body></html>",
    ]
    return "\n".join(sections).encode()
