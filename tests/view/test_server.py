"""The view's app in-process (Starlette's TestClient): routes, the guard, the headers."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from starlette.testclient import TestClient

from arenad.errors import StoreError
from arenad.home import Home, open_store
from arenad.report.render import HTML_PAGE_CSP, html_page
from arenad.report.service import report_store
from arenad.store.memory import InMemoryEventStore
from arenad.view import server
from arenad.view.pages import overview_page
from arenad.view.server import CSP, TOKEN_COOKIE, build_app, token_cookie_value
from events import cell as ev
from events.base import Recorded
from tests.events.samples import make_spec
from tests.view.view_log import XSS_CELL, build_view_log

LOCAL = "http://127.0.0.1:8686"
TOKEN = "the-homes-view-token"


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    home = tmp_path_factory.mktemp("server") / "home"
    asyncio.run(build_view_log(home))
    return home


@pytest.fixture
def client(home: Path) -> Iterator[TestClient]:
    app = build_app(Home(home), token=TOKEN)
    with TestClient(app, base_url=LOCAL, headers={"authorization": f"Bearer {TOKEN}"}) as c:
        yield c


def test_on_loopback_too_every_request_needs_the_token(home: Path) -> None:
    """A cell on the host's network shares the loopback: without the token it learns
    nothing, not even which cells or campaigns exist (the refusal is one fixed line)."""
    with TestClient(build_app(Home(home), token=TOKEN), base_url=LOCAL) as c:
        cell = f"/cells/{quote(XSS_CELL, safe='')}"
        for path in ("/", "/events", cell, "/campaigns/web", "/report.html", "/static/live.js"):
            r = c.get(path)
            assert r.status_code == 401, path
            assert "web" not in r.text and XSS_CELL not in r.text
        assert c.get(cell, headers={"authorization": f"Bearer {TOKEN}"}).status_code == 200
    with pytest.raises(ValueError, match="must not be empty"):
        build_app(Home(home), token=" ")


def test_every_page_answers_with_the_strict_headers(client: TestClient) -> None:
    for path in ("/", "/campaigns/web", f"/cells/{quote(XSS_CELL, safe='')}", "/report"):
        r = client.get(path)
        assert r.status_code == 200, path
        assert r.headers["content-type"] == "text/html; charset=utf-8"
        assert r.headers["content-security-policy"] == CSP
        assert r.headers["x-content-type-options"] == "nosniff"
        assert r.headers["x-frame-options"] == "DENY"
        assert r.headers["referrer-policy"] == "no-referrer"
        assert r.headers["cache-control"] == "no-store"
        assert "<script>" not in r.text and " style=" not in r.text and "<style" not in r.text
    assert client.get("/static/live.js").headers["content-type"].startswith("text/javascript")


def test_unknown_things_are_404_pages(client: TestClient) -> None:
    for path in ("/cells/web%3Anope%3ASOLO%3A0", "/campaigns/nope", "/report?campaign=nope"):
        r = client.get(path)
        assert r.status_code == 404 and "<h1>404</h1>" in r.text, path
    assert "no such campaign: nope" in client.get("/report?campaign=nope").text
    assert client.post("/").status_code == 405


async def _report_page(home: Path) -> bytes:
    async with open_store(Home(home)) as store:
        return html_page(await report_store(store, ["web"]))


def test_the_report_file_is_the_report_page(client: TestClient, home: Path) -> None:
    r = client.get("/report.html?campaign=web")
    assert r.content == asyncio.run(_report_page(home))
    # Its own policy: the page inlines its style.
    assert r.headers["content-security-policy"] == HTML_PAGE_CSP
    page = client.get("/report?campaign=web").text
    assert 'href="/report.html?campaign=web"' in page and page.count("<svg") == 2


async def _report_file_as_of(home: Path, as_of: int) -> bytes:
    async with open_store(Home(home)) as store:
        return html_page(await report_store(store, ["web"], as_of=as_of))


def test_as_of_shows_the_report_as_the_log_stood(client: TestClient, home: Path) -> None:
    page = client.get("/report?campaign=web&as_of=3").text
    assert "as the log stood at event 3" in page
    assert 'href="/report.html?campaign=web&amp;as_of=3"' in page
    r = client.get("/report.html?campaign=web&as_of=3")
    assert r.content == asyncio.run(_report_file_as_of(home, 3))
    assert client.get("/report?as_of=soon").status_code == 400
    assert client.get("/report?as_of=99999999").status_code == 404


def test_the_icon_is_served_not_a_404(client: TestClient) -> None:
    r = client.get("/favicon.ico")
    assert r.status_code == 200 and r.headers["content-type"].startswith("image/svg+xml")
    assert r.content == client.get("/static/favicon.svg").content
    assert '<link rel="icon" href="/static/favicon.svg"' in client.get("/").text


@pytest.mark.parametrize("host", ["127.0.0.1:8686", "localhost", "[::1]:8686", "LOCALHOST:1"])
def test_a_loopback_bind_serves_local_host_names(client: TestClient, host: str) -> None:
    assert client.get("/", headers={"host": host}).status_code == 200


@pytest.mark.parametrize("host", ["evil.example", "evil.example:8686", "127.0.0.1.evil:80", ""])
def test_a_loopback_bind_refuses_other_host_names(client: TestClient, host: str) -> None:
    # A page elsewhere that rebinds its own name to 127.0.0.1 sends its own Host.
    r = client.get("/", headers={"host": host})
    assert r.status_code == 421 and r.headers["content-security-policy"] == CSP


def test_with_a_token_every_request_carries_it(home: Path) -> None:
    token = "s3cret;token with spaces"
    app = build_app(Home(home), token=token, loopback=False)
    with TestClient(app, base_url="http://view.example") as c:
        for path in ("/", "/events", "/static/view.css", "/report.html", "/nope"):
            assert c.get(path).status_code == 401, path
        assert c.get("/", headers={"authorization": f"Bearer {token}"}).status_code == 200
        assert c.get("/", headers={"x-arenad-token": token}).status_code == 200
        assert c.get("/", headers={"authorization": "Bearer wrong"}).status_code == 401
        assert c.get("/?token=wrong").status_code == 401
        # Once in the query: a redirect without it, and a cookie holding a digest of it.
        r = c.get("/report", params={"token": token, "campaign": "web"}, follow_redirects=False)
        assert r.status_code == 303 and r.headers["location"] == "/report?campaign=web"
        cookie = r.headers["set-cookie"]
        assert cookie.startswith(f"{TOKEN_COOKIE}={token_cookie_value(token)};")
        assert "HttpOnly" in cookie and "SameSite=strict" in cookie and token not in cookie
        assert c.get("/report?campaign=web").status_code == 200  # the client keeps the cookie
        c.cookies.clear()
        c.cookies.set(TOKEN_COOKIE, "0" * 64)
        assert c.get("/").status_code == 401


class _FlakyStore(InMemoryEventStore):
    """A real in-memory store whose reads fail while ``failing`` is set (a locked disk)."""

    failing = True

    async def read_batches(  # type: ignore[override]
        self, after_seq: int = 0, batch_size: int = 2000, tags: Any = None
    ) -> AsyncIterator[list[Recorded]]:
        if self.failing:
            raise StoreError("database is locked")
        async for batch in super().read_batches(after_seq, batch_size, tags):
            yield batch


async def test_a_failed_read_is_on_the_page_and_tried_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(server, "RETRY_S", 0.01)
    store = _FlakyStore()
    spec = make_spec(campaign="flaky")
    await store.append(f"cell/{spec.cell_id}", 0, [ev.CellSubmitted(spec=spec)])
    follower = server.Follower(poll_s=0.01)
    task = asyncio.create_task(follower.run(store))
    try:
        await asyncio.wait_for(follower.ready.wait(), 10)
        assert follower.error == "StoreError: database is locked"
        page = overview_page(follower.fold.snapshot(), follower.error)
        assert "The log could not be read (StoreError: database is locked); retrying." in page
        store.failing = False
        deadline = asyncio.get_running_loop().time() + 10
        while follower.error is not None:
            assert asyncio.get_running_loop().time() < deadline, "the follower never recovered"
            await follower.wait(follower.version, 1.0)
        assert [c.name for c in follower.fold.snapshot().campaigns] == ["flaky"]
    finally:
        follower.close()
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


def test_as_of_takes_an_event_or_a_time_from_the_logs_recorded_times(client: TestClient) -> None:
    # The first transaction (one event) was recorded at T0 + 1 s (2023-11-14 22:13:21 UTC).
    for when in ("2023-11-14T22:13:21Z", "2023-11-14T22:13:21.999+00:00", "2023-11-14T22:13:21"):
        r = client.get(f"/campaigns/web?as_of={quote(when)}")
        assert r.status_code == 200, when
        assert "As the log stood after event 1</b>" in r.text
    assert "as the log stood at event 1." in client.get("/report?as_of=2023-11-14T22:13:21Z").text
    # An event number names itself; after the last event is the last event.
    assert "after event 2</b>" in client.get("/campaigns/web?as_of=2").text
    late = client.get("/campaigns/web?as_of=2099-01-01T00:00:00Z")
    assert late.status_code == 200 and "As the log stood after event" in late.text
    for bad, status in (
        ("yesterday", 400),
        ("2023-11-14T23:13:21+01:00", 400),
        ("0", 400),
        ("99999", 400),
        ("2000-01-01T00:00:00Z", 404),
    ):
        r = client.get(f"/campaigns/web?as_of={quote(bad)}")
        assert r.status_code == status, bad
    # A campaign with no cell yet at that event is not there.
    assert client.get("/campaigns/nope").status_code == 404


def test_the_campaign_pages_results_region_alone(client: TestClient) -> None:
    r = client.get("/campaigns/web/results?result=resolved")
    assert r.status_code == 200 and r.text.startswith('<p class="counts">')
    assert XSS_CELL in r.text and "<html" not in r.text
    assert client.get("/campaigns/web/results?sort=nope").status_code == 400


def test_the_reports_instances_link_to_their_cells(client: TestClient, home: Path) -> None:
    page = client.get("/report?campaign=web&as_of=3").text
    assert '<a href="/campaigns/web?instance=xss&amp;as_of=3">xss</a>' in page
    # The file `report --html` writes has no links (it stands alone).
    assert b"<a href" not in asyncio.run(_report_file_as_of(home, 3))
