"""Campaign file types and the spec types they resolve into agree on every default, so
the two cannot drift (a key left out of a campaign file means what the spec says)."""

from __future__ import annotations

import msgspec
import pytest

from arenad.campaign import load as files
from events import specs

# Fields whose file default differs from the spec's on purpose, and why.
RESOLVED_AT_SUBMIT = {
    # The file names a checkout path relative to the campaign; the spec holds it resolved.
    ("SupervisorArmFile", "loops_repo"),
    # Derived from DRIVER_CANCEL_TIMEOUT_MS (the driver's own deadline plus a buffer).
    ("SupervisorArmFile", "kill_grace_s"),
    # No [sandbox] table means the default sandbox (bwrap), which the spec holds resolved.
    ("CampaignFile", "sandbox"),
    # A spec recorded before limits decodes as "not limited" (None); a campaign file
    # without the keys gets the shared-box defaults (arenad.campaign.limits).
    ("SandboxFile", "pids"),
    ("SandboxFile", "cpus"),
    # None: each arm's default (model or none); the spec's own default is an old spec's.
    ("SandboxFile", "network"),
    # No [gateway] table means the gateway for a solo arm, resolved per cell; a spec
    # recorded before the gateway decodes as none (its agent reached the provider itself).
    ("CampaignFile", "gateway"),
}

PAIRS = [
    (files.SoloArmFile, specs.SoloArm),
    (files.CommandArmFile, specs.CommandArm),
    (files.SupervisorArmFile, specs.SupervisorArm),
    (files.SecretsFile, specs.SecretsSpec),
    (files.JudgeFile, specs.JudgeSpec),
    (files.MaterializerFile, specs.MaterializerSpec),
    (files.SandboxFile, specs.SandboxSpec),
    (files.CampaignFile, specs.CellSpec),
]


def _defaults(kind: type[msgspec.Struct]) -> dict[str, object]:
    out: dict[str, object] = {}
    for field in msgspec.structs.fields(kind):
        if field.default is not msgspec.NODEFAULT:
            out[field.name] = field.default
        elif field.default_factory is not msgspec.NODEFAULT:
            out[field.name] = field.default_factory()
    return out


@pytest.mark.parametrize(("file_type", "spec_type"), PAIRS, ids=lambda t: t.__name__)
def test_file_defaults_are_the_spec_defaults(
    file_type: type[msgspec.Struct], spec_type: type[msgspec.Struct]
) -> None:
    file_defaults = _defaults(file_type)
    spec_defaults = _defaults(spec_type)
    shared = set(file_defaults) & set(spec_defaults)
    assert shared, "the pair shares no defaulted field: a wrong pairing"
    for name in sorted(shared):
        if (file_type.__name__, name) in RESOLVED_AT_SUBMIT:
            continue
        file_value, spec_value = file_defaults[name], spec_defaults[name]
        if file_type is files.CampaignFile and name == "excludes":
            # None in the file means "the reference's list", which is the spec's default.
            assert file_value is None and spec_value == list(specs.DEFAULT_EXCLUDES)
            continue
        assert file_value == spec_value, f"{file_type.__name__}.{name}"
