"""docs/campaign-file.md is generated from the campaign structs and cannot drift."""

from __future__ import annotations

from pathlib import Path

import msgspec

from arenad.campaign.load import CampaignFile, InstanceRow
from arenad.campaign.reference import COMMAND, DOC_PATH, KEYS, render, tables, undescribed

REPO = Path(__file__).resolve().parents[2]


def _every_struct() -> list[type[msgspec.Struct]]:
    return [CampaignFile, InstanceRow, *_nested(CampaignFile)]


def _nested(struct: type[msgspec.Struct]) -> list[type[msgspec.Struct]]:
    import msgspec.inspect as mi

    found: list[type[msgspec.Struct]] = []
    info = mi.type_info(struct)
    assert isinstance(info, mi.StructType)

    def walk(t: mi.Type) -> None:
        if isinstance(t, mi.Metadata):
            walk(t.type)
        elif isinstance(t, mi.StructType):
            found.append(t.cls)
        elif isinstance(t, mi.UnionType):
            for x in t.types:
                walk(x)
        elif isinstance(t, mi.ListType):
            walk(t.item_type)
        elif isinstance(t, mi.DictType):
            walk(t.value_type)

    for field in info.fields:
        walk(field.type)
    return found


def test_the_committed_reference_is_the_generated_one() -> None:
    committed = (REPO / DOC_PATH).read_text(encoding="utf-8")
    assert committed == render(), f"{DOC_PATH} is stale: run {COMMAND} and commit it"


def test_every_key_has_a_meaning() -> None:
    assert undescribed() == [], "describe these keys in KEYS of arenad/campaign/reference.py"


def test_every_key_of_every_struct_is_in_the_document() -> None:
    # Independent of the generator's walk: each field of each struct a campaign file can
    # hold is a row of the table for its struct.
    rows = {(t.struct, k.name) for t in tables() for k in t.keys}
    for struct in _every_struct():
        for field in msgspec.structs.fields(struct):
            assert (struct.__name__, field.encode_name) in rows
    doc = render()
    for key in ("timeout_s", "opencode_bin", "extra_args", "prompt_suffix", "argv", "env"):
        assert f"| `{key}` |" in doc
    assert "| `uses_model` |" in doc


def test_no_meaning_is_kept_for_a_key_that_is_gone() -> None:
    rows = {f"{t.struct}.{k.name}" for t in tables() for k in t.keys}
    assert sorted(set(KEYS) - rows) == []


def test_every_arm_kind_and_table_has_a_section() -> None:
    headings = [t.heading for t in tables()]
    for kind in ("solo", "supervisor", "command"):
        assert f'[[arms]] kind = "{kind}"' in headings
    for table in ("budget", "materializer", "secrets", "sandbox", "judge", "executor"):
        assert f"[{table}]" in headings


def test_the_reference_names_defaults_types_and_requirements() -> None:
    solo = next(t for t in tables() if t.struct == "SoloArmFile")
    by_name = {k.name: k for k in solo.keys}
    assert by_name["timeout_s"].type == "number"
    assert by_name["timeout_s"].default == "`1000.0`"
    assert by_name["model"].default == "required"
    assert by_name["extra_args"].type == "list of string"
    assert by_name["prompt_suffix"].default == "`WORKER_PROMPT_SUFFIX`"
