"""`arenad view` in a real browser: Playwright driving Debian's chromium against the real
CLI serving a real home. Each test saves a screenshot of every page it looks at under
its tmp_path (``*.png``)."""

from __future__ import annotations

import json
import os
import signal
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

from arenad.home import Home, open_store
from arenad.store.base import AppendRequest
from events import cell as ev
from events.streams import cell_stream
from tests.conftest import DemoRun
from tests.daemon.support import cli
from tests.events.samples import make_spec
from tests.view.browser import run_async, view_server
from tests.view.view_log import (
    ARGS_XSS,
    CALM_CELL,
    IMG_XSS,
    LINK_XSS,
    PATCH,
    TOOL_XSS,
    USER_XSS,
    XSS_CELL,
    build_view_log,
)

# Playwright's waits are deadlines, not sleeps: a condition polled until it holds.
DEADLINE_MS = 30_000


@pytest.fixture
def home(tmp_path: Path) -> Path:
    run_async(build_view_log(tmp_path / "home"))
    return tmp_path / "home"


@pytest.fixture
def page(browser: Any) -> Any:
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    page.set_default_timeout(DEADLINE_MS)
    # A dialog (alert, confirm) would mean agent text ran as script: fail loudly.
    page.on("dialog", lambda d: (_ for _ in ()).throw(AssertionError(f"a dialog: {d.message}")))
    yield page
    context.close()


def _live(page: Any, key: str) -> str:
    return str(page.locator(f'[data-live="{key}"]').first.text_content())


def _wait_live(page: Any, key: str, value: str) -> None:
    page.wait_for_function(
        '([k, v]) => { const el = document.querySelector(`[data-live="${k}"]`);'
        " return el !== null && el.textContent === v; }",
        arg=[key, value],
    )


async def _append(home: Path, requests: list[AppendRequest]) -> None:
    async with open_store(Home(home)) as store:
        await store.append_many(requests)


def _finish_calm_cell(home: Path) -> None:
    """What a daemon would append as the running cell ends: in one transaction."""
    events: list[Any] = [
        ev.RunCompleted(attempt=1, rc=0, wall_s=3.0),
        ev.CellVerified(attempt=1, scored=True, verify_rc=0, verify_pass=True),
        ev.CellRecovered(
            attempt=1, store_available=True, spend=ev.SpendFigures(cost_usd=0.25, sessions=1)
        ),
    ]
    run_async(_append(home, [AppendRequest(cell_stream(CALM_CELL), 3, events)]))


def test_the_overview_loads_and_follows_the_log(page: Any, home: Path, tmp_path: Path) -> None:
    with view_server(home, log=tmp_path / "view.log") as server:
        page.goto(server.url)
        assert page.title() == "campaigns · arenad view"
        page.wait_for_selector("#live-state:text('live')")
        assert (_live(page, "running@web"), _live(page, "recovered@web")) == ("1", "1")
        assert _live(page, "spend@web") == "$0.0125"
        page.screenshot(path=tmp_path / "overview.png", full_page=True)

        _finish_calm_cell(home)
        _wait_live(page, "recovered@web", "2")
        assert (_live(page, "running@web"), _live(page, "spend@web")) == ("0", "$0.2625")
        assert _live(page, "recovered") == "2"
        page.screenshot(path=tmp_path / "overview-updated.png", full_page=True)

        # A new campaign is a new row: the page renders itself anew.
        spec = make_spec(campaign="later", instance_id="i1")
        submitted = AppendRequest(cell_stream(spec.cell_id), 0, [ev.CellSubmitted(spec=spec)])
        run_async(_append(home, [submitted]))
        page.wait_for_selector('tr[data-campaign="later"]')
        _wait_live(page, "submitted@later", "1")
        page.screenshot(path=tmp_path / "overview-new-campaign.png", full_page=True)


def test_a_cell_page_shows_its_patch_and_transcript(page: Any, home: Path, tmp_path: Path) -> None:
    with view_server(home, log=tmp_path / "view.log") as server:
        page.goto(server.url)
        page.click("text=web")
        page.click(f"text={XSS_CELL}")
        page.wait_for_url(server.at(f"/cells/{quote(XSS_CELL, safe='')}"))
        # The patch, as a diff: every line of it, added and removed lines marked.
        diff = page.locator("pre.diff")
        assert diff.inner_text().splitlines() == PATCH.splitlines()
        assert page.locator("pre.diff .d-add").inner_text().startswith("+    return a + b")
        assert page.locator("pre.diff .d-del").inner_text() == "-    return a - b"
        # The transcript: the user's message, the assistant's text and call, the result.
        user = page.locator(".msg.role-user pre").inner_text()
        assert user == USER_XSS
        assistant = page.locator(".msg.role-assistant").first.inner_text()
        assert LINK_XSS in assistant and IMG_XSS in assistant and "bash" in assistant
        assert json.loads(page.locator(".call pre").inner_text()) == {"command": ARGS_XSS}
        assert page.locator(".msg.role-tool pre").inner_text() == TOOL_XSS
        assert "1 passed" in page.locator("pre.log").inner_text()
        timeline = page.locator("#timeline").inner_text()
        assert "cell.patch-captured" in timeline and "capture.opencode-session" in timeline
        page.screenshot(path=tmp_path / "cell.png", full_page=True)


def test_agent_markup_stays_inert(page: Any, home: Path, tmp_path: Path) -> None:
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    with view_server(home, log=tmp_path / "view.log") as server:
        response = page.goto(server.signed(f"/cells/{quote(XSS_CELL, safe='')}"))
        assert response is not None and response.status == 200
        csp = response.headers["content-security-policy"]
        assert "script-src 'self'" in csp and "default-src 'none'" in csp
        page.screenshot(path=tmp_path / "cell-xss.png", full_page=True)
        # Nothing the agent wrote ran, and none of it became an element.
        assert page.evaluate("() => window.__xss") is None
        inert = page.evaluate(
            """() => ({
                scripts: document.scripts.length,
                javascriptLinks: document.querySelectorAll('a[href^="javascript:"]').length,
                frames: document.querySelectorAll("iframe, img, svg, style:not(head style)").length,
                handlers: [...document.querySelectorAll("*")].filter(
                    (el) => [...el.attributes].some((a) => a.name.startsWith("on"))).length,
                links: [...document.querySelectorAll("a")].map((a) => a.getAttribute("href")),
                visible: getComputedStyle(document.body).display,
            })"""
        )
        assert inert["scripts"] == inert["javascriptLinks"] == inert["frames"] == 0
        assert inert["handlers"] == 0 and inert["visible"] != "none"
        assert all(href.startswith(("/", "#")) for href in inert["links"]), inert["links"]
        # ...and all of it is on the page, as text (the collapsed sections opened).
        page.eval_on_selector_all("details", "els => els.forEach((d) => { d.open = true; })")
        text = page.locator("main").inner_text()
        for hostile in (USER_XSS, LINK_XSS, TOOL_XSS, "<script>window.__xss='patch'</script>"):
            assert hostile in text, hostile
        assert "<iframe src=\"javascript:window.__xss='log'\"></iframe>" in text
        assert "<svg onload=window.__xss='line'>" in text
        assert errors == []


def test_the_report_page_and_the_report_file(page: Any, home: Path, tmp_path: Path) -> None:
    requests: list[str] = []
    page.on("request", lambda r: requests.append(r.url))
    with view_server(home, log=tmp_path / "view.log") as server:
        page.goto(server.signed("/report"))
        # The resolve rate and spend plots; no cost plot while a run's cost is unknown.
        assert page.locator("svg").count() == 2
        assert "No arm has both a known cost" in page.locator("main").inner_text()
        assert "Outcomes" in page.locator("main").inner_text()
        page.screenshot(path=tmp_path / "report.png", full_page=True)
        # /report.html is byte for byte what `arenad report --html` writes.
        written = tmp_path / "report.html"
        assert cli(home, "report", "--html", str(written)).returncode == 0
        signed = urllib.request.Request(server.at("/report.html"), headers=server.headers)
        with urllib.request.urlopen(signed) as served:
            assert served.read() == written.read_bytes()
    # The file stands alone: opened from disk, it asks for nothing else.
    requests.clear()
    page.goto(written.as_uri())
    assert page.locator("svg").count() == 2
    assert requests == [written.as_uri()]
    page.screenshot(path=tmp_path / "report-file.png", full_page=True)


def test_on_loopback_the_view_needs_its_token_too(page: Any, home: Path, tmp_path: Path) -> None:
    """A cell on the host's network shares the loopback: without the home's token (which
    only the CLI prints) the view answers 401 and shows nothing of the log."""
    with view_server(home, log=tmp_path / "view.log") as server:
        assert server.token and server.token == (home / "view.token").read_text().strip()
        for path in ("/", f"/cells/{quote(XSS_CELL, safe='')}", "/report.html"):
            refused = page.goto(server.at(path))
            assert refused is not None and refused.status == 401, path
            assert "web" not in page.content() and XSS_CELL not in page.content()
        # The printed URL logs the browser in: the token leaves the address bar at once,
        # and a cookie (HttpOnly, SameSite=Strict, a digest) carries it from then on.
        page.goto(server.url)
        assert page.url == server.at("/")
        page.wait_for_selector("#live-state:text('live')")
        (cookie,) = page.context.cookies()
        assert cookie["httpOnly"] and cookie["sameSite"] == "Strict"
        assert server.token not in cookie["value"]
        page.screenshot(path=tmp_path / "overview-home-token.png", full_page=True)


def test_a_non_loopback_bind_needs_a_token(page: Any, home: Path, tmp_path: Path) -> None:
    refused = cli(home, "view", "--host", "0.0.0.0", "--port", "0")
    assert refused.returncode == 2 and refused.stdout == ""
    assert refused.stderr.startswith("arenad: --host 0.0.0.0 is not a loopback address")
    assert len(refused.stderr.splitlines()) == 1

    token = "t0k3n-for-the-view"
    env = {**os.environ, "ARENAD_VIEW_TOKEN": token}
    with view_server(home, "--host", "0.0.0.0", env=env, log=tmp_path / "view.log") as server:
        assert token not in server.stderr.read_text()
        local = server.url.replace("0.0.0.0", "127.0.0.1")
        for path in ("/", "/events", f"/cells/{quote(XSS_CELL, safe='')}", "/static/live.js"):
            with pytest.raises(urllib.error.HTTPError) as caught:
                urllib.request.urlopen(local.rstrip("/") + path)
            assert caught.value.code == 401, path
        bearer = urllib.request.Request(local, headers={"Authorization": f"Bearer {token}"})
        with urllib.request.urlopen(bearer) as ok:
            assert ok.status == 200
        # A browser brings the token once, in the query; then a cookie carries it.
        page.goto(f"{local}?token={token}")
        assert page.url == local
        page.wait_for_selector("#live-state:text('live')")
        assert _live(page, "recovered@web") == "1"
        page.screenshot(path=tmp_path / "overview-token.png", full_page=True)
        _finish_calm_cell(home)
        _wait_live(page, "recovered@web", "2")
    assert token not in server.stderr.read_text()


def test_the_view_stops_on_sigterm_with_a_page_open(page: Any, home: Path, tmp_path: Path) -> None:
    # The overview's event stream never ends by itself: a stop must not wait for it.
    with view_server(home, log=tmp_path / "view.log") as server:
        page.goto(server.url)
        page.wait_for_selector("#live-state:text('live')")
        server.process.terminate()
        # uvicorn shuts down, then lets the signal end the process as it would have.
        assert server.process.wait(timeout=30) == -signal.SIGTERM
        assert "Traceback" not in server.stderr.read_text()


@pytest.mark.slow
def test_the_view_of_a_real_demo_run(page: Any, tmp_path: Path, demo_run: DemoRun) -> None:
    # The real opencode CLI against the scripted model: its captured sessions are what
    # the transcripts are read from, its patches and verify logs what the log keeps.
    home = demo_run.home
    assert f"arenad --home {home} view" in demo_run.stdout
    with view_server(home, log=tmp_path / "view.log") as server:
        page.goto(server.url)
        page.wait_for_selector("#live-state:text('live')")
        assert _live(page, "recovered@demo-1") == "4" and _live(page, "failed") == "0"
        page.screenshot(path=tmp_path / "demo-overview.png", full_page=True)
        page.click("text=demo-1")
        # The click starts a navigation; read the links once the campaign page has them
        # (on a loaded machine they were read while it loaded: 0 links).
        page.wait_for_selector("td a[href^='/cells/']")
        cells = page.locator("td a[href^='/cells/']").all_inner_texts()
        assert len(cells) == 4
        for cell in cells:
            page.goto(server.at(f"/cells/{quote(cell, safe='')}"))
            assert page.locator("pre.diff .d-add").count() == 1
            assert page.locator("pre.diff .d-del").count() == 1
            # The demo's check prints nothing when it passes.
            assert "The verify command printed nothing." in page.locator("main").inner_text()
            user = page.locator(".msg.role-user pre").first.inner_text()
            assert user.startswith("[") and "gives wrong answers" in user
            calls = page.locator(".call b").all_inner_texts()
            assert calls == ["bash", "bash"], calls
            assert page.locator(".msg.role-tool").count() == 2
            assert "ok" in page.locator(".msg.role-tool pre").last.inner_text()
            assert page.locator("table.lines tbody tr").count() > 0
            page.screenshot(path=tmp_path / f"demo-{cell.replace(':', '_')}.png", full_page=True)
