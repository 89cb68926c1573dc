"""``arenad view``'s I/O edge: the bind, the token rule, the store, uvicorn.

Every request carries a token (:class:`arenad.view.server.Guard`), on loopback too: a
cell's agent on ``[sandbox] network = "host"`` shares the machine's loopback, and must not
read its neighbours' patches through the view. The token is the one given (``--token`` or
ARENAD_VIEW_TOKEN, never printed), else the home's own: ``<home>/view.token`` (mode 0600,
made on first use, inside the home no sandboxed cell can see), which the CLI prints in the
URL it serves (``?token=`` once; the browser then keeps a cookie). uvicorn's access log
(which would show a ``?token=`` query) is off.

The server binds 127.0.0.1 by default. Any address that is not loopback (every address
the host name resolves to is checked, before anything is bound) needs an explicit token:
serving the log beyond this machine is a choice made on purpose.
"""

from __future__ import annotations

import ipaddress
import os
import secrets
import socket
from collections.abc import Callable
from typing import Any
from urllib.parse import quote

import uvicorn

from arenad.errors import UserError
from arenad.home import Home, require_initialized
from arenad.view.server import ViewApp, build_app

__all__ = ["DEFAULT_HOST", "DEFAULT_PORT", "bind", "home_token", "is_loopback", "serve_view"]

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8686
TOKEN_FILE = "view.token"


def _addresses(host: str, port: int) -> list[tuple[int, tuple[Any, ...]]]:
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise UserError(f"--host {host}: cannot resolve it ({exc.strerror})") from None
    return [(int(family), tuple(address)) for family, _, _, _, address in infos]


def is_loopback(host: str) -> bool:
    """Whether every address ``host`` names is a loopback one (0.0.0.0 and :: are not)."""
    found = _addresses(host, 0)
    return bool(found) and all(
        ipaddress.ip_address(str(address[0]).split("%")[0]).is_loopback for _, address in found
    )


def bind(host: str, port: int) -> socket.socket:
    """A listening socket on ``host``'s first address (port 0: any free port)."""
    family, address = _addresses(host, port)[0]
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(128)
    except OSError as exc:
        sock.close()
        raise UserError(f"cannot listen on {host}:{port}: {exc.strerror}") from None
    sock.setblocking(False)
    return sock


def _url(sock: socket.socket, token: str | None = None) -> str:
    host, port = sock.getsockname()[:2]
    shown = f"[{host}]" if ":" in host else host
    return f"http://{shown}:{port}/" + ("" if token is None else f"?token={quote(token)}")


def home_token(home: Home) -> str:
    """The home's view token (``<home>/view.token``), made on first use: 0600, random."""
    path = home.root / TOKEN_FILE
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    except FileExistsError:
        pass
    except OSError as exc:
        raise UserError(f"{path}: cannot create the view's token: {exc.strerror}") from None
    else:
        with os.fdopen(fd, "w") as f:
            f.write(secrets.token_urlsafe(32) + "\n")
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
        with os.fdopen(fd) as f:
            mode = os.fstat(f.fileno()).st_mode
            token = f.read(4096).strip()
    except OSError as exc:
        raise UserError(f"{path}: cannot read the view's token: {exc.strerror}") from None
    if mode & 0o077:
        raise UserError(f"{path}: readable by others (mode {mode & 0o777:o}); chmod 600 it")
    if not token:
        # A half-written file (a crash between create and write): one more try makes it.
        raise UserError(f"{path} is empty; delete it and run arenad view again")
    return token


class _Server(uvicorn.Server):
    """uvicorn's server, which ends the view's event streams as its shutdown begins: it
    waits for open connections to finish, and those would not by themselves."""

    def __init__(self, config: uvicorn.Config, app: ViewApp) -> None:
        super().__init__(config)
        self._view = app

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        self._view.close_streams()
        await super().shutdown(sockets)


async def serve_view(
    home: Home,
    host: str = DEFAULT_HOST,
    port: int = DEFAULT_PORT,
    token: str | None = None,
    ready: Callable[[str], None] | None = None,
) -> None:
    """Serve the view of ``home``'s log until interrupted (SIGINT/SIGTERM: uvicorn's)."""
    if token is not None and not token.strip():
        raise UserError("--token: an empty token protects nothing")
    loopback = is_loopback(host)
    if not loopback and token is None:
        raise UserError(
            f"--host {host} is not a loopback address: anyone who can reach it could read"
            " the log; pass --token (or ARENAD_VIEW_TOKEN), which every request must then carry"
        )
    require_initialized(home)
    printed = None
    if token is None:
        token = printed = home_token(home)
    sock = bind(host, port)
    try:
        app = build_app(home, token=token, loopback=loopback)
        config = uvicorn.Config(
            app,
            log_level="warning",
            access_log=False,
            lifespan="on",
            # Past this, what still runs is cancelled (the streams end as the stop begins).
            timeout_graceful_shutdown=5,
        )
        server = _Server(config, app)
        if ready is not None:
            ready(_url(sock, printed))
        await server.serve(sockets=[sock])
    finally:
        sock.close()
