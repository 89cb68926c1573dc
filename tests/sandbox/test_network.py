"""Which network a cell's agent gets, and which model endpoints are let into it."""

from __future__ import annotations

import json
from pathlib import Path

import msgspec
import pytest

from arenad.sandbox.cellenv import cell_paths
from arenad.sandbox.confine import SandboxError
from arenad.sandbox.network import default_network, model_endpoints, network_plan
from events.specs import CellSpec, CommandArm, SandboxSpec
from tests.events.samples import make_spec


def _run_dir(tmp_path: Path, config: object | None) -> str:
    run_dir = tmp_path / "run"
    if config is not None:
        path = Path(cell_paths(run_dir).opencode_config)
        path.parent.mkdir(parents=True)
        path.write_text(json.dumps(config))
    return str(run_dir)


def _provider(url: str) -> dict[str, object]:
    return {"provider": {"scripted": {"options": {"baseURL": url, "apiKey": "k"}}}}


def _command(env: dict[str, str] | None = None, uses_model: bool = True) -> CellSpec:
    arm = CommandArm(name="CMD", argv=["agent"], env=env or {}, uses_model=uses_model)
    return msgspec.structs.replace(make_spec(), arm=arm)


def _endpoints(spec: CellSpec, run_dir: str, env: dict[str, str] | None = None) -> list[str]:
    found = model_endpoints(spec, home="/home", run_dir=run_dir, env=env or {})
    return [e.described for e in found]


def test_the_default_follows_whether_the_arm_uses_a_model() -> None:
    assert default_network(make_spec().arm) == "model"
    assert default_network(make_spec(supervisor=True).arm) == "model"
    assert default_network(_command().arm) == "model"
    assert default_network(_command(uses_model=False).arm) == "none"
    # A spec recorded before the key: what its cells were submitted to run with.
    assert msgspec.json.decode(b"{}", type=SandboxSpec).network == "host"


def test_a_solo_arm_reaches_its_opencode_providers(tmp_path: Path) -> None:
    run_dir = _run_dir(tmp_path, _provider("http://127.0.0.1:8765/v1"))
    assert _endpoints(make_spec(), run_dir) == ["127.0.0.1:8765 -> 127.0.0.1:8765"]
    # localhost is the IPv4 loopback on the host side; the port is the URL's.
    run_dir = _run_dir(tmp_path / "b", _provider("http://localhost/v1"))
    assert _endpoints(make_spec(), run_dir) == ["127.0.0.1:80 -> 127.0.0.1:80"]


def test_env_base_urls_and_a_command_arms_own_urls(tmp_path: Path) -> None:
    run_dir = _run_dir(tmp_path, None)
    spec = _command({"MODEL_URL": "http://127.0.0.1:9001/v1", "NOT_A_URL": "8686"})
    env = {"OPENAI_BASE_URL": "http://[::1]:9002/v1", "RAY_ADDRESS": "http://127.0.0.1:6379"}
    assert _endpoints(spec, run_dir, env) == [
        "127.0.0.1:9001 -> 127.0.0.1:9001",
        "127.0.0.1:9002 -> [::1]:9002",
    ]
    # A command arm that names no endpoint reaches nothing (it may need none).
    assert _endpoints(_command(), run_dir) == []


@pytest.mark.parametrize(
    ("url", "match"),
    [
        ("https://api.example.com/v1", "is not on this machine's loopback"),
        ("http://10.0.0.5:8000/v1", "is not on this machine's loopback"),
        ("http:///v1", "names no host and port"),
    ],
)
def test_an_endpoint_that_cannot_be_forwarded_fails_the_launch(
    tmp_path: Path, url: str, match: str
) -> None:
    run_dir = _run_dir(tmp_path, _provider(url))
    with pytest.raises(SandboxError, match=match) as caught:
        _endpoints(make_spec(), run_dir)
    assert str(caught.value).startswith('[sandbox] network = "model": ')
    assert 'network = "host"' in str(caught.value) or "no host" in str(caught.value)


def test_a_model_arm_with_no_endpoint_fails_the_launch_naming_the_key(tmp_path: Path) -> None:
    with pytest.raises(SandboxError, match=r'network = "model": no model endpoint found'):
        _endpoints(make_spec(), _run_dir(tmp_path, {"provider": {}}))


def test_one_port_for_two_hosts_is_refused(tmp_path: Path) -> None:
    spec = _command({"A": "http://127.0.0.1:9001/", "B": "http://127.0.0.2:9001/"})
    with pytest.raises(SandboxError, match="both use port 9001"):
        _endpoints(spec, _run_dir(tmp_path, None))


def test_the_plan_follows_the_spec(tmp_path: Path) -> None:
    run_dir = _run_dir(tmp_path, _provider("http://127.0.0.1:8765/v1"))

    def plan(network: str) -> tuple[str, list[str]]:
        spec = make_spec()
        spec = msgspec.structs.replace(
            spec, sandbox=msgspec.structs.replace(spec.sandbox, network=network)
        )
        got = network_plan(spec, home="/home", run_dir=run_dir, env={})
        return got.mode, got.forwards

    assert plan("model") == ("model", ["8765=127.0.0.1:8765"])
    assert plan("none") == ("none", [])
    assert plan("host") == ("host", [])


def test_through_the_gateway_a_command_arms_upstream_urls_are_not_let_in(tmp_path: Path) -> None:
    """The gateway took the conventional base URLs over (arenad.gateway.cell): the agent's
    env names the gateway, the one endpoint let in; the upstream (even a remote one, which
    could not be forwarded at all) is the gateway's to reach."""
    from events.specs import GatewaySpec

    run_dir = _run_dir(tmp_path, None)
    spec = _command(
        {"OPENAI_BASE_URL": "https://api.example.com/v1", "MODEL_URL": "http://127.0.0.1:9001"}
    )
    spec = msgspec.structs.replace(spec, gateway=GatewaySpec(kind="gateway"))
    env = {
        "OPENAI_BASE_URL": "http://127.0.0.1:7000/u/openai/v1",
        "ANTHROPIC_BASE_URL": "http://127.0.0.1:7000/u/anthropic",
    }
    assert _endpoints(spec, run_dir, env) == [
        "127.0.0.1:7000 -> 127.0.0.1:7000",
        "127.0.0.1:9001 -> 127.0.0.1:9001",
    ]
    # Without the gateway the arm's own base URL is its endpoint, and a remote one is refused.
    with pytest.raises(SandboxError, match="not on this machine's loopback"):
        _endpoints(msgspec.structs.replace(spec, gateway=GatewaySpec()), run_dir)
