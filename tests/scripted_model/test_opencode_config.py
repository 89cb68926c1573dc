"""The opencode config for a scripted model server (pure)."""

from __future__ import annotations

import json

import pytest

from arenad.scripted_model import Cost, Model, opencode_config, opencode_config_for_script
from arenad.scripted_model.script import parse_script


def test_provider_block_and_defaults() -> None:
    config = opencode_config(port=4321, models=["a", "b"], costs={"b": Cost(input=3, output=15)})
    assert config["provider"]["scripted"] == {
        "npm": "@ai-sdk/openai-compatible",
        "name": "arenad scripted model",
        "options": {"baseURL": "http://127.0.0.1:4321/v1", "apiKey": "scripted"},
        "models": {
            "a": {
                "name": "a",
                "limit": {"context": 128000, "output": 4096},
                "cost": {"input": 0.0, "output": 0.0, "cache_read": 0.0},
                "tool_call": True,
            },
            "b": {
                "name": "b",
                "limit": {"context": 128000, "output": 4096},
                "cost": {"input": 3, "output": 15, "cache_read": 0.0},
                "tool_call": True,
            },
        },
    }
    assert config["model"] == "scripted/a"
    assert config["small_model"] == "scripted/a"
    assert config["autoupdate"] is False
    assert config["share"] == "disabled"
    permission = config["permission"]
    assert permission["bash"] == permission["edit"] == permission["read"] == "allow"
    assert "external_directory" not in permission  # stays at opencode's default (ask)
    json.dumps(config)  # JSON-ready for OPENCODE_CONFIG_CONTENT


def test_model_entries_provider_id_and_default_model() -> None:
    fixer = Model(
        id="fixer",
        name="Fixer",
        context=1000,
        output=100,
        cost=Cost(input=1, output=2, cache_read=0.5, cache_write=4),
    )
    config = opencode_config(
        port=1, models=["x", fixer], provider_id="local", model="fixer", permission={"bash": "ask"}
    )
    block = config["provider"]["local"]["models"]["fixer"]
    assert block["name"] == "Fixer"
    assert block["limit"] == {"context": 1000, "output": 100}
    assert block["cost"] == {"input": 1, "output": 2, "cache_read": 0.5, "cache_write": 4}
    assert config["model"] == "local/fixer"
    assert config["permission"] == {"bash": "ask"}


def test_for_script_uses_the_scripts_models() -> None:
    script = parse_script(
        '[[models]]\nid = "m"\ncost = { input = 3.0, output = 15.0, cache_read = 0.3 }\n'
    )
    config = opencode_config_for_script(script, port=9)
    assert config["provider"]["scripted"]["models"]["m"]["cost"] == {
        "input": 3.0,
        "output": 15.0,
        "cache_read": 0.3,
    }


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"models": []}, "at least one model"),
        ({"models": ["a"], "model": "b"}, "not one of"),
        ({"models": ["a"], "costs": {"z": Cost()}}, "unknown model(s): z"),
    ],
)
def test_bad_arguments(kwargs: dict[str, object], needle: str) -> None:
    with pytest.raises(ValueError) as info:
        opencode_config(port=1, **kwargs)  # type: ignore[arg-type]
    assert needle in str(info.value)
