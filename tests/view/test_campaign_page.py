"""The campaign page as a results table, in a real browser against the real CLI: filter,
sort, pages, the report's instances leading to their cells, ``?as_of=`` scrubbed back, live
updates, and hostile names and failures kept as text."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, quote, urlencode, urlsplit

import pytest

from arenad.home import Home, open_store
from arenad.store.base import AppendRequest
from tests.view.browser import run_async, view_server
from tests.view.results_log import CELLS, XSS_ERROR, XSS_INSTANCE, build_results_log, finish

DEADLINE_MS = 30_000
PER_RESULT = CELLS // 5


@pytest.fixture
def home(tmp_path: Path) -> Path:
    # Each test its own: one of them appends to it.
    run_async(build_results_log(tmp_path / "home"))
    return tmp_path / "home"


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    page.set_default_timeout(DEADLINE_MS)
    page.on("dialog", lambda d: (_ for _ in ()).throw(AssertionError(f"a dialog: {d.message}")))
    yield page
    context.close()


def _query(page: Any) -> dict[str, list[str]]:
    return parse_qs(urlsplit(page.url).query)


def _rows(page: Any) -> Any:
    return page.locator("table.results tbody tr[data-cell]")


def _count(page: Any, result: str) -> str:
    return str(page.locator(f'[data-count="{result}"]').text_content())


def test_filter_sort_and_pages(page: Any, home: Path, tmp_path: Path) -> None:
    with view_server(home, log=tmp_path / "view.log") as server:
        page.goto(server.signed("/campaigns/big"))
        # A page is bounded: 100 rows of 230, three pages; the counts are the campaign's.
        assert _rows(page).count() == 100
        assert [_count(page, r) for r in ("resolved", "running")] == [str(PER_RESULT)] * 2
        assert "page 1 of 3" in page.locator("main").inner_text()
        first = _rows(page).first.get_attribute("data-cell")
        page.screenshot(path=tmp_path / "campaign.png", full_page=True)

        page.click("a[rel=next]")
        page.wait_for_url("**page=2*")
        assert _rows(page).count() == 100 and _rows(page).first.get_attribute("data-cell") != first
        page.click("a[rel=last]")
        page.wait_for_url("**page=3*")
        assert _rows(page).count() == CELLS - 200

        # A filter: the form's GET, its values in the URL; every row says the result.
        page.goto(server.at("/campaigns/big"))
        page.select_option("select[name=result]", "resolved")
        page.select_option("select[name=arm]", "A")
        page.click("form.filters button")
        page.wait_for_url("**result=resolved*")
        assert _query(page)["arm"] == ["A"]
        results = page.locator("table.results tbody td:first-child").all_inner_texts()
        assert results and all(r == "✓ resolved" for r in results)
        assert page.locator("#matching").inner_text() == str(len(results))
        page.fill("input[name=q]", "i01")
        page.click("form.filters button")
        page.wait_for_url("**q=i01*")
        ids = page.locator("table.results tbody td:nth-child(3)").all_inner_texts()
        assert ids and all("i01" in i for i in ids)

        # Sorted by cost: a heading's link, again for descending; the filters stay.
        page.goto(server.at("/campaigns/big?result=resolved"))
        page.click("th a:text('cost')")
        page.wait_for_url("**sort=cost*")
        page.click("th a:text('cost')")
        page.wait_for_url("**order=desc*")
        assert _query(page)["result"] == ["resolved"]
        costs = [
            float(c.lstrip("$"))
            for c in page.locator("table.results tbody td:nth-child(7)").all_inner_texts()
        ]
        assert costs == sorted(costs, reverse=True) and len(costs) == PER_RESULT
        page.screenshot(path=tmp_path / "campaign-sorted.png", full_page=True)

        # A value the page cannot mean is said, not an empty table.
        refused = page.goto(server.at("/campaigns/big?result=maybe"))
        assert refused is not None and refused.status == 400
        assert "result must be one of" in page.locator("main").inner_text()


def test_scrub_back_and_the_page_follows_the_log(page: Any, home: Path, tmp_path: Path) -> None:
    with view_server(home, log=tmp_path / "view.log") as server:
        page.goto(server.signed("/campaigns/big"))
        page.wait_for_selector("#live-state:text('live')")
        assert _count(page, "pending") == str(PER_RESULT)
        # The scrubber, moved back to the last submission: every cell was pending then.
        page.eval_on_selector(
            "#scrub",
            f"el => {{ el.value = '{CELLS}'; el.dispatchEvent(new Event('change')); }}",
        )
        page.wait_for_url(f"**as_of={CELLS}*")
        assert _count(page, "pending") == str(CELLS) and _count(page, "resolved") == "0"
        assert f"As the log stood after event {CELLS}" in page.locator("main").inner_text()
        page.screenshot(path=tmp_path / "campaign-as-of.png", full_page=True)
        # A time works too: the log's recorded times, resolved to an event.
        page.goto(server.at("/campaigns/big?as_of=2023-11-14T22:13:21Z"))
        assert _count(page, "pending") == str(CELLS)

        # A live page: a running cell resolves, the table follows without a reload.
        page.goto(server.at("/campaigns/big?result=running"))
        page.wait_for_selector("#live-state:text('live')")
        marker = page.evaluate("() => (window.__kept = 'this page')")
        running = _rows(page).count()
        run_async(_append(home, finish(3)))
        page.wait_for_function(
            "n => document.querySelector('[data-count=resolved]').textContent === String(n)",
            arg=PER_RESULT + 1,
        )
        assert _rows(page).count() == running - 1
        # The scrubber reaches the log's new end.
        head = run_async(_head(home))
        assert page.eval_on_selector("#scrub", "el => [el.max, el.value]") == [str(head)] * 2
        assert page.evaluate("() => window.__kept") == marker


async def _head(home: Path) -> int:
    async with open_store(Home(home)) as store:
        return await store.last_seq()


async def _append(home: Path, requests: list[AppendRequest]) -> None:
    async with open_store(Home(home)) as store:
        await store.append_many(requests)


def test_hostile_names_and_reasons_stay_text(page: Any, home: Path, tmp_path: Path) -> None:
    with view_server(home, log=tmp_path / "view.log") as server:
        page.goto(server.signed("/campaigns/big?" + "q=" + quote("<img")))
        assert page.evaluate("() => window.__xss") is None
        assert page.locator("main img, main script").count() == 0
        assert XSS_INSTANCE in page.locator("table.results").inner_text()
        page.goto(server.at("/campaigns/big?result=not_scored"))
        why = page.locator(".why").first.inner_text()
        assert why == f"infrastructure failure: {XSS_ERROR}"
        assert page.evaluate("() => window.__xss") is None
        assert page.locator("main script").count() == 0


def test_a_report_instance_leads_to_its_cells(page: Any, home: Path, tmp_path: Path) -> None:
    with view_server(home, log=tmp_path / "view.log") as server:
        page.goto(server.signed("/report?campaign=big"))
        page.screenshot(path=tmp_path / "report.png", full_page=True)
        page.click("a:text-is('i005')")
        page.wait_for_url("**/campaigns/big?instance=i005")
        cells = _rows(page).all()
        assert [c.get_attribute("data-cell") for c in cells] == ["big:i005:A:0"]
        assert page.locator("table.results tbody td:first-child").inner_text() == "✓ resolved"
        # As of an event, the links keep it; a hostile instance's link is its own.
        page.goto(server.at(f"/report?campaign=big&as_of={CELLS}"))
        href = page.locator(f"a:text-is('{XSS_INSTANCE}')").get_attribute("href")
        assert href == "/campaigns/big?" + urlencode({"instance": XSS_INSTANCE, "as_of": CELLS})
        page.click(f"a:text-is('{XSS_INSTANCE}')")
        page.wait_for_url(f"**as_of={CELLS}")
        assert _count(page, "pending") == str(CELLS)
        assert [c.get_attribute("data-cell") for c in _rows(page).all()] == [
            f"big:{XSS_INSTANCE}:A:0"
        ]
        assert page.evaluate("() => window.__xss") is None
