"""Point a cell's opencode at the gateway: one grant per attempt, the config rewritten.

Each provider of the cell's opencode config that names a ``baseURL`` becomes an upstream of
the attempt's grant, and the config's provider now names the gateway
(``http://127.0.0.1:<port>/u/<provider>/v1``) and the attempt's token as its ``apiKey``. The
provider's key moves out of the cell: ``{env:NAME}`` becomes the grant's ``key_env`` (the
gateway reads it from its own environment, or from the campaign's secrets env files, by name);
a literal key moves into the grant (a file of the daemon's home, which the cell cannot see).
The names of those variables are returned so the arm drops them from the agent's env.

A command arm's agent (any CLI) is pointed the conventional way instead
(:func:`point_command_env`): ``OPENAI_BASE_URL`` / ``OPENAI_API_KEY`` and
``ANTHROPIC_BASE_URL`` / ``ANTHROPIC_API_KEY`` name the gateway and the attempt's token; the
upstreams are what those variables named before (or the providers' public endpoints).
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import msgspec

from arenad.gateway import grants, process
from arenad.gateway.grants import Grant, Price, Upstream
from events.specs import CellSpec

_ENV_REF = re.compile(r"^\{env:([A-Za-z_][A-Za-z0-9_]*)\}$")


class PointedConfig(msgspec.Struct, frozen=True, kw_only=True):
    token: str
    # The environment variables that held upstream keys: kept out of the agent's env.
    key_names: list[str]
    providers: list[str]


def _prices(models: Any) -> dict[str, Price]:
    out: dict[str, Price] = {}
    if not isinstance(models, dict):
        return out
    for model_id, block in models.items():
        cost = block.get("cost") if isinstance(block, dict) else None
        if not isinstance(cost, dict):
            continue
        upstream_id = block.get("id") if isinstance(block.get("id"), str) else model_id
        price = Price(
            input=float(cost.get("input") or 0.0),
            output=float(cost.get("output") or 0.0),
            cache_read=float(cost.get("cache_read") or 0.0),
            cache_write=float(cost.get("cache_write") or 0.0),
        )
        out[str(upstream_id)] = price
    return out


def _price_of(
    providers: Mapping[str, Any], provider_id: str, model_id: str
) -> tuple[str, Price] | None:
    """(upstream id, price) of the first model of ``provider_id`` (any: "") whose key or
    upstream ``id`` is ``model_id`` and that has a ``cost`` block."""
    for pid, block in providers.items():
        models = block.get("models") if isinstance(block, dict) else None
        if (provider_id and pid != provider_id) or not isinstance(models, dict):
            continue
        for key, entry in models.items():
            priced = _prices({key: entry})
            if priced and model_id in (key, *priced):
                return next(iter(priced.items()))
    return None


def command_prices(
    config: Mapping[str, Any], model: str | None
) -> tuple[dict[str, Price], str | None]:
    """(the price table of a command arm's calls, why any other call is unpriced). Pure.

    A command arm is priced as a solo arm is, from the campaign's price table (the ``cost``
    blocks of the providers in the cell's opencode config), but only for the model it names
    (``model``, its ``{model}`` placeholder): any CLI may call what it likes, and only a model
    the campaign file declares says which table entry it is. ``provider/id`` names a
    provider's model, a bare id any provider's model of that key or upstream ``id``. The
    table holds the model's upstream id and the name as the arm gave it (a CLI may send
    either). No model, or none with a price: an empty table and the reason, recorded beside
    each call's null ``cost_usd`` (never a 0)."""
    if not model:
        return {}, "the command arm names no model (its `model` key), so no price applies"
    providers = config.get("provider")
    providers = providers if isinstance(providers, dict) else {}
    # ``provider/id`` first; then the whole name as a bare id (``org/model`` is one).
    provider_id, _, model_id = model.partition("/")
    named = [(provider_id, model_id)] if model_id else []
    found: tuple[str, Price] | None = None
    for only, wanted in [*named, ("", model)]:
        found = found or _price_of(providers, only, wanted)
    if found is None:
        return {}, (
            f"no price for the command arm's model {model!r} in the campaign's price table"
            " (the providers' cost blocks of the opencode config)"
        )
    upstream_id, price = found
    table = dict.fromkeys([model, *(m for _, m in named), upstream_id], price)
    return table, f"only the command arm's model {model!r} is priced"


def attempt_grant(
    config: Mapping[str, Any],
    spec: CellSpec,
    cell_id: str,
    attempt: int,
    key_files: list[str],
    auth_file: str | None = None,
    *,
    campaign_cap_usd: float | None = None,
    campaign_spent_usd: float = 0.0,
) -> tuple[Grant, dict[str, Any], list[str]]:
    """(the grant, the config with its providers pointed at ``{gateway}``, key env names).

    Pure: the rewritten config has ``{gateway}`` and ``{token}`` placeholders in place of the
    gateway's base URL and the token, which :func:`point_opencode` fills in."""
    rewritten = json.loads(json.dumps(config))
    upstreams: dict[str, Upstream] = {}
    prices: dict[str, Price] = {}
    names: list[str] = []
    providers = rewritten.get("provider")
    for provider_id, block in (providers if isinstance(providers, dict) else {}).items():
        options = block.get("options") if isinstance(block, dict) else None
        if not isinstance(options, dict) or not isinstance(options.get("baseURL"), str):
            continue
        key = options.get("apiKey")
        key_env = key_value = None
        if isinstance(key, str):
            match = _ENV_REF.match(key)
            if match:
                key_env = match.group(1)
                names.append(key_env)
            else:
                key_value = key
        upstreams[provider_id] = Upstream(
            base_url=options["baseURL"],
            key_env=key_env,
            key_env_files=key_files if key_env else [],
            key_value=key_value,
            # No key in the config: opencode would have used its auth file's.
            auth_file=auth_file if key is None else None,
            auth_provider=provider_id if key is None else None,
        )
        prices.update(_prices(block.get("models")))
        options["baseURL"] = f"{{gateway}}/u/{provider_id}/v1"
        options["apiKey"] = "{token}"
    grant = Grant(
        campaign_id=spec.campaign,
        cell_id=cell_id,
        attempt=attempt,
        upstreams=upstreams,
        prices=prices,
        max_usd=spec.gateway.max_usd,
        max_tokens=spec.gateway.max_tokens,
        campaign_max_usd=campaign_cap_usd,
        campaign_spent_usd=campaign_spent_usd,
        issued_at_ms=int(time.time() * 1000),
    )
    return grant, rewritten, names


def _fill(value: Any, base: str, token: str) -> Any:
    if isinstance(value, dict):
        return {k: _fill(v, base, token) for k, v in value.items()}
    if isinstance(value, list):
        return [_fill(v, base, token) for v in value]
    if value == "{token}":
        return token
    if isinstance(value, str) and value.startswith("{gateway}/u/"):
        return base + value.removeprefix("{gateway}")
    return value


def _read_config(path: Path | None) -> dict[str, Any]:
    """The opencode config at ``path``; {} when there is none or it is not a JSON object
    (then nothing is priced, and the calls say why)."""
    if path is None:
        return {}
    try:
        config = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return config if isinstance(config, dict) else {}


def point_opencode(
    home: Path,
    config_path: Path,
    spec: CellSpec,
    cell_id: str,
    attempt: int,
    env: Mapping[str, str],
    *,
    campaign_cap_usd: float | None = None,
    campaign_spent_usd: float = 0.0,
) -> PointedConfig | None:
    """Start (or adopt) the gateway, issue the attempt's grant, rewrite the cell's config.
    None: the config names no provider with a ``baseURL`` (nothing to point)."""
    try:
        config = json.loads(config_path.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(config, dict):
        return None
    secrets = spec.secrets
    key_files = [os.path.join(secrets.dir, f) for f in secrets.env_files] if secrets else []
    grant, rewritten, names = attempt_grant(
        config,
        spec,
        cell_id,
        attempt,
        key_files,
        env.get("SWE_ARENA_OPENCODE_AUTH_FILE"),
        campaign_cap_usd=campaign_cap_usd,
        campaign_spent_usd=campaign_spent_usd,
    )
    if not grant.upstreams:
        return None
    endpoint = process.ensure(home, env=env)
    token = grants.issue(home, grant)
    filled = _fill(rewritten, f"http://127.0.0.1:{endpoint.port}", token)
    tmp = config_path.with_suffix(".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(filled, f)
    os.replace(tmp, config_path)
    return PointedConfig(token=token, key_names=names, providers=sorted(grant.upstreams))


class ConventionalUpstream(msgspec.Struct, frozen=True, kw_only=True):
    """One provider an agent CLI finds by the conventional env variables."""

    name: str
    base_var: str
    key_var: str
    default_base: str
    # What the SDKs append to the base URL before the wire's path: OpenAI's base names
    # ``/v1`` itself, Anthropic's does not (its SDK posts to ``<base>/v1/messages``).
    version_suffix: str
    # Variables that name the same base URL in older clients: dropped, never left naming
    # the upstream.
    aliases: tuple[str, ...] = ()


CONVENTIONAL: tuple[ConventionalUpstream, ...] = (
    ConventionalUpstream(
        name="openai",
        base_var="OPENAI_BASE_URL",
        key_var="OPENAI_API_KEY",
        default_base="https://api.openai.com/v1",
        version_suffix="",
        aliases=("OPENAI_API_BASE",),
    ),
    ConventionalUpstream(
        name="anthropic",
        base_var="ANTHROPIC_BASE_URL",
        key_var="ANTHROPIC_API_KEY",
        default_base="https://api.anthropic.com",
        version_suffix="/v1",
    ),
)


class PointedEnv(msgspec.Struct, frozen=True, kw_only=True):
    token: str
    # The agent's env with the conventional variables naming the gateway and the token, and
    # nothing left that named an upstream or held its key.
    env: dict[str, str]
    providers: list[str]


def command_grant(
    env: Mapping[str, str],
    spec: CellSpec,
    cell_id: str,
    attempt: int,
    key_files: list[str],
    *,
    arm_env: Mapping[str, str] | None = None,
    config: Mapping[str, Any] | None = None,
    model: str | None = None,
    campaign_cap_usd: float | None = None,
    campaign_spent_usd: float = 0.0,
) -> tuple[Grant, dict[str, str]]:
    """(the grant, the agent's env pointed at ``{gateway}`` with ``{token}``). Pure.

    ``env`` is what the agent would have had (the cell's env and the arm's own). Each
    conventional provider's upstream is the base URL its variable named, else the
    provider's public endpoint; its key is read by the gateway by the variable's name (its
    own env, the campaign's secrets env files), or, when the arm's own env (``arm_env``,
    from the campaign file) gave it literally, moved into the grant. Its calls are priced
    for the arm's ``model`` from the cell's opencode ``config`` (:func:`command_prices`);
    any other call's cost is unknown, with the grant's reason, never 0."""
    arm_env = arm_env or {}
    upstreams: dict[str, Upstream] = {}
    pointed = dict(env)
    for p in CONVENTIONAL:
        base = (env.get(p.base_var) or p.default_base).strip().rstrip("/")
        literal = arm_env.get(p.key_var) or None
        upstreams[p.name] = Upstream(
            base_url=base + p.version_suffix,
            key_env=p.key_var,
            key_env_files=key_files,
            key_value=literal,
        )
        for alias in p.aliases:
            pointed.pop(alias, None)
        pointed[p.base_var] = f"{{gateway}}/u/{p.name}" + ("/v1" if not p.version_suffix else "")
        pointed[p.key_var] = "{token}"
    prices, unpriced = command_prices(config or {}, model)
    grant = Grant(
        campaign_id=spec.campaign,
        cell_id=cell_id,
        attempt=attempt,
        upstreams=upstreams,
        prices=prices,
        unpriced_reason=unpriced,
        max_usd=spec.gateway.max_usd,
        max_tokens=spec.gateway.max_tokens,
        campaign_max_usd=campaign_cap_usd,
        campaign_spent_usd=campaign_spent_usd,
        issued_at_ms=int(time.time() * 1000),
    )
    return grant, pointed


def point_command_env(
    home: Path,
    spec: CellSpec,
    cell_id: str,
    attempt: int,
    env: Mapping[str, str],
    *,
    arm_env: Mapping[str, str] | None = None,
    gateway_env: Mapping[str, str] | None = None,
    config_path: Path | None = None,
    model: str | None = None,
    campaign_cap_usd: float | None = None,
    campaign_spent_usd: float = 0.0,
) -> PointedEnv:
    """Start (or adopt) the gateway, issue the attempt's grant, and return the agent's env
    pointed at it (:func:`command_grant`). ``gateway_env``: the environment a gateway
    started here gets (default ``env``); ``config_path``: the cell's copy of the opencode
    config, whose price table prices the arm's ``model``."""
    secrets = spec.secrets
    key_files = [os.path.join(secrets.dir, f) for f in secrets.env_files] if secrets else []
    grant, pointed = command_grant(
        env,
        spec,
        cell_id,
        attempt,
        key_files,
        arm_env=arm_env,
        config=_read_config(config_path),
        model=model,
        campaign_cap_usd=campaign_cap_usd,
        campaign_spent_usd=campaign_spent_usd,
    )
    endpoint = process.ensure(home, env=gateway_env if gateway_env is not None else env)
    token = grants.issue(home, grant)
    base = f"http://127.0.0.1:{endpoint.port}"
    filled = {k: _fill(v, base, token) for k, v in pointed.items()}
    return PointedEnv(token=token, env=filled, providers=sorted(grant.upstreams))
