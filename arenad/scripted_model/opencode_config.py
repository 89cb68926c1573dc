"""The opencode config that points opencode at a scripted model server (pure).

The result is a JSON-ready dict for ``OPENCODE_CONFIG_CONTENT`` (or an ``opencode.json``):
a custom ``@ai-sdk/openai-compatible`` provider on ``http://HOST:PORT/v1`` (bundled in
opencode, so nothing is downloaded), the default ``model`` and ``small_model`` (so the title
request also reaches the scripted server), no autoupdate, no sharing, and a permission block
that lets the workspace tools run without asking. ``external_directory`` keeps opencode's
default (``ask``, which ``opencode run`` auto-rejects), so paths outside the project stay
refused.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from arenad.scripted_model.script import Cost, Model, Script

DEFAULT_PROVIDER_ID = "scripted"
DEFAULT_API_KEY = "scripted"

PERMISSIVE_PERMISSION: Mapping[str, str] = {
    "read": "allow",
    "edit": "allow",
    "glob": "allow",
    "grep": "allow",
    "list": "allow",
    "bash": "allow",
    "task": "allow",
    "skill": "allow",
    "lsp": "allow",
    "todowrite": "allow",
    "webfetch": "allow",
    "websearch": "allow",
    # opencode asks after three identical tool calls in a row; a script may well repeat one.
    "doom_loop": "allow",
}
"""Workspace tools run without asking; ``external_directory`` is left at its default."""


def _cost_json(cost: Cost) -> dict[str, float]:
    out = {"input": cost.input, "output": cost.output, "cache_read": cost.cache_read}
    if cost.cache_write:
        out["cache_write"] = cost.cache_write
    return out


def opencode_config(
    *,
    port: int,
    models: Sequence[str | Model],
    provider_id: str = DEFAULT_PROVIDER_ID,
    model: str | None = None,
    costs: Mapping[str, Cost] | None = None,
    host: str = "127.0.0.1",
    provider_name: str = "arenad scripted model",
    api_key: str = DEFAULT_API_KEY,
    permission: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The opencode config dict for a scripted model server on ``host:port``.

    ``models`` are model ids or script :class:`Model` entries (their name, limits and cost
    are used). ``costs`` (USD per 1M tokens, by model id) overrides a model's cost; a model
    with no cost gets zeros, so opencode reports cost 0. ``model`` is the default model id
    (``provider_id/`` is prefixed); it defaults to the first model.
    """
    if not models:
        raise ValueError("opencode_config needs at least one model")
    entries = [Model(id=m) if isinstance(m, str) else m for m in models]
    ids = [m.id for m in entries]
    chosen = model if model is not None else ids[0]
    if chosen not in ids:
        raise ValueError(f"default model {chosen!r} is not one of {ids}")
    costs = costs or {}
    unknown = sorted(set(costs) - set(ids))
    if unknown:
        raise ValueError(f"costs given for unknown model(s): {', '.join(unknown)}")
    host_part = f"[{host}]" if ":" in host else host
    model_blocks: dict[str, Any] = {}
    for entry in entries:
        cost = costs.get(entry.id) or entry.cost or Cost()
        model_blocks[entry.id] = {
            "name": entry.name or entry.id,
            "limit": {"context": entry.context, "output": entry.output},
            "cost": _cost_json(cost),
            "tool_call": True,
        }
    qualified = f"{provider_id}/{chosen}"
    return {
        "$schema": "https://opencode.ai/config.json",
        "provider": {
            provider_id: {
                "npm": "@ai-sdk/openai-compatible",
                "name": provider_name,
                "options": {"baseURL": f"http://{host_part}:{port}/v1", "apiKey": api_key},
                "models": model_blocks,
            }
        },
        "model": qualified,
        "small_model": qualified,
        "autoupdate": False,
        "share": "disabled",
        "permission": dict(PERMISSIVE_PERMISSION if permission is None else permission),
    }


def opencode_config_for_script(
    script: Script,
    *,
    port: int,
    provider_id: str = DEFAULT_PROVIDER_ID,
    model: str | None = None,
    costs: Mapping[str, Cost] | None = None,
    host: str = "127.0.0.1",
    permission: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """:func:`opencode_config` for all of ``script``'s models."""
    return opencode_config(
        port=port,
        models=script.models,
        provider_id=provider_id,
        model=model,
        costs=costs,
        host=host,
        permission=permission,
    )
