"""Pointing a cell's agent at the gateway (pure parts): a command arm gets the conventional
env variables naming the gateway and its attempt's token; the upstreams are what they named
before, and their keys stay with the gateway (issue 31)."""

from __future__ import annotations

from typing import Any

import msgspec

from arenad.gateway.cell import command_grant
from events.specs import CellSpec, CommandArm, GatewaySpec
from tests.events.samples import make_spec


def _spec(**gateway: Any) -> CellSpec:
    arm = CommandArm(name="CMD", argv=["agent"])
    return msgspec.structs.replace(
        make_spec(), arm=arm, gateway=GatewaySpec(kind="gateway", **gateway)
    )


def test_the_conventional_variables_name_the_gateway_and_the_token() -> None:
    env = {
        "OPENAI_BASE_URL": "http://127.0.0.1:9001/v1/",
        "OPENAI_API_BASE": "http://127.0.0.1:9001/v1",
        "OPENAI_API_KEY": "sk-real",
        "PATH": "/usr/bin",
    }
    spec = _spec(max_usd=0.5)
    grant, pointed = command_grant(env, spec, "c1", 2, ["/secrets/a.env"])
    assert pointed == {
        "OPENAI_BASE_URL": "{gateway}/u/openai/v1",
        "OPENAI_API_KEY": "{token}",
        "ANTHROPIC_BASE_URL": "{gateway}/u/anthropic",
        "ANTHROPIC_API_KEY": "{token}",
        "PATH": "/usr/bin",
    }
    openai, anthropic = grant.upstreams["openai"], grant.upstreams["anthropic"]
    # Each upstream's base ends where the wire's path is appended (/v1).
    assert openai.base_url == "http://127.0.0.1:9001/v1"
    assert anthropic.base_url == "https://api.anthropic.com/v1"
    # The key is found by name where the gateway runs, never copied from the cell's env.
    assert (openai.key_env, openai.key_env_files, openai.key_value) == (
        "OPENAI_API_KEY",
        ["/secrets/a.env"],
        None,
    )
    assert anthropic.key_env == "ANTHROPIC_API_KEY"
    assert (grant.cell_id, grant.attempt, grant.max_usd, grant.prices) == ("c1", 2, 0.5, {})


def test_a_key_the_arms_own_env_gives_literally_moves_into_the_grant() -> None:
    arm_env = {"ANTHROPIC_API_KEY": "sk-ant-literal"}
    grant, pointed = command_grant(arm_env, _spec(), "c1", 1, [], arm_env=arm_env)
    assert grant.upstreams["anthropic"].key_value == "sk-ant-literal"
    assert pointed["ANTHROPIC_API_KEY"] == "{token}"
    assert "sk-ant-literal" not in pointed.values()
