"""An attempt's credential for the gateway, and what the gateway may do with it (a grant).

The daemon issues one grant per cell attempt: a random bearer token goes into the cell (its
agent's config or env), and a file named by the token's sha256 goes into ``<home>/gateway/
grants`` (mode 0600, a dir the cell cannot see), saying which attempt the token is, which
upstream(s) it reaches, how the gateway finds each upstream's key (by *name*: an env variable
of the gateway's, or a file it reads; never the value), the price table and the spend caps.
The gateway reads the file on each call, so a grant issued or revoked while it runs takes
effect at the next call, and a restarted gateway needs nothing but the files.
"""

from __future__ import annotations

import hashlib
import os
import secrets
from pathlib import Path
from typing import Literal

import msgspec

from arenad.gateway.paths import grants_dir

TOKEN_PREFIX = "agw-"


class Upstream(msgspec.Struct, frozen=True, kw_only=True):
    """Where calls are forwarded: ``base_url`` ends where the wire's path (``/chat/completions``,
    ``/responses``, ``/messages``) is appended (``http://host:port/v1``). The key is found by
    name at call time: ``key_env`` in the gateway's own environment, else the first line of
    ``key_file``; neither: no key sent."""

    base_url: str
    key_env: str | None = None
    # Dotenv files (the campaign's secrets env files) searched for ``key_env`` when the
    # gateway's own environment lacks it.
    key_env_files: list[str] = []
    key_file: str | None = None
    # A key the agent's config gave literally: moved here, out of the cell.
    key_value: str | None = None
    # opencode's auth.json (a path) and the provider whose ``{"type": "api", "key"}`` entry
    # is the key: the file is read here, never shown to the cell.
    auth_file: str | None = None
    auth_provider: str | None = None
    # The header the key goes in; None: the style of the call's wire format (``Authorization:
    # Bearer`` for OpenAI's, ``x-api-key`` for Anthropic's; arenad.gateway.protocols).
    auth: Literal["bearer", "x-api-key"] | None = None


class Price(msgspec.Struct, frozen=True, kw_only=True):
    """USD per 1M tokens (opencode's ``cost`` block)."""

    input: float = 0.0
    output: float = 0.0
    cache_read: float = 0.0
    cache_write: float = 0.0


class Grant(msgspec.Struct, frozen=True, kw_only=True):
    campaign_id: str
    cell_id: str
    attempt: int
    # "default" answers /v1/...; another name answers /u/<name>/v1/...
    upstreams: dict[str, Upstream]
    prices: dict[str, Price] = {}
    # Why a call to a model without a price in ``prices`` cannot be priced (a command arm
    # that names no model, or whose model the campaign's price table lacks); None: the
    # generic reason. Recorded beside the call's null ``cost_usd`` as ``unpriced``.
    unpriced_reason: str | None = None
    max_usd: float | None = None
    max_tokens: int | None = None
    campaign_max_usd: float | None = None
    # The campaign's spend of record outside this gateway when the grant was issued.
    campaign_spent_usd: float = 0.0
    issued_at_ms: int = 0


def token_digest(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def grant_path(home: Path, digest: str) -> Path:
    return grants_dir(home) / f"{digest}.json"


def issue(home: Path, grant: Grant) -> str:
    """Write ``grant`` and return its new bearer token (the only copy of the token)."""
    token = TOKEN_PREFIX + secrets.token_hex(24)
    directory = grants_dir(home)
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    os.chmod(directory, 0o700)
    path = grant_path(home, token_digest(token))
    tmp = path.with_suffix(".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(msgspec.json.encode(grant))
    os.replace(tmp, path)
    return token


def revoke(home: Path, token: str) -> None:
    """The token answers 401 from the next call on."""
    grant_path(home, token_digest(token)).unlink(missing_ok=True)


def load(home: Path, digest: str) -> Grant | None:
    """The grant of a token digest, or None (unknown, revoked or unreadable)."""
    try:
        raw = grant_path(home, digest).read_bytes()
        return msgspec.json.decode(raw, type=Grant)
    except (OSError, msgspec.DecodeError, msgspec.ValidationError):
        return None


def upstream_key(upstream: Upstream, environ: dict[str, str] | None = None) -> str | None:
    """The upstream's key, read by name where the gateway runs (None: none configured)."""
    env = os.environ if environ is None else environ
    if upstream.key_env:
        value = env.get(upstream.key_env)
        if value:
            return value
    for path in upstream.key_env_files:
        value = _dotenv_value(path, upstream.key_env) if upstream.key_env else None
        if value:
            return value
    if upstream.key_value:
        return upstream.key_value
    if upstream.auth_file and upstream.auth_provider:
        value = _auth_file_key(upstream.auth_file, upstream.auth_provider)
        if value:
            return value
    if upstream.key_file:
        try:
            with open(upstream.key_file, encoding="utf-8") as f:
                return f.readline().strip() or None
        except OSError:
            return None
    return None


def _auth_file_key(path: str, provider: str) -> str | None:
    try:
        with open(path, "rb") as f:
            data = msgspec.json.decode(f.read())
    except (OSError, msgspec.DecodeError):
        return None
    entry = data.get(provider) if isinstance(data, dict) else None
    key = entry.get("key") if isinstance(entry, dict) else None
    return key if isinstance(key, str) and key else None


def _dotenv_value(path: str, name: str) -> str | None:
    """``NAME=value`` from a plain dotenv file (quotes stripped); None if absent/unreadable."""
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except (OSError, UnicodeDecodeError):
        return None
    for line in lines:
        key, sep, value = line.strip().removeprefix("export ").partition("=")
        if sep and key.strip() == name:
            value = value.strip()
            if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
                value = value[1:-1]
            return value or None
    return None
