"""The arm-kinds table (issue 28): every arm kind has its row, and the read side asks it."""

from __future__ import annotations

import typing

from arenad.cell.kinds import KINDS, kind_of
from events.specs import ArmSpec


def test_every_arm_kind_has_a_row_and_nothing_else_does() -> None:
    tags = {str(t.__struct_config__.tag) for t in typing.get_args(ArmSpec)}
    assert set(KINDS) == tags


def test_the_rows_say_what_the_folds_did_by_name() -> None:
    assert [k for k, row in KINDS.items() if row.reports_cost] == ["solo", "supervisor"]
    assert {k: row.cost_of_record for k, row in KINDS.items()} == {
        "solo": "store",
        "supervisor": "driver",
        "command": "none",
    }
    # A kind a newer arenad wrote: its store is read, nothing else assumed.
    unknown = kind_of("someday")
    assert (unknown.reports_cost, unknown.cost_of_record) == (False, "store")
