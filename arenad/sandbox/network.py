"""What network a cell's agent run gets (``[sandbox] network``), and which model endpoints
it may reach.

- ``model`` (the default for an arm that uses a model): the run's own network namespace,
  loopback only, with each model endpoint forwarded in at the port its base URL names
  (``arenad/runs/netns.py``, run by the wrapper). Nothing else answers: not ``arenad view``,
  not Ray, not another campaign's model server, not the internet.
- ``none`` (the default for a ``uses_model = false`` command arm): the namespace with nothing
  forwarded. Verify and judge always run like this (``confine(..., network="none")``).
- ``host``: the machine's network, as before this key existed (an explicit opt-out).

The endpoints a cell may reach are decided in ONE place, :func:`model_endpoints`; a model
gateway in the home can take their place there without touching anything else.

Only endpoints on this machine's loopback can be forwarded (the agent's URL keeps its host
and port, which inside the namespace is the forwarder). An endpoint elsewhere, or a model arm
with no endpoint found at all, fails the launch with the key to change: a forwarder that
silently let nothing through would look like a provider outage.
"""

from __future__ import annotations

import ipaddress
import json
import os
from collections.abc import Mapping
from typing import Any, Literal
from urllib.parse import urlsplit

import msgspec

from arenad.sandbox.cellenv import cell_paths
from arenad.sandbox.confine import SandboxError
from events.specs import ArmSpec, CellSpec, CommandArm

NETWORK_KEY = "[sandbox] network"
Network = Literal["model", "none", "host"]
# Variables agent CLIs read their provider's base URL from (besides a command arm's own env).
BASE_URL_VARS = ("OPENAI_BASE_URL", "OPENAI_API_BASE", "ANTHROPIC_BASE_URL")
DEFAULT_PORTS = {"http": 80, "https": 443}
# Between the wrapper's --forward items (arenad.runs.netns.SEPARATOR).
FORWARD_SEPARATOR = ","


class Endpoint(msgspec.Struct, frozen=True, kw_only=True):
    """One model endpoint let into a run: listened on at ``127.0.0.1:port`` inside, copied
    to ``target`` on the host (``host:port``, or an absolute unix socket path)."""

    port: int
    target: str
    # Where it was found ("opencode config provider 'scripted'", "env OPENAI_BASE_URL").
    source: str

    @property
    def forward(self) -> str:
        """The wrapper's ``--forward`` item."""
        return f"{self.port}={self.target}"

    @property
    def described(self) -> str:
        return f"127.0.0.1:{self.port} -> {self.target}"


class NetworkPlan(msgspec.Struct, frozen=True, kw_only=True):
    """A run's network as the wrapper makes it (recorded in its RunStarted's view)."""

    mode: Network
    endpoints: tuple[Endpoint, ...] = ()

    @property
    def forwards(self) -> list[str]:
        return [e.forward for e in self.endpoints]


def uses_model(arm: ArmSpec) -> bool:
    """Whether the arm's agent talks to a model (solo and supervisor arms always do)."""
    return arm.uses_model if isinstance(arm, CommandArm) else True


def default_network(arm: ArmSpec) -> Network:
    return "model" if uses_model(arm) else "none"


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _endpoint(url: str, source: str) -> Endpoint:
    """The endpoint a base URL names; SandboxError when it cannot be forwarded."""
    parts = urlsplit(url.strip())
    host = parts.hostname or ""
    try:
        port = parts.port or DEFAULT_PORTS.get(parts.scheme)
    except ValueError:
        port = None
    if port is None or not host:
        raise SandboxError(f'{NETWORK_KEY} = "model": {source} {url!r} names no host and port')
    if not _loopback(host):
        raise SandboxError(
            f'{NETWORK_KEY} = "model": {source} {url!r} is not on this machine\'s loopback,'
            " and only a local endpoint (a scripted model, a model gateway) can be forwarded"
            ' into the cell; point the arm at one or set network = "host"'
        )
    target = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    if host == "localhost":
        target = f"127.0.0.1:{port}"
    return Endpoint(port=port, target=target, source=source)


def _config_urls(config_text: bytes) -> list[tuple[str, str]]:
    """(base URL, source) of every provider in an opencode config (not JSON: none)."""
    try:
        config: Any = json.loads(config_text)
    except ValueError:
        return []
    providers = config.get("provider") if isinstance(config, dict) else None
    if not isinstance(providers, dict):
        return []
    out = []
    for name, provider in sorted(providers.items()):
        options = provider.get("options") if isinstance(provider, dict) else None
        url = options.get("baseURL") if isinstance(options, dict) else None
        if isinstance(url, str) and url.strip():
            out.append((url, f"opencode config provider {name!r} baseURL"))
    return out


def model_endpoints(
    spec: CellSpec, *, home: str, run_dir: str, env: Mapping[str, str]
) -> tuple[Endpoint, ...]:
    """THE model endpoints a cell's agent may reach: the base URLs of the providers in the
    cell's opencode config copy, of ``OPENAI_BASE_URL``-like variables in its env, and, for
    a command arm, every http(s) URL in the arm's own env. ``home`` is the arenad home (where
    a model gateway's socket would live). Raises SandboxError for one that cannot be
    forwarded, and for a solo or supervisor arm with none at all."""
    # With the model gateway (arenad.gateway.cell.point_opencode) the config copy already
    # names the gateway's loopback port, so that is the one endpoint let in: the upstream is
    # the gateway's to reach, never the cell's.
    del home
    found: list[tuple[str, str]] = []
    try:
        with open(cell_paths(run_dir).opencode_config, "rb") as f:
            found += _config_urls(f.read())
    except OSError:
        pass
    found += [(env[name], f"env {name}") for name in BASE_URL_VARS if env.get(name)]
    if isinstance(spec.arm, CommandArm):
        # Through the gateway, the conventional base URLs of the arm's env are the gateway's
        # upstreams (arenad.gateway.cell.point_command_env): the agent's env names the
        # gateway instead, and the upstream is never let in.
        taken = BASE_URL_VARS if spec.gateway.kind == "gateway" and spec.arm.uses_model else ()
        found += [
            (value, f"arm env {name}")
            for name, value in sorted(spec.arm.env.items())
            if value.strip().lower().startswith(("http://", "https://")) and name not in taken
        ]
    endpoints: dict[int, Endpoint] = {}
    for url, source in found:
        endpoint = _endpoint(url, source)
        kept = endpoints.setdefault(endpoint.port, endpoint)
        if kept.target != endpoint.target:
            raise SandboxError(
                f'{NETWORK_KEY} = "model": {kept.source} and {source} both use port'
                f" {endpoint.port} for different hosts ({kept.target}, {endpoint.target})"
            )
    if not endpoints and not isinstance(spec.arm, CommandArm):
        raise SandboxError(
            f'{NETWORK_KEY} = "model": no model endpoint found for arm {spec.arm.name!r} (a'
            " provider baseURL in the opencode config, or OPENAI_BASE_URL); give one, or set"
            ' network = "host"'
        )
    for e in endpoints.values():
        if FORWARD_SEPARATOR in e.target:
            raise SandboxError(f"{NETWORK_KEY}: endpoint {e.target!r} contains a comma")
    return tuple(sorted(endpoints.values(), key=lambda e: e.port))


def network_plan(spec: CellSpec, *, home: str, run_dir: str, env: Mapping[str, str]) -> NetworkPlan:
    """The agent run's network (raises SandboxError for endpoints that cannot be let in;
    whether this machine makes namespaces at all is ``arenad.runs.netns.problem``'s)."""
    mode = spec.sandbox.network
    if mode in ("host", "none"):
        return NetworkPlan(mode=mode)
    return NetworkPlan(
        mode="model",
        endpoints=model_endpoints(spec, home=home, run_dir=os.fspath(run_dir), env=env),
    )
