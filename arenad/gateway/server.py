"""The gateway process: authenticate, cap, forward, relay, journal.

``python -m arenad.gateway --home HOME [--port N]`` serves until SIGTERM/SIGINT on
``<home>/gateway/gw.sock`` and on 127.0.0.1 (the bound port goes to ``<home>/gateway/port``).

Per call (``POST [/u/<upstream>]/v1/<path>``, one wire format per path, each a row of
:mod:`arenad.gateway.protocols`: ``/chat/completions`` and ``/responses`` (OpenAI),
``/messages`` (Anthropic)), with no branch on the wire format here:

1. The bearer token (``Authorization`` or ``x-api-key``) names a grant
   (:mod:`arenad.gateway.grants`); none: 401, nothing forwarded.
2. The attempt's caps (``max_usd``, ``max_tokens``) and the campaign's (``campaign_max_usd``)
   are checked against what this gateway has journaled for them plus, for each call still in
   flight, a reservation the size of the attempt's largest call so far. Past a cap: the wire's
   refusal (402 with OpenAI's ``insufficient_quota`` error, a provider refusal opencode
   surfaces and does not retry; 402 ``billing_error`` in Anthropic's shape), journaled as a
   refused call. So spend overshoots a cap by at most one call.
3. The body goes to the upstream unchanged, with the upstream's key (read by name here) in
   place of the attempt's token, in the wire's auth header; the answer is relayed as it
   arrives (SSE pieces unchanged) while folded into the record (:mod:`arenad.gateway.record`).
4. Once the upstream is done (even if the agent hung up meanwhile: the call completes and is
   recorded) one line goes to ``calls.jsonl``, bounded like any ingested line.

An upstream 429/5xx, timeout or refused connection is relayed (or answered 502/504) and
recorded per call as ``upstream.error``: the daemon's classification reads that, never what the
agent printed. At start the journal is read back, so spend and the prompt chains survive a
restart of the gateway; a restart of the daemon does not touch the gateway at all.
"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import contextlib
import json
import logging
import os
import signal
import time
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import msgspec

from arenad.gateway import grants, http, paths, protocols, record
from arenad.gateway.grants import Grant
from arenad.gateway.process import process_ticks
from arenad.gateway.protocols import Protocol

log = logging.getLogger("arenad.gateway")

MAX_RECORD_BYTES = 1 << 20  # arenad.ingest.lines.MAX_LINE_BYTES: ingested whole
CONNECT_S = 30.0
IDLE_S = 600.0
# How long the gateway outlives its daemon when nothing is in flight (a restart is quicker).
ORPHAN_S = 30.0
_HEADERS_TO_UPSTREAM = (
    "accept",
    "content-type",
    "user-agent",
    "anthropic-version",
    "anthropic-beta",
)
_SESSION_HEADERS = ("x-session-id", "session_id", "x-opencode-session", "x-arenad-session")


class _Spend:
    """What the journal says an attempt (or a campaign) spent, plus calls in flight."""

    __slots__ = ("in_flight", "known", "largest_tokens", "largest_usd", "tokens", "usd")

    def __init__(self) -> None:
        self.usd = 0.0
        self.tokens = 0
        self.largest_usd = 0.0
        self.largest_tokens = 0
        self.in_flight = 0
        self.known: set[str] = set()

    def add(self, usd: float | None, tokens: int) -> None:
        self.usd += usd or 0.0
        self.tokens += tokens
        self.largest_usd = max(self.largest_usd, usd or 0.0)
        self.largest_tokens = max(self.largest_tokens, tokens)

    @property
    def reserved_usd(self) -> float:
        return self.in_flight * self.largest_usd

    @property
    def reserved_tokens(self) -> int:
        return self.in_flight * self.largest_tokens


class _CampaignCalls:
    """The (end time, cost) of the calls this process journaled for one campaign, kept so
    that "spent since a grant was issued" is a bisection, not a sum over every call: the sum
    made each call cost O(calls so far), so a campaign's calls cost O(n**2) in total (the
    gateway's hot spot under load, bench/gateway.py)."""

    __slots__ = ("_cumulative", "_ends", "largest_usd")

    def __init__(self) -> None:
        self._ends: list[int] = []
        # _cumulative[i]: the cost of the first i calls.
        self._cumulative: list[float] = [0.0]
        self.largest_usd = 0.0

    def add(self, ended_ms: int, usd: float) -> None:
        # Kept in order: a wall clock that steps back files the call at the latest end
        # seen, so it counts for every grant issued before (never less spend, only more).
        if self._ends and ended_ms < self._ends[-1]:
            ended_ms = self._ends[-1]
        self._ends.append(ended_ms)
        self._cumulative.append(self._cumulative[-1] + usd)
        self.largest_usd = max(self.largest_usd, usd)

    def since(self, issued_ms: int) -> float:
        """The cost of the calls that ended at or after ``issued_ms``."""
        first = bisect.bisect_left(self._ends, issued_ms)
        return self._cumulative[-1] - self._cumulative[first]


def _account(spend: _Spend, line: Mapping[str, Any]) -> None:
    usage = line.get("usage") or {}
    tokens = sum(v for v in usage.values() if isinstance(v, int))
    cost = line.get("cost_usd")
    spend.add(cost if isinstance(cost, int | float) else None, tokens)
    request = line.get("request") or {}
    if isinstance(request.get("prompt_hash"), str):
        spend.known.add(request["prompt_hash"])


def _attempt_key(grant: Grant) -> str:
    return f"{grant.campaign_id}/{grant.cell_id}#{grant.attempt}"


def refusal(grant: Grant, attempt: _Spend, campaign: _Spend) -> str | None:
    """Why a call may not go out (None: it may), from recorded spend plus reservations."""
    if grant.max_usd is not None and attempt.usd + attempt.reserved_usd >= grant.max_usd:
        return f"the attempt's max_usd {grant.max_usd} is reached (spent {attempt.usd:.6f})"
    if grant.max_tokens is not None and (
        attempt.tokens + attempt.reserved_tokens >= grant.max_tokens
    ):
        return f"the attempt's max_tokens {grant.max_tokens} is reached (spent {attempt.tokens})"
    if grant.campaign_max_usd is not None and (
        grant.campaign_spent_usd + campaign.usd + campaign.reserved_usd >= grant.campaign_max_usd
    ):
        return f"the campaign's max_usd {grant.campaign_max_usd} is reached"
    return None


class Gateway:
    def __init__(self, home: Path, *, environ: Mapping[str, str] | None = None) -> None:
        self.home = home
        self.environ = dict(os.environ if environ is None else environ)
        self._attempts: dict[str, _Spend] = {}
        self._campaigns: dict[str, _Spend] = {}
        # Per campaign: the calls this process journaled.
        self._campaign_calls: dict[str, _CampaignCalls] = {}
        self._servers: list[asyncio.Server] = []
        # One future per call being answered: stop() waits for them, not for idle connections.
        self._calls: set[asyncio.Future[None]] = set()
        self.port: int | None = None

    # -- state from the journal ------------------------------------------------------------

    def _attempt(self, grant: Grant) -> _Spend:
        """The attempt's spend and prompt chains: on first sight, read back from its journal
        (so a restarted gateway goes on where the last one stopped)."""
        key = _attempt_key(grant)
        spend = self._attempts.get(key)
        if spend is None:
            spend = self._attempts[key] = _Spend()
            path = paths.attempt_journal(self.home, grant.campaign_id, grant.cell_id, grant.attempt)
            try:
                with open(path, "rb") as f:
                    for raw in f:
                        with contextlib.suppress(ValueError):
                            line = json.loads(raw)
                            if isinstance(line, dict):
                                _account(spend, line)
            except FileNotFoundError:
                pass
        return spend

    def _campaign(self, grant: Grant) -> _Spend:
        """The campaign's calls journaled since ``grant`` was issued (what its baseline,
        ``campaign_spent_usd``, cannot hold yet), plus its calls in flight."""
        spend = self._campaigns.setdefault(grant.campaign_id, _Spend())
        calls = self._campaign_calls.get(grant.campaign_id)
        if calls is not None:
            spend.usd = calls.since(grant.issued_at_ms)
            spend.largest_usd = calls.largest_usd
        return spend

    def _journal(self, grant: Grant, entry: dict[str, Any]) -> None:
        path = paths.attempt_journal(self.home, grant.campaign_id, grant.cell_id, grant.attempt)
        # One writer (this process, one loop): each line is one append of whole bytes.
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            os.write(fd, record.bounded(entry, MAX_RECORD_BYTES))
        finally:
            os.close(fd)

    @property
    def busy(self) -> bool:
        return bool(self._calls)

    # -- lifecycle -------------------------------------------------------------------------

    async def start(self, port: int = 0) -> None:
        directory = paths.gateway_dir(self.home)
        directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        paths.calls_dir(self.home).mkdir(exist_ok=True, mode=0o700)
        sock = paths.model_endpoint(self.home)
        sock.unlink(missing_ok=True)
        unix = await asyncio.start_unix_server(self._handle, str(sock), limit=http.HEAD_LIMIT)
        tcp = await asyncio.start_server(self._handle, "127.0.0.1", port, limit=http.HEAD_LIMIT)
        self._servers = [unix, tcp]
        self.port = int(tcp.sockets[0].getsockname()[1])
        _write(paths.port_file(self.home), f"{self.port}\n")
        # Last: a pid file that names this process says the gateway is ready.
        _write(paths.pid_file(self.home), f"{os.getpid()} {process_ticks(os.getpid())}\n")

    async def stop(self) -> None:
        for server in self._servers:
            server.close()
        # Calls in flight finish and are journaled: an upstream is never cut mid-answer.
        if self._calls:
            await asyncio.gather(*list(self._calls), return_exceptions=True)
        # A home without a live gateway holds no socket (a copy of the home can be made).
        with contextlib.suppress(OSError):
            if _recorded_pid(self.home) == os.getpid():
                paths.model_endpoint(self.home).unlink()
                paths.pid_file(self.home).unlink()

    # -- connections -----------------------------------------------------------------------

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        loop = asyncio.get_running_loop()
        try:
            while True:
                try:
                    request = await http.read_request(reader)
                except http.BadRequest as exc:
                    body = protocols.openai_error(exc.status, exc.message, "bad")
                    await _answer(writer, exc.status, body)
                    return
                except (asyncio.IncompleteReadError, ConnectionError):
                    return
                if request is None:
                    return
                call: asyncio.Future[None] = loop.create_future()
                self._calls.add(call)
                try:
                    keep = await self._route(request, writer)
                finally:
                    call.set_result(None)
                    self._calls.discard(call)
                if not keep or not request.keep_alive:
                    return
        except ConnectionError:
            return
        finally:
            with contextlib.suppress(Exception):
                writer.close()

    async def _route(self, request: http.Request, writer: asyncio.StreamWriter) -> bool:
        if request.method == "GET" and request.path == "/health":
            body = json.dumps({"ok": True, "pid": os.getpid(), "port": self.port}).encode()
            await _answer(writer, 200, body)
            return True
        upstream_name = "default"
        path = request.path
        if path.startswith("/u/"):
            _, _, rest = path.partition("/u/")
            upstream_name, _, tail = rest.partition("/")
            path = "/" + tail
        protocol = protocols.for_path(path)
        if request.method != "POST" or protocol is None:
            await _answer(writer, 404, protocols.openai_error(404, f"no route {path}", "not_found"))
            return True
        token = _token(request.headers)
        grant = grants.load(self.home, grants.token_digest(token)) if token else None
        if grant is None:
            await _answer(writer, 401, protocol.error(401, "unknown credential", "auth"))
            return True
        upstream = grant.upstreams.get(upstream_name)
        if upstream is None:
            body = protocol.error(404, f"no upstream {upstream_name!r}", "not_found")
            await _answer(writer, 404, body)
            return True
        return await self._call(protocol, request, writer, grant, upstream_name, upstream)

    async def _call(
        self,
        protocol: Protocol,
        request: http.Request,
        writer: asyncio.StreamWriter,
        grant: Grant,
        upstream_name: str,
        upstream: grants.Upstream,
    ) -> bool:
        started_ms = int(time.time() * 1000)
        t0 = time.monotonic()
        try:
            body = msgspec.json.decode(request.body)
        except msgspec.DecodeError:
            body = None
        if not isinstance(body, dict):
            await _answer(writer, 400, protocol.error(400, "body is not a JSON object", "bad"))
            return True
        key = _attempt_key(grant)
        attempt = self._attempt(grant)
        campaign = self._campaign(grant)
        request_part, prompt_hash = record.request_part(
            body, protocol.prompt(body), attempt.known, protocol.sampling
        )
        entry: dict[str, Any] = {
            # The ingested line's kind (arenad.ingest.lines): what the spend fold counts.
            "type": "gateway.call",
            "v": 1,
            "call": uuid.uuid4().hex,
            "attempt_key": key,
            "campaign_id": grant.campaign_id,
            "cell_id": grant.cell_id,
            "attempt": grant.attempt,
            "session": _session(request.headers, body),
            "endpoint": protocol.endpoint,
            "upstream_name": upstream_name,
            "upstream_url": upstream.base_url,
            "started_at_ms": started_ms,
            "request": request_part,
        }
        why = refusal(grant, attempt, campaign)
        if why is not None:
            message = f"arenad gateway: {why}"
            entry.update(
                refused="budget",
                reason=why,
                upstream={"status": None, "error": None},
                usage=None,
                cost_usd=None,
                latency_ms=round((time.monotonic() - t0) * 1000, 3),
            )
            self._journal(grant, entry)
            status = protocol.refusal
            await _answer(writer, status, protocol.error(status, message, "budget"))
            return True
        attempt.in_flight += 1
        campaign.in_flight += 1
        attempt.known.add(prompt_hash)
        try:
            keep, tail = await self._forward(protocol, request, writer, upstream, entry, t0)
        finally:
            attempt.in_flight -= 1
            campaign.in_flight -= 1
        usage = entry.get("usage")
        model = str(body.get("model"))
        price = grant.prices.get(model)
        if isinstance(usage, dict):
            figures = record.Usage(**usage)
            entry["cost_usd"] = record.cost_usd(figures, price)
        else:
            entry["cost_usd"] = None
        entry["priced"] = price is not None
        if price is None:
            # A null cost says why it is unknown, never silently (and never 0).
            why = grant.unpriced_reason or f"no price for model {model!r} in the price table"
            entry["unpriced"] = why[:300]
        entry["ended_at_ms"] = int(time.time() * 1000)
        self._journal(grant, entry)
        _account(attempt, entry)
        self._campaign_calls.setdefault(grant.campaign_id, _CampaignCalls()).add(
            entry["ended_at_ms"], entry["cost_usd"] or 0.0
        )
        # The end of the answer goes out only now: once the agent has its whole answer, the
        # call's record is on disk (an agent that exits at once loses no record).
        return await _send(writer, tail) and keep

    async def _forward(
        self,
        protocol: Protocol,
        request: http.Request,
        writer: asyncio.StreamWriter,
        upstream: grants.Upstream,
        entry: dict[str, Any],
        t0: float,
    ) -> tuple[bool, bytes]:
        """Relay the upstream's answer; returns (keep the connection, the answer's last
        bytes, which the caller sends once the call is journaled)."""
        headers = [(n, request.headers[n]) for n in _HEADERS_TO_UPSTREAM if n in request.headers]
        secret = grants.upstream_key(upstream, self.environ)
        if secret is not None:
            if (upstream.auth or protocol.auth) == "bearer":
                headers.append(("Authorization", f"Bearer {secret}"))
            else:
                headers.append(("x-api-key", secret))
        result = protocol.fold()
        client_ok = True
        try:
            response = await http.request_upstream(
                upstream.base_url,
                protocol.path,
                request.body,
                headers,
                connect_s=CONNECT_S,
                idle_s=IDLE_S,
            )
        except TimeoutError:
            self._failed(entry, t0, None, "timeout")
            return True, _answer_bytes(504, protocol.error(504, "upstream timed out", "timeout"))
        except (OSError, ValueError, IndexError, asyncio.IncompleteReadError) as exc:
            self._failed(entry, t0, None, f"refused: {type(exc).__name__}")
            return True, _answer_bytes(502, protocol.error(502, "upstream unreachable", "refused"))
        first_ms: float | None = None
        error: str | None = None
        raw = bytearray()
        streamed = "text/event-stream" in response.content_type
        splitter = record.SseSplitter()
        length = response.length
        out_headers = [(n, v) for n, v in response.headers if n not in http.HOP_HEADERS]
        framed = length is None
        out_headers.append(
            ("Transfer-Encoding", "chunked") if framed else ("Content-Length", str(length))
        )
        client_ok = await _send(writer, http.head(response.status, out_headers))
        held = b""
        try:
            async for piece in response.pieces(IDLE_S):
                if first_ms is None:
                    first_ms = (time.monotonic() - t0) * 1000
                if streamed:
                    result.add_sse(splitter.feed(piece))
                elif len(raw) < http.MAX_BODY_BYTES:
                    raw += piece
                if held and client_ok:
                    client_ok = await _send(writer, held)
                held = http.chunk(piece) if framed else piece
        except TimeoutError:
            error = "timeout mid-answer"
        except (OSError, http.BadRequest, asyncio.IncompleteReadError) as exc:
            error = f"cut mid-answer: {type(exc).__name__}"
        finally:
            response.close()
        if streamed:
            result.add_sse(splitter.rest())
        elif raw:
            with contextlib.suppress(msgspec.DecodeError):
                parsed = msgspec.json.decode(raw)
                if isinstance(parsed, dict) and response.status < 400:
                    result.add(parsed, streamed=False)
        if response.status >= 400 and error is None:
            error = f"upstream {response.status}"
            entry["upstream_body"] = bytes(raw[:2048]).decode("utf-8", "replace")
        elif error is None and result.stream_error is not None:
            error = f"upstream error in its stream: {result.stream_error}"[:500]
        elif error is None and streamed and not result.ended:
            # A stream closed cleanly but without its wire's end: the answer is cut short.
            error = "stream ended before its end event"
        entry["upstream"] = {"status": response.status, "error": error}
        entry["response"] = result.response()
        entry["usage"] = result.usage_json()
        if result.prompt_token_ids is not None or result.completion_token_ids is not None:
            entry["token_ids"] = {
                "prompt": result.prompt_token_ids,
                "completion": result.completion_token_ids,
            }
        if result.logprobs is not None:
            entry["logprobs"] = result.logprobs
        entry["latency_ms"] = round((time.monotonic() - t0) * 1000, 3)
        entry["first_byte_ms"] = None if first_ms is None else round(first_ms, 3)
        entry["client_gone"] = not client_ok
        tail = held + (http.LAST_CHUNK if framed else b"")
        return client_ok and error is None, tail if client_ok else b""

    def _failed(self, entry: dict[str, Any], t0: float, status: int | None, error: str) -> None:
        entry.update(
            upstream={"status": status, "error": error},
            response=None,
            usage=None,
            latency_ms=round((time.monotonic() - t0) * 1000, 3),
        )


def _recorded_pid(home: Path) -> int | None:
    try:
        return int(paths.pid_file(home).read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def _write(path: Path, text: str) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def _token(headers: Mapping[str, str]) -> str | None:
    auth = headers.get("authorization", "")
    if auth.lower().startswith("bearer "):
        return auth[7:].strip() or None
    return headers.get("x-api-key") or None


def _session(headers: Mapping[str, str], body: Mapping[str, Any]) -> str | None:
    for name in _SESSION_HEADERS:
        if headers.get(name):
            return headers[name][:200]
    metadata = body.get("metadata")
    if isinstance(metadata, dict) and isinstance(metadata.get("session_id"), str):
        return str(metadata["session_id"])[:200]
    return None


async def _send(writer: asyncio.StreamWriter, data: bytes) -> bool:
    """False once the agent has hung up (the call goes on: it is completed and recorded)."""
    try:
        writer.write(data)
        await writer.drain()
    except (ConnectionError, RuntimeError):
        return False
    return True


def _answer_bytes(status: int, body: bytes) -> bytes:
    headers = [("Content-Type", "application/json"), ("Content-Length", str(len(body)))]
    return http.head(status, headers) + body


async def _answer(writer: asyncio.StreamWriter, status: int, body: bytes) -> None:
    await _send(writer, _answer_bytes(status, body))


def daemon_alive(home: Path) -> bool:
    """Whether the pid the daemon lease names (``<home>/daemon.lock``) is a live process.
    Read, never locked: a lock taken here, however briefly, could refuse a daemon its lease."""
    try:
        pid = int((home / "daemon.lock").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return False
    return os.path.exists(f"/proc/{pid}")


async def _orphaned(gateway: Gateway, home: Path, orphan_s: float) -> None:
    """Returns once no daemon has run for ``orphan_s`` with no call in flight (or the home
    is gone): a daemon restart within that time finds the gateway still serving."""
    alone_since: float | None = None
    while True:
        await asyncio.sleep(min(1.0, orphan_s / 4))
        if not home.exists():
            return
        if daemon_alive(home) or gateway.busy:
            alone_since = None
            continue
        now = time.monotonic()
        alone_since = now if alone_since is None else alone_since
        if now - alone_since >= orphan_s:
            return


async def serve(home: Path, port: int, orphan_s: float = ORPHAN_S) -> int:
    gateway = Gateway(home)
    await gateway.start(port)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    log.info("gateway on %s and 127.0.0.1:%s", paths.model_endpoint(home), gateway.port)
    orphaned = asyncio.create_task(_orphaned(gateway, home, orphan_s))
    stopped = asyncio.create_task(stop.wait())
    await asyncio.wait([orphaned, stopped], return_when=asyncio.FIRST_COMPLETED)
    if orphaned.done():
        log.info("no daemon for %s s and nothing in flight: exiting", orphan_s)
    orphaned.cancel()
    stopped.cancel()
    await gateway.stop()
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m arenad.gateway")
    parser.add_argument("--home", required=True, type=Path)
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--orphan-s", type=float, default=ORPHAN_S)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    return asyncio.run(serve(args.home, args.port, args.orphan_s))
