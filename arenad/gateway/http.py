"""Just enough HTTP/1.1 for the gateway, over asyncio streams: read a request, write a head,
frame a body, and one upstream request whose response body is read piece by piece."""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterator
from urllib.parse import urlsplit

import msgspec

MAX_BODY_BYTES = 64 * 1024 * 1024
HEAD_LIMIT = 1024 * 1024
READ_PIECE = 64 * 1024
REASONS = {
    200: "OK",
    400: "Bad Request",
    401: "Unauthorized",
    402: "Payment Required",
    404: "Not Found",
    413: "Payload Too Large",
    429: "Too Many Requests",
    500: "Internal Server Error",
    502: "Bad Gateway",
    503: "Service Unavailable",
    504: "Gateway Timeout",
    529: "Overloaded",
}
# Never relayed: they describe one hop's connection and framing, which the gateway redoes.
HOP_HEADERS = frozenset(
    {"connection", "keep-alive", "transfer-encoding", "content-length", "proxy-connection"}
)


class BadRequest(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


class Request(msgspec.Struct, frozen=True, kw_only=True):
    method: str
    path: str
    version: str
    headers: dict[str, str]
    body: bytes

    @property
    def keep_alive(self) -> bool:
        connection = self.headers.get("connection", "").lower()
        if self.version == "HTTP/1.0":
            return connection == "keep-alive"
        return connection != "close"


def _parse_head(head: bytes) -> tuple[str, list[tuple[str, str]]]:
    lines = head.decode("latin-1").split("\r\n")
    headers: list[tuple[str, str]] = []
    for line in lines[1:]:
        if not line:
            continue
        name, sep, value = line.partition(":")
        if not sep:
            raise BadRequest(400, "bad header line")
        headers.append((name.strip().lower(), value.strip()))
    return lines[0], headers


async def _chunked(reader: asyncio.StreamReader) -> AsyncIterator[bytes]:
    while True:
        size_line = await reader.readuntil(b"\r\n")
        try:
            size = int(size_line.split(b";", 1)[0].strip(), 16)
        except ValueError:
            raise BadRequest(400, "bad chunk size") from None
        if size == 0:
            while (await reader.readuntil(b"\r\n")) != b"\r\n":
                pass  # trailers
            return
        yield await reader.readexactly(size)
        await reader.readexactly(2)


async def read_request(reader: asyncio.StreamReader) -> Request | None:
    """One request, or None at a clean end of stream between requests."""
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError as exc:
        if not exc.partial.strip():
            return None
        raise BadRequest(400, "incomplete request head") from None
    except asyncio.LimitOverrunError:
        raise BadRequest(400, "request head too large") from None
    first, pairs = _parse_head(head)
    parts = first.split(" ")
    if len(parts) != 3 or not parts[2].startswith("HTTP/"):
        raise BadRequest(400, "bad request line")
    headers = dict(pairs)
    if "chunked" in headers.get("transfer-encoding", "").lower():
        body = bytearray()
        async for piece in _chunked(reader):
            body += piece
            if len(body) > MAX_BODY_BYTES:
                raise BadRequest(413, "request body too large")
    else:
        try:
            length = int(headers.get("content-length", "0"))
        except ValueError:
            raise BadRequest(400, "bad content-length") from None
        if not 0 <= length <= MAX_BODY_BYTES:
            raise BadRequest(413 if length > 0 else 400, "bad content-length")
        body = bytearray(await reader.readexactly(length) if length else b"")
    return Request(
        method=parts[0].upper(),
        path=parts[1].split("?", 1)[0],
        version=parts[2],
        headers=headers,
        body=bytes(body),
    )


def head(status: int, headers: list[tuple[str, str]]) -> bytes:
    lines = [f"HTTP/1.1 {status} {REASONS.get(status, 'Status')}"]
    lines += [f"{name}: {value}" for name, value in headers]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


LAST_CHUNK = b"0\r\n\r\n"


class UpstreamResponse:
    """An upstream's answer: its status and headers, then :meth:`pieces` of its body."""

    def __init__(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        status: int,
        headers: list[tuple[str, str]],
    ) -> None:
        self._reader = reader
        self._writer = writer
        self.status = status
        self.headers = headers
        self._map = dict(headers)

    @property
    def content_type(self) -> str:
        return self._map.get("content-type", "")

    @property
    def length(self) -> int | None:
        if "chunked" in self._map.get("transfer-encoding", "").lower():
            return None
        try:
            return int(self._map["content-length"])
        except (KeyError, ValueError):
            return None

    async def pieces(self, idle_s: float) -> AsyncIterator[bytes]:
        """The body as it arrives; raises TimeoutError after ``idle_s`` of silence."""
        # asyncio.timeout, not wait_for: wait_for makes a task per read (a cost per piece).
        if "chunked" in self._map.get("transfer-encoding", "").lower():
            chunks = _chunked(self._reader)
            while True:
                try:
                    async with asyncio.timeout(idle_s):
                        piece = await anext(chunks)
                except StopAsyncIteration:
                    return
                yield piece
        length = self.length
        left = length if length is not None else -1
        while left != 0:
            want = READ_PIECE if left < 0 else min(left, READ_PIECE)
            async with asyncio.timeout(idle_s):
                piece = await self._reader.read(want)
            if not piece:
                if left > 0:
                    raise ConnectionError("upstream closed before the end of its body")
                return
            if left > 0:
                left -= len(piece)
            yield piece

    def close(self) -> None:
        self._writer.close()


async def request_upstream(
    base_url: str,
    path: str,
    body: bytes,
    headers: list[tuple[str, str]],
    *,
    connect_s: float,
    idle_s: float,
) -> UpstreamResponse:
    """POST ``body`` to ``base_url`` + ``path`` (one connection per call, closed after it)."""
    url = urlsplit(base_url)
    secure = url.scheme == "https"
    host = url.hostname or "127.0.0.1"
    port = url.port or (443 if secure else 80)
    context = ssl.create_default_context() if secure else None
    reader, writer = await asyncio.wait_for(
        asyncio.open_connection(host, port, ssl=context, limit=HEAD_LIMIT), connect_s
    )
    try:
        target = url.path.rstrip("/") + path
        host_header = host if url.port is None else f"{host}:{url.port}"
        lines = [f"POST {target} HTTP/1.1", f"Host: {host_header}"]
        lines += [f"{name}: {value}" for name, value in headers]
        lines += [f"Content-Length: {len(body)}", "Connection: close"]
        writer.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body)
        await writer.drain()
        raw = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), idle_s)
        first, pairs = _parse_head(raw)
        parts = first.split(" ", 2)
        status = int(parts[1])
    except BaseException:
        writer.close()
        raise
    return UpstreamResponse(reader, writer, status, pairs)
