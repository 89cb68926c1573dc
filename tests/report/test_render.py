"""The report's forms: the JSON contract, the self-contained page, the terminal tables."""

from __future__ import annotations

import datetime as dt
import io
import json
from html.parser import HTMLParser

import msgspec
from hypothesis import given
from hypothesis import strategies as st
from rich.console import Console

from arenad.report.project import CellFacts, Report, RunFacts, build_report, cell_facts
from arenad.report.render import html_page, json_bytes, terminal, utc
from events.base import Recorded
from events.codec import event_tag
from tests.report.arena_log import T0, arena_requests

HOSTILE_ARM = "<script>alert(1)</script>[bold]"
HOSTILE_INSTANCE = '"><img src=x onerror=alert(1)>'


def _facts(arm: str, iid: str, rep: int, outcome: str, cost: float | None) -> CellFacts:
    return CellFacts(
        cell_id=f"c:{iid}:{arm}:{rep}",
        campaign="c",
        instance_id=iid,
        arm=arm,
        arm_kind="command",
        rep=rep,
        attempt=1,
        outcome=outcome,  # type: ignore[arg-type]
        scored=True,
        runs=(
            RunFacts(
                attempt=1,
                wall_s=2.0,
                cost_usd=cost,
                tokens_in=10,
                tokens_out=1,
                settled_at_ms=T0 + 60_000 * rep,
            ),
        ),
    )


def _hostile() -> Report:
    return build_report(
        [
            _facts(HOSTILE_ARM, HOSTILE_INSTANCE, 0, "resolved", 0.5),
            _facts(HOSTILE_ARM, HOSTILE_INSTANCE, 1, "unresolved", None),
            _facts("plain", HOSTILE_INSTANCE, 0, "unresolved", 0.25),
            _facts("plain", "i2", 1, "resolved", 0.25),
        ],
        ["c"],
    )


def test_json_has_the_documented_shape() -> None:
    doc = json.loads(json_bytes(_hostile()))
    arm_keys = {"arm", "cells", "scored", "resolved", "infra_failed", "resolve_rate", "ci95"}
    arm_keys |= {"pass_at_k", "cost_usd", "tokens_in", "tokens_out"}
    pair_keys = {"a", "b", "instances", "wins", "losses", "ties", "mcnemar_p", "diff"}
    pair_keys |= {"diff_ci95"}
    assert all(arm_keys <= set(a) for a in doc["arms"])
    assert all(pair_keys <= set(p) for p in doc["pairs"])
    first = doc["arms"][0]
    assert isinstance(first["ci95"], list) and len(first["ci95"]) == 2
    assert set(first["pass_at_k"]) == {"1", "2"}
    # One run's cost is unknown: null, never a partial sum shown as the total.
    assert first["cost_usd"] is None and first["cost_usd_known"] == 0.5


class _Page(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[str] = []
        self.attrs: list[tuple[str, str | None]] = []
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        self.attrs += attrs

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def _parse(page: bytes) -> _Page:
    parser = _Page()
    parser.feed(page.decode())
    return parser


def test_the_page_is_self_contained_and_inert() -> None:
    page = html_page(_hostile())
    parsed = _parse(page)
    # Nothing executable and nothing loaded: no script, no event handler, no element that
    # fetches (the CSP forbids it too); the only URL is the SVG namespace.
    assert "script" not in parsed.tags and "img" not in parsed.tags
    assert not [name for name, _ in parsed.attrs if name.startswith("on")]
    assert not [v for n, v in parsed.attrs if n in ("src", "href")]
    urls = {v for _, v in parsed.attrs if v and "://" in v}
    assert urls == {"http://www.w3.org/2000/svg"}
    assert "default-src 'none'" in page.decode()
    # The hostile names are there, as text.
    text = "".join(parsed.text)
    assert HOSTILE_ARM in text and HOSTILE_INSTANCE in text
    assert parsed.tags.count("svg") == 3


def test_the_page_plots_the_figures() -> None:
    page = html_page(_hostile()).decode()
    # The hostile arm: 1 of 2 decided, Wilson [9.5, 90.5] %; plain: 1 of 2 as well.
    assert "50.0% [9.5, 90.5] n=2" in page
    # The cost plot leaves out the arm whose cost is unknown, and says so.
    assert "Not plotted (cost unknown or no decided cells): &lt;script&gt;" in page
    assert "since 2023-11-14 22:13:20 UTC" in page


def test_the_page_is_deterministic() -> None:
    report = build_report(
        [_facts("a", "i1", 0, "resolved", 0.1), _facts("b", "i1", 0, "unresolved", 0.2)], ["c"]
    )
    assert html_page(report) == html_page(report)
    empty = html_page(build_report([], []))
    assert b"No cells." in empty and b"<svg" not in empty


def _terminal_text(report: Report) -> str:
    out = io.StringIO()
    Console(file=out, width=200, color_system=None).print(terminal(report))
    return out.getvalue()


def test_the_terminal_tables_print_names_as_text() -> None:
    text = _terminal_text(_hostile())
    # Console markup in a name is printed, not interpreted.
    assert HOSTILE_ARM in text
    assert "≥$0.5000 (1 unknown)" in text
    assert "[9.5, 90.5]" in text


def test_the_terminal_shows_the_arena() -> None:
    facts = []
    for request in arena_requests():
        # The cells' facts straight from their events (the store adds envelopes only).
        records = [
            Recorded(i + 1, request.stream, i + 1, event_tag(e), 1, T0 + i, e)
            for i, e in enumerate(request.events)
        ]
        one = cell_facts(records)
        assert one is not None
        facts.append(one)
    text = _terminal_text(build_report(facts, ["arena", "side"]))
    for expected in ("ALPHA", "71.4%", "[27.6, 94.2]", "@1=75.0% @2=66.7%", "+50.0 pp", "0.625"):
        assert expected in text, expected


@given(st.integers(min_value=0, max_value=253_402_300_799_999))
def test_utc_agrees_with_datetime(ms: int) -> None:
    # The page's own calendar arithmetic (a pure module has no datetime) against the stdlib.
    stamp = dt.datetime.fromtimestamp(ms // 1000, tz=dt.UTC)
    assert utc(ms) == stamp.strftime("%Y-%m-%d %H:%M:%S UTC")
    assert utc(0) == "1970-01-01 00:00:00 UTC"


def test_a_rate_over_self_reported_verdicts_is_labeled_so() -> None:
    cells = [
        msgspec.structs.replace(_facts("ws", "i1", 0, "resolved", 0.5), self_reported=True),
        msgspec.structs.replace(_facts("ws", "i2", 0, "unresolved", 0.5), tampered=True),
        _facts("co", "i1", 0, "resolved", 0.5),
    ]
    report = build_report(cells, ["c"])
    by_arm = {a.arm: a for a in report.arms}
    assert (by_arm["ws"].self_reported, by_arm["ws"].tampered) == (1, 1)
    assert (by_arm["co"].self_reported, by_arm["co"].tampered) == (0, 0)
    out = io.StringIO()
    Console(file=out, width=250, color_system=None).print(terminal(report))
    text = out.getvalue()
    assert "50.0% (self-reported: 1 of 2)" in text and text.count("self-reported") == 1
    assert "self-reported: 1 of 2" in html_page(report).decode()
