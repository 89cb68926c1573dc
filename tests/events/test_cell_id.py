"""One cell-id parser (issue 28: the id was parsed ad hoc at a dozen sites)."""

from __future__ import annotations

import re
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from events.specs import CellId, arm_of, campaign_of, cell_id
from events.streams import campaign_cells, cell_stream

_PART = st.text(alphabet=st.characters(blacklist_characters=":"), min_size=1, max_size=8)


@given(_PART, _PART, _PART, st.integers(min_value=0, max_value=10**6))
def test_parse_inverts_cell_id(campaign: str, instance: str, arm: str, rep: int) -> None:
    text = cell_id(campaign, instance, arm, rep)
    assert CellId.parse(text) == CellId(campaign, instance, arm, rep)
    assert (campaign_of(text), arm_of(text)) == (campaign, arm)


@given(_PART, _PART, _PART, _PART, st.integers(min_value=0, max_value=10**6))
def test_a_campaigns_prefix_selects_exactly_its_cells(
    campaign: str, other: str, instance: str, arm: str, rep: int
) -> None:
    stream = cell_stream(cell_id(campaign, instance, arm, rep))
    assert stream.startswith(campaign_cells(campaign))
    assert stream.startswith(campaign_cells(other)) == (other == campaign)


def test_other_shapes_are_not_cell_ids_but_still_name_a_campaign() -> None:
    for text in ("c", "c:i:a", "c:i:a:x", "c:i:a:1:2", "c:i:a:-1", "c:i:a:١"):
        assert CellId.parse(text) is None, text
    assert (campaign_of("c"), arm_of("c")) == ("c", "")
    assert arm_of("c:i:a:x") == "a"


def test_no_module_splits_a_cell_id_by_hand() -> None:
    root = Path(__file__).resolve().parents[2]
    by_hand = re.compile(r"cell_id\)?\.split\(|cell_of\([^)]*\)\.split\(")
    found = [
        f"{path.relative_to(root)}:{n}"
        for top in ("arenad", "events")
        for path in sorted((root / top).rglob("*.py"))
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if by_hand.search(line)
    ]
    assert found == []
