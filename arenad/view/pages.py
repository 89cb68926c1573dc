"""The view's pages: HTML from the folds' data, through autoescaping templates.

Every value is escaped by Jinja's autoescape (attributes included), so nothing an agent
wrote (a transcript, a patch, a log line, a name) can become markup or script; the only
HTML taken as is is the report's body (:func:`arenad.report.render.html_body`), which
escapes everything itself. No page has inline script or style: the server's
Content-Security-Policy allows only its own /static files. Templates ship in the package
and are loaded once, like code; rendering reads nothing else.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from urllib.parse import quote, urlencode

import jinja2
import msgspec
from markupsafe import Markup

from arenad.readmodels.progress import STATES, CampaignLine, DaemonLine, Progress
from arenad.readmodels.results import RESULTS, ResultPage, ResultQuery
from arenad.report.project import Report
from arenad.report.render import html_body, utc
from arenad.view.cell import CellView

__all__ = [
    "campaign_page",
    "cell_page",
    "error_page",
    "overview_page",
    "progress_event",
    "progress_values",
    "report_page",
    "results_fragment",
]

_json = msgspec.json.Encoder()


def _usd(value: float | None) -> str:
    return "-" if value is None else f"${value:.4f}"


def _secs(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f} s"


def _dash(value: object) -> str:
    return "-" if value is None else str(value)


def _bytes(n: int) -> str:
    if n < 1024:
        return f"{n} bytes"
    if n < 1024 * 1024:
        return f"{n / 1024:.1f} KiB"
    return f"{n / 1024 / 1024:.1f} MiB"


def cell_url(cell_id: str) -> str:
    # Always under /cells/ and fully quoted: a name can never make a link of its own.
    return "/cells/" + quote(cell_id, safe="")


def campaign_url(name: str) -> str:
    return "/campaigns/" + quote(name, safe="")


_env = jinja2.Environment(
    loader=jinja2.PackageLoader("arenad.view", "templates"),
    autoescape=True,
    undefined=jinja2.StrictUndefined,
    trim_blocks=True,
    lstrip_blocks=True,
)


def _one_line(text: str) -> str:
    """The first line of a text (a failure's cause), what a one-line note shows."""
    lines = text.strip().splitlines()
    return lines[0] if lines else ""


_env.filters.update(
    one_line=_one_line,
    utc=lambda ms: "-" if ms is None else utc(ms),
    usd=_usd,
    secs=_secs,
    dash=_dash,
    bytes=_bytes,
    cell_url=cell_url,
    campaign_url=campaign_url,
)


def _render(name: str, **context: object) -> str:
    return _env.get_template(name).render(**context)


# --------------------------------------------------------------------------- overview


def _spend(line: CampaignLine) -> str:
    tail = f" + {line.cost_unknown_runs} run(s) of unknown cost" if line.cost_unknown_runs else ""
    return _usd(line.cost_usd) + tail


def _daemon(daemon: DaemonLine | None) -> str:
    if daemon is None:
        return "no daemon has run on this log"
    who = f"daemon pid {daemon.pid} on {daemon.hostname}"
    if daemon.stopped_at_ms is None:
        return (
            f"{who} since {utc(daemon.started_at_ms)}, max-parallel {daemon.max_parallel}"
            " (no stop recorded)"
        )
    return f"no daemon running: {who} stopped {utc(daemon.stopped_at_ms)} ({daemon.stop_reason})"


def progress_values(progress: Progress, error: str | None = None) -> dict[str, str]:
    """Every live figure of the overview by its key (``<figure>@<campaign>``, or
    ``<figure>`` for the totals): the page's first render and each update use these same
    strings, so an update can only change what the log changed. ``error``: why the view
    could not read the log just now."""
    values = {
        "daemon": _daemon(progress.daemon),
        "seq": str(progress.last_seq),
        "error": f"The log could not be read ({error}); retrying." if error else "",
    }
    for line in [*progress.campaigns, progress.total]:
        at = f"@{line.name}" if line.name else ""
        values[f"cells{at}"] = str(line.cells)
        values[f"paused{at}"] = str(line.paused)
        values[f"runs{at}"] = str(line.runs)
        values[f"spend{at}"] = _spend(line)
        for state, n in line.states.items():
            values[f"{state}{at}"] = str(n)
    return values


def progress_event(progress: Progress, error: str | None = None) -> bytes:
    """One server-sent event's data: the campaigns shown and every live figure."""
    return _json.encode(
        {
            "last_seq": progress.last_seq,
            "campaigns": [c.name for c in progress.campaigns],
            "values": progress_values(progress, error),
        }
    )


def overview_page(progress: Progress, error: str | None = None) -> str:
    names = _json.encode([c.name for c in progress.campaigns]).decode()
    return _render(
        "overview.html",
        progress=progress,
        values=progress_values(progress, error),
        states=STATES,
        names_json=names,
    )


# What a result reads as (the outcome first: a mark, then its word).
RESULT_LABELS = {
    "resolved": "✓ resolved",
    "unresolved": "✗ unresolved",
    "not_scored": "not scored",
    "running": "running",
    "pending": "pending",
}
# The table's columns: (heading, the sort it orders by, or None).
RESULT_COLUMNS: tuple[tuple[str, str | None], ...] = (
    ("result", "result"),
    ("cell", None),
    ("instance", "instance"),
    ("arm", "arm"),
    ("rep", "rep"),
    ("state", "state"),
    ("cost", "cost"),
    ("wall", "wall"),
    ("attempts", "attempts"),
    ("updated", "updated"),
)


def query_params(
    q: ResultQuery, as_of: int | None, changes: Mapping[str, object] | None = None
) -> dict[str, str]:
    """The query string of ``q`` with ``changes`` (None: left out); defaults left out, so
    one table has one URL."""
    params: dict[str, object] = {
        "state": q.state,
        "result": q.result,
        "arm": q.arm,
        "instance": q.instance,
        "q": q.text,
        "sort": None if q.sort == "instance" else q.sort,
        "order": "desc" if q.desc else None,
        "page": None if q.page == 1 else q.page,
        "as_of": as_of,
    }
    params.update(changes or {})
    return {k: str(v) for k, v in params.items() if v is not None and v != ""}


class _Links:
    """The page's own URLs (every one under the campaign's path, fully quoted)."""

    def __init__(self, q: ResultQuery, as_of: int | None) -> None:
        self.q = q
        self.as_of = as_of
        self.base = campaign_url(q.campaign)

    def to(self, **changes: object) -> str:
        query = urlencode(query_params(self.q, self.as_of, changes))
        return self.base + (f"?{query}" if query else "")

    def sort(self, column: str) -> str:
        desc = not self.q.desc if self.q.sort == column else False
        return self.to(
            sort=None if column == "instance" and not desc else column,
            order="desc" if desc else None,
            page=None,
        )

    def fragment(self) -> str:
        query = urlencode(query_params(self.q, self.as_of))
        return self.base + "/results" + (f"?{query}" if query else "")


def _results_context(q: ResultQuery, page: ResultPage, as_of: int | None) -> dict[str, object]:
    return {
        "q": q,
        "page": page,
        "as_of": as_of,
        "links": _Links(q, as_of),
        "labels": RESULT_LABELS,
        "results": RESULTS,
        "columns": RESULT_COLUMNS,
        "states": STATES,
    }


def results_fragment(q: ResultQuery, page: ResultPage, as_of: int | None = None) -> str:
    """The results region alone (counts, table, pages): what the page's live updates
    fetch and put in place of its own."""
    return _render("results.html", **_results_context(q, page, as_of))


def campaign_page(
    q: ResultQuery,
    page: ResultPage,
    *,
    as_of: int | None,
    head: int,
) -> str:
    return _render(
        "campaign.html",
        campaign=q.campaign,
        head=head,
        scrub_at=as_of if as_of is not None else head,
        hidden=query_params(q, None, {"page": None}),
        **_results_context(q, page, as_of),
    )


# --------------------------------------------------------------------------- the rest


def _instance_links(report: Report, as_of: int | None) -> Callable[[str], str | None]:
    """Where an instance of the report's matrix links to: its cells, the campaign page
    filtered to it (of its first campaign, when several ran it), as of the same event."""
    campaign_of_arm = {a.arm: a.campaign for a in report.arms}
    campaigns: dict[str, str] = {}
    for row in report.instances:
        named = sorted(c for a in row.arms if (c := campaign_of_arm.get(a)) is not None)
        chosen = named[0] if named else report.campaigns[0] if report.campaigns else None
        if chosen is not None:
            campaigns[row.instance] = chosen

    def link(instance: str) -> str | None:
        campaign = campaigns.get(instance)
        if campaign is None:
            return None
        query = {"instance": instance, **({"as_of": str(as_of)} if as_of is not None else {})}
        return campaign_url(campaign) + "?" + urlencode(query)

    return link


def report_page(report: Report, campaigns: Sequence[str] = (), as_of: int | None = None) -> str:
    query = "&".join(
        [f"campaign={quote(c, safe='')}" for c in campaigns]
        + ([f"as_of={as_of}"] if as_of is not None else [])
    )
    return _render(
        "report.html",
        # The report escapes every name itself (tests/report/test_render.py), the links'
        # addresses too.
        body=Markup(html_body(report, _instance_links(report, as_of))),
        page_url="/report.html" + (f"?{query}" if query else ""),
    )


def cell_page(cell: CellView) -> str:
    return _render("cell.html", cell=cell, labels=RESULT_LABELS)


def error_page(status: int, message: str) -> str:
    return _render("error.html", status=status, message=message)
