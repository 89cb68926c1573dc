"""Pointing a cell's agent at the gateway (pure parts): a command arm gets the conventional
env variables naming the gateway and its attempt's token; the upstreams are what they named
before, and their keys stay with the gateway (issue 31)."""

from __future__ import annotations

from typing import Any

import msgspec

from arenad.gateway.cell import command_grant, command_prices
from arenad.gateway.grants import Price
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
    # An arm that names no model cannot be priced: its calls say why, never a 0.
    assert grant.unpriced_reason is not None and "names no model" in grant.unpriced_reason


def test_a_key_the_arms_own_env_gives_literally_moves_into_the_grant() -> None:
    arm_env = {"ANTHROPIC_API_KEY": "sk-ant-literal"}
    grant, pointed = command_grant(arm_env, _spec(), "c1", 1, [], arm_env=arm_env)
    assert grant.upstreams["anthropic"].key_value == "sk-ant-literal"
    assert pointed["ANTHROPIC_API_KEY"] == "{token}"
    assert "sk-ant-literal" not in pointed.values()


# The campaign's price table as a solo arm's is read: the providers' cost blocks of the
# cell's opencode config (USD per 1M tokens).
CONFIG: dict[str, Any] = {
    "provider": {
        "scripted": {
            "options": {"baseURL": "http://127.0.0.1:9/v1"},
            "models": {
                "fixer": {"id": "fixer-2025", "cost": {"input": 3.0, "output": 15.0}},
                "free": {},
            },
        },
        "other": {"models": {"org/big": {"cost": {"input": 1.0, "output": 2.0}}}},
    }
}
FIXER = Price(input=3.0, output=15.0)


def test_a_command_arm_that_names_its_model_is_priced_from_the_campaigns_table() -> None:
    # provider/id: that provider's model; the table holds every name a CLI may send.
    prices, why = command_prices(CONFIG, "scripted/fixer")
    assert prices == {"scripted/fixer": FIXER, "fixer": FIXER, "fixer-2025": FIXER}
    assert why == "only the command arm's model 'scripted/fixer' is priced"
    # A bare id: any provider's model of that key or upstream id; a slash may be its own.
    assert command_prices(CONFIG, "fixer-2025")[0] == {"fixer-2025": FIXER}
    assert command_prices(CONFIG, "org/big")[0] == {
        "org/big": Price(input=1.0, output=2.0),
        "big": Price(input=1.0, output=2.0),
    }
    grant, _ = command_grant({}, _spec(), "c1", 1, [], config=CONFIG, model="scripted/fixer")
    assert grant.prices["fixer-2025"] == FIXER


def test_a_command_arm_whose_model_has_no_price_says_why() -> None:
    for model, said in (
        (None, "names no model"),
        ("", "names no model"),
        ("scripted/free", "no price for the command arm's model 'scripted/free'"),
        ("other/fixer", "no price for the command arm's model 'other/fixer'"),
        ("gpt-x", "no price for the command arm's model 'gpt-x'"),
    ):
        prices, why = command_prices(CONFIG, model)
        assert prices == {} and why is not None and said in why, model
    # No config (or one that is not an object's providers): nothing priced, with the reason.
    assert command_prices({"provider": []}, "fixer")[0] == {}
