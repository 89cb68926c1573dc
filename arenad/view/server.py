"""The view's ASGI app (Starlette): its routes, its guard, and the log follower.

    /                   campaigns: per-state counts and spend, live (server-sent events)
    /events             the overview's updates, as server-sent events following the log
    /campaigns/{name}   a campaign's results: one row per cell, its result first; filters,
                        order and page in the query string (``?as_of=``: as the log stood
                        then), live
    /campaigns/{name}/results   the same page's results region alone (its live updates)
    /cells/{cell_id}    one cell: attempts (run, verdict, spend, patch, verify log,
                        transcript, ingested lines) and its timeline
    /report             the report's figures and plots (``?campaign=NAME``, repeatable;
                        ``?as_of=EVENT`` or ``?as_of=TIME``: as the log stood after that
                        event, or after the last event recorded at or before that time)
    /report.html        the same report as one self-contained page (``report --html``)
    /static/...         the stylesheet, the overview's small script, the icon
    /favicon.ico        the icon (browsers ask for it whatever a page links)

Read-only: no route writes, and the store is only read. One follower task reads what is
appended (only the events the progress fold needs) and wakes the overview's streams; the
pages read the store when asked. The guard in front of everything: a Host check on a
loopback bind (a page elsewhere cannot reach the server through DNS rebinding), the
token (always: on loopback too, a cell on the host's network shares it), and the security
headers (a strict Content-Security-Policy, no sniffing, no framing, no referrer, no caching).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import logging
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from http.cookies import SimpleCookie
from importlib import resources
from urllib.parse import parse_qsl, urlencode

from starlette.applications import Starlette
from starlette.datastructures import Headers, MutableHeaders
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import HTMLResponse, PlainTextResponse, Response, StreamingResponse
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from arenad.clock import wait_for_event
from arenad.errors import UserError
from arenad.home import Home, open_store
from arenad.readmodels.moments import event_at
from arenad.readmodels.progress import PROGRESS_TAGS, ProgressFold
from arenad.readmodels.result_pages import campaign_results
from arenad.readmodels.results import ResultPage, ResultQuery
from arenad.report.render import HTML_PAGE_CSP, html_css, html_page
from arenad.report.service import report_store
from arenad.store.base import EventStore
from arenad.view.campaign import parse_query
from arenad.view.cell import cell_view
from arenad.view.pages import (
    campaign_page,
    cell_page,
    error_page,
    overview_page,
    progress_event,
    report_page,
    results_fragment,
)
from events.streams import attempt_prefixes, cell_stream

__all__ = ["CSP", "TOKEN_COOKIE", "Follower", "ViewApp", "build_app", "token_cookie_value"]

log = logging.getLogger("arenad.view")

CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:;"
    " connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)
SECURITY_HEADERS = {
    "x-content-type-options": "nosniff",
    "referrer-policy": "no-referrer",
    "x-frame-options": "DENY",
    "cross-origin-opener-policy": "same-origin",
    "cross-origin-resource-policy": "same-origin",
}
TOKEN_COOKIE = "arenad_view"
LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "::1"})
# How often the follower looks for appends by other processes (a daemon), and the least
# time between two updates it announces (a busy log is not a stream of repaints).
POLL_S = 0.5
MIN_UPDATE_S = 0.2
KEEPALIVE_S = 15.0
RETRY_S = 2.0


def token_cookie_value(token: str) -> str:
    """What the cookie holds: a digest of the token, not the token (nor its encoding)."""
    return hashlib.sha256(b"arenad-view\0" + token.encode()).hexdigest()


# --------------------------------------------------------------------------- the follower


class Follower:
    """Follows the log into a :class:`ProgressFold`; ``version`` goes up with each change.
    ``close`` ends every stream waiting on it (a server stopping)."""

    def __init__(self, poll_s: float = POLL_S) -> None:
        self.poll_s = poll_s
        self.fold = ProgressFold()
        self.version = 0
        self.closed = False
        # Why the last read of the log failed (None: it did not).
        self.error: str | None = None
        self.ready = asyncio.Event()
        self._changed = asyncio.Event()

    def _announce(self) -> None:
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()

    async def run(self, store: EventStore) -> None:
        position = 0
        while True:
            try:
                head = await store.last_seq()
                async for batch in store.read_batches(position, tags=PROGRESS_TAGS):
                    self.fold.apply_all(batch)
            except Exception as exc:
                # A read that failed (a locked or damaged store) is said on the page and
                # tried again; the figures shown are those of the last good read.
                error = f"{type(exc).__name__}: {exc}"
                if error != self.error:
                    log.warning("the view could not read the log: %s", error)
                    self.error = error
                    self.version += 1
                    self._announce()
                self.ready.set()
                await asyncio.sleep(RETRY_S)
                continue
            self.fold.seen(head)
            if self.fold.last_seq > position or not self.ready.is_set() or self.error:
                position = self.fold.last_seq
                self.error = None
                self.version += 1
                self._announce()
                self.ready.set()
                await asyncio.sleep(MIN_UPDATE_S)
            await store.wait_for_new(position, self.poll_s)

    async def wait(self, seen: int, timeout_s: float) -> bool:
        """Wait for a version after ``seen`` (or the close); False when ``timeout_s``
        passed first."""
        if self.version != seen or self.closed:
            return True
        return await wait_for_event(self._changed, timeout_s)

    def close(self) -> None:
        self.closed = True
        self._announce()


# --------------------------------------------------------------------------- the guard


def _host_name(value: str) -> str:
    """The host of a Host header (``[::1]:8686`` -> ``::1``, ``a:80`` -> ``a``)."""
    if value.startswith("["):
        return value[1:].partition("]")[0].lower()
    return value.rpartition(":")[0].lower() if ":" in value else value.lower()


class Guard:
    """Host check, token, security headers: in front of every HTTP request."""

    def __init__(self, app: ASGIApp, *, token: str, hosts: frozenset[str] | None) -> None:
        if not token.strip():
            raise ValueError("the view's token must not be empty")
        self.app = app
        self.token = token
        self.cookie = token_cookie_value(token)
        self.hosts = hosts

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                if "content-security-policy" not in headers:
                    headers["content-security-policy"] = CSP
                for key, value in SECURITY_HEADERS.items():
                    headers.setdefault(key, value)
                headers.setdefault("cache-control", "no-store")
            await send(message)

        headers = Headers(scope=scope)
        if self.hosts is not None and _host_name(headers.get("host", "")) not in self.hosts:
            refused = PlainTextResponse("arenad view: unknown Host header\n", status_code=421)
            await refused(scope, receive, send_with_headers)
            return
        response = self._check_token(scope, headers)
        if response is not None:
            await response(scope, receive, send_with_headers)
            return
        await self.app(scope, receive, send_with_headers)

    def _check_token(self, scope: Scope, headers: Headers) -> Response | None:
        """None when the request carries the token; else the response to send."""
        token = self.token.encode()
        auth = headers.get("authorization", "")
        if auth.startswith("Bearer ") and hmac.compare_digest(auth[7:].encode(), token):
            return None
        if hmac.compare_digest(headers.get("x-arenad-token", "").encode(), token):
            return None
        jar: SimpleCookie = SimpleCookie()
        with contextlib.suppress(Exception):
            jar.load(headers.get("cookie", ""))
        morsel = jar.get(TOKEN_COOKIE)
        if morsel is not None and hmac.compare_digest(morsel.value.encode(), self.cookie.encode()):
            return None
        query = parse_qsl(scope.get("query_string", b"").decode("latin-1"), keep_blank_values=True)
        given = [v for k, v in query if k == "token"]
        if given and hmac.compare_digest(given[0].encode(), token):
            # Once in the query, then a cookie: the token leaves the address bar (and
            # the history) at once, and the page's own requests carry the cookie.
            rest = urlencode([(k, v) for k, v in query if k != "token"])
            location = scope.get("path", "/") + (f"?{rest}" if rest else "")
            response = Response(status_code=303, headers={"location": location})
            response.set_cookie(
                TOKEN_COOKIE, self.cookie, httponly=True, samesite="strict", path="/"
            )
            return response
        return PlainTextResponse(
            "arenad view: this server needs its token: open the URL with ?token=TOKEN once,"
            " or send an 'Authorization: Bearer TOKEN' header\n",
            status_code=401,
        )


# --------------------------------------------------------------------------- routes


def _time_ms(raw: str) -> int:
    """An ISO-8601 UTC time (``2026-12-06T04:15:00Z``; no offset: UTC) in epoch ms."""
    try:
        when = datetime.fromisoformat(raw)
    except ValueError:
        raise HTTPException(
            400, f"as_of must be an event number or an ISO-8601 UTC time, not {raw[:40]!r}"
        ) from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    elif when.utcoffset() != timedelta(0):
        raise HTTPException(400, f"as_of: a UTC time (Z or +00:00), not {raw[:40]!r}")
    return int(when.timestamp() * 1000)


async def _as_of(request: Request, store: EventStore) -> int | None:
    """``?as_of=EVENT``: the log as it stood after that event (a stable URL for what a
    page said then); ``?as_of=TIME``: after the last event recorded at or before that
    time (the log's recorded times, not the clock); absent: now."""
    raw = request.query_params.get("as_of")
    if raw is None or raw == "":
        return None
    if raw.isdigit():
        if len(raw) > 18:
            raise HTTPException(400, f"as_of must be an event number, not {raw[:40]!r}")
        return int(raw)
    found = await event_at(store, _time_ms(raw))
    if found is None:
        raise HTTPException(404, f"No event of this log was recorded at or before {raw[:40]}.")
    return found


class _Live:
    """What the lifespan opens (before any request is served)."""

    _store: EventStore | None = None

    @property
    def store(self) -> EventStore:
        assert self._store is not None, "the app's lifespan opens the store"
        return self._store

    @store.setter
    def store(self, value: EventStore) -> None:
        self._store = value


class ViewApp:
    """The view's ASGI app; ``close_streams`` ends the overview's event streams, which
    never end by themselves (a server calls it as it stops)."""

    def __init__(self, app: ASGIApp, follower: Follower) -> None:
        self._app = app
        self._follower = follower

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self._app(scope, receive, send)

    def close_streams(self) -> None:
        self._follower.close()


def build_app(home: Home, *, token: str, loopback: bool = True) -> ViewApp:
    """The app over ``home``'s log (the store is opened by its lifespan, in the server's
    event loop); every request must carry ``token``, on loopback too. ``loopback``: the
    server listens only on this machine, so only a local Host header is served."""
    live = _Live()
    follower = Follower()

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async with open_store(home) as opened:
            live.store = opened
            task = asyncio.create_task(follower.run(opened), name="view log follower")
            try:
                yield
            finally:
                follower.close()
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task

    async def overview(request: Request) -> Response:
        await follower.ready.wait()
        return HTMLResponse(overview_page(follower.fold.snapshot(), follower.error))

    async def events(request: Request) -> Response:
        async def stream() -> AsyncIterator[bytes]:
            await follower.ready.wait()
            yield b"retry: 2000\n\n"
            seen = -1
            while True:
                if not await follower.wait(seen, KEEPALIVE_S):
                    yield b": keep-alive\n\n"
                    continue
                if follower.closed:
                    return
                seen = follower.version
                yield (
                    b"event: progress\ndata: "
                    + progress_event(follower.fold.snapshot(), follower.error)
                    + b"\n\n"
                )

        return StreamingResponse(
            stream(), media_type="text/event-stream", headers={"x-accel-buffering": "no"}
        )

    async def results(request: Request) -> tuple[ResultQuery, ResultPage, int | None, int]:
        name = request.path_params["name"]
        try:
            q = parse_query(name, request.query_params)
        except UserError as exc:
            raise HTTPException(400, str(exc)) from None
        as_of = await _as_of(request, live.store)
        head = await live.store.last_seq()
        if as_of is not None and not 1 <= as_of <= head:
            raise HTTPException(400, f"as_of: the log's events are numbered 1 to {head}")
        page = await campaign_results(live.store, q, as_of)
        if page is None:
            then = "" if as_of is None else f" at event {as_of}"
            raise HTTPException(404, f"No campaign {name!r} in this log{then}.")
        return q, page, as_of, head

    async def campaign(request: Request) -> Response:
        q, page, as_of, head = await results(request)
        # Nothing of the follower's fold: its snapshot is a pass over every cell.
        return HTMLResponse(campaign_page(q, page, as_of=as_of, head=head))

    async def campaign_results_region(request: Request) -> Response:
        q, page, as_of, _ = await results(request)
        return HTMLResponse(results_fragment(q, page, as_of))

    async def cell(request: Request) -> Response:
        cell_id = request.path_params["cell_id"]
        records = await live.store.read_stream(cell_stream(cell_id))
        if not records:
            raise HTTPException(404, f"No cell {cell_id!r} in this log.")
        ingest, capture = attempt_prefixes(cell_id)
        records += await live.store.read_streams(
            await live.store.streams(ingest) + await live.store.streams(capture)
        )
        view = cell_view(records)
        assert view is not None
        return HTMLResponse(cell_page(view))

    async def report(request: Request) -> Response:
        campaigns = request.query_params.getlist("campaign")
        as_of = await _as_of(request, live.store)
        try:
            result = await report_store(live.store, campaigns, as_of=as_of)
        except UserError as exc:
            raise HTTPException(404, str(exc)) from None
        return HTMLResponse(report_page(result, campaigns, as_of))

    async def report_file(request: Request) -> Response:
        try:
            result = await report_store(
                live.store,
                request.query_params.getlist("campaign"),
                as_of=await _as_of(request, live.store),
            )
        except UserError as exc:
            raise HTTPException(404, str(exc)) from None
        # Exactly the bytes `report --html` writes, under the page's own policy.
        return Response(
            html_page(result),
            media_type="text/html; charset=utf-8",
            headers={"content-security-policy": HTML_PAGE_CSP},
        )

    async def favicon(request: Request) -> Response:
        # Browsers ask for /favicon.ico whatever the page links; the same icon, not a 404.
        icon = resources.files("arenad.view").joinpath("static/favicon.svg").read_bytes()
        return Response(icon, media_type="image/svg+xml")

    async def report_css(request: Request) -> Response:
        return Response(html_css(), media_type="text/css; charset=utf-8")

    async def http_error(request: Request, exc: Exception) -> Response:
        status = exc.status_code if isinstance(exc, HTTPException) else 500
        detail = exc.detail if isinstance(exc, HTTPException) else "Internal error."
        return HTMLResponse(error_page(status, detail), status_code=status)

    app = Starlette(
        routes=[
            Route("/", overview),
            Route("/events", events),
            Route("/campaigns/{name}", campaign),
            Route("/campaigns/{name}/results", campaign_results_region),
            Route("/cells/{cell_id}", cell),
            Route("/report", report),
            Route("/report.html", report_file),
            Route("/report.css", report_css),
            Route("/favicon.ico", favicon),
            Mount("/static", StaticFiles(packages=[("arenad.view", "static")]), name="static"),
        ],
        lifespan=lifespan,
        exception_handlers={HTTPException: http_error},
    )
    guarded = Guard(app, token=token, hosts=LOOPBACK_HOSTS if loopback else None)
    return ViewApp(guarded, follower)
