"""Adding an arm kind is a new module in arenad/arms and one row in arenad/cell/kinds.py
(issue 28): a synthetic fourth kind, its spec and its row defined here and nowhere else,
goes through what the read side asks of a kind (run cost, live spend, status rows, the
ledger's line, the run-dir documents, the recovery of its store). A second test holds the
other half of the promise: no module outside arms/ and the kinds table compares a kind's
name or asks isinstance of an arm class, so there is no branch left for a new kind to edit.
"""

from __future__ import annotations

import ast
import typing
from collections.abc import Iterator
from pathlib import Path

import msgspec
import pytest

from arenad.arms import ARMS
from arenad.arms.documents import documented_attempt, has_result_json
from arenad.budget.spend import SpendFold
from arenad.campaign.load import ArmFile
from arenad.cell.kinds import KINDS, ArmKind, harness_of, kind_of, kind_of_arm, run_model
from arenad.cell.spend import run_cost
from arenad.ledger.project import new_stats, project_cell
from arenad.readmodels.cells import spend_extras
from arenad.recovery.capture import recover_tree
from arenad.runs.executor import Tools
from events import cell as ev
from events.base import Event, Recorded
from events.control import CampaignSubmitted
from events.specs import ArmSpec
from tests.budget.test_spend import started, step
from tests.events.samples import make_spec
from tests.ledger.test_project import T0, _run_events

REPO = Path(__file__).resolve().parents[2]


class ReviewArm(msgspec.Struct, tag="review", tag_field="kind", frozen=True, kw_only=True):
    """The fourth kind's spec: a reviewer agent, its model under its own field name."""

    name: str
    reviewer_model: str
    timeout_s: float = 60.0


# Its one row: it reports its cost as it goes, its store is spend of record, one agent
# line under its own harness name, usage figures on its status rows, no result.json.
REVIEW = ArmKind(
    reports_cost=True,
    cost_of_record="store",
    driver_figures=False,
    usage_figures=True,
    ledger="agent",
    harness="review:{name}",
    model_field="reviewer_model",
    journal_lines=False,
    result_document=False,
    store_figures="spend",
    gateway=False,
)

ARM = ReviewArm(name="REV", reviewer_model="local/reviewer")
SPEC = msgspec.structs.replace(
    make_spec(instance_id="bug-4", arm="REV"),
    arm=ARM,  # type: ignore[arg-type]  # a kind events.specs does not know yet
)


@pytest.fixture
def review_row(monkeypatch: pytest.MonkeyPatch) -> ArmKind:
    monkeypatch.setitem(KINDS, "review", REVIEW)
    return REVIEW


def test_the_kinds_table_answers_for_the_fourth_kind(review_row: ArmKind) -> None:
    assert kind_of("review") is kind_of_arm(ARM) is review_row  # type: ignore[arg-type]
    assert harness_of(ARM) == "review:REV"  # type: ignore[arg-type]
    assert run_model(ARM) == "local/reviewer"  # type: ignore[arg-type]


def test_its_run_cost_is_its_store_figure(review_row: ArmKind) -> None:
    recovered = ev.CellRecovered(
        attempt=1, store_available=True, spend=ev.SpendFigures(sessions=1, cost_usd=0.25)
    )
    assert run_cost("review", recovered, None) == 0.25


def _running(*costs: float) -> SpendFold:
    """A campaign of the fourth kind, one attempt running, its stream's step costs fed."""
    cell = f"c:i1:{ARM.name}:0"
    f = SpendFold()
    f.apply(
        "campaign/c",
        CampaignSubmitted(
            name="c", source_path="/c.toml", spec_sha256="0", cell_ids=[cell],
            arm_kinds={ARM.name: "review"},
        ),
    )  # fmt: skip
    f.apply(*started(cell))
    for n, cost in enumerate(costs):
        f.apply(*step(cell, cost, n * 1000))
    return f


def test_the_budget_counts_its_live_spend_by_its_row(monkeypatch: pytest.MonkeyPatch) -> None:
    # Before the row, a kind this version does not know: its live spend is unknown.
    before = _running().campaign("c")
    assert (before.spent_usd, before.unknown_attempts) == (0.0, 1)
    monkeypatch.setitem(KINDS, "review", REVIEW)
    # With it: a kind that reports its cost, nothing reported yet is a known 0 ...
    after = _running().campaign("c")
    assert (after.spent_usd, after.unknown_attempts) == (0.0, 0)
    # ... and what its stream reports counts against the cap.
    assert _running(0.125, 0.25).campaign("c").spent_usd == 0.375


def test_its_status_rows_carry_the_figures_its_row_names(review_row: ArmKind) -> None:
    extras = spend_extras("review", 0.5, 1, 2, None, None, 3, 4, 0.5, 7)
    assert extras["usage"] == {"steps": 3, "max_ctx": 4, "oc_cost": 0.5, "total_io": 7}
    assert "driver_usd" not in extras


def test_the_ledger_writes_its_agent_line(review_row: ArmKind) -> None:
    spend = ev.SpendFigures(sessions=1, tokens_in=10, tokens_out=2, cost_usd=0.25)
    events: list[Event] = [ev.CellSubmitted(spec=SPEC), *_run_events("/r", spend=spend)]
    records = [
        Recorded(i, f"cell/{SPEC.cell_id}", i, "x", 1, T0 + i, e) for i, e in enumerate(events)
    ]
    [line] = project_cell(SPEC.cell_id, records, "run", new_stats())
    assert line["policy"]["harness"] == "review:REV"
    assert (line["policy"]["provider"], line["policy"]["model"]) == ("local", "reviewer")
    assert line["cost"]["usd"] == 0.25


def test_it_writes_no_result_document(review_row: ArmKind) -> None:
    events: list[Event] = [ev.CellSubmitted(spec=SPEC), *_run_events("/r", spend=ev.SpendFigures())]
    records = [
        Recorded(i, f"cell/{SPEC.cell_id}", i, "x", 1, T0 + i, e) for i, e in enumerate(events)
    ]
    found = documented_attempt(records, 1)
    assert found is not None and not has_result_json(*found)


def test_its_store_is_recovered_as_its_row_says(review_row: ArmKind, tmp_path: Path) -> None:
    # "spend": a missing store is a recorded gap (a command's would be no failure).
    requests, recovered = recover_tree(
        Tools(),
        str(tmp_path / "opencode.db"),
        SPEC.cell_id,
        1,
        "review",  # type: ignore[arg-type]  # the sessions' purpose: events name three
        None,
    )
    assert not recovered.store_available and recovered.gap is not None
    assert len(requests) == 1  # the gap, recorded on the capture stream


# -- no branch on a kind's name outside arms/ and the kinds table ----------------------------

KIND_NAMES = frozenset(KINDS)
# The classes one per kind: the arm specs, the arms, the campaign file's arm tables.
ARM_CLASSES = frozenset(
    {t.__name__ for t in typing.get_args(ArmSpec)}
    | {t.__name__ for t in ARMS.values()}
    | {t.__name__ for t in typing.get_args(ArmFile)}
)
ALLOWED_DIRS = ("arenad/arms/",)
ALLOWED_FILES = ("arenad/cell/kinds.py",)
# Sites that compare a kind's name and are not (yet) a row: each says why. An entry that
# no longer matches fails the test, so the list only shrinks.
ALLOW: dict[tuple[str, str], str] = {
    # Not an arm kind: the judge's kind (command | swebench) shares the word.
    ("arenad/campaign/load.py", 'parsed.kind == "command"'): "the judge's kind",
    # Which egress an arm gets: another engineer is editing sandbox/network.py now (issue
    # 28 names it); a row (a command's ``uses_model``, the default network) comes after.
    ("arenad/sandbox/network.py", "isinstance(arm, CommandArm)"): "not moved yet",
    ("arenad/sandbox/network.py", "isinstance(spec.arm, CommandArm)"): "not moved yet",
}


def _names(node: ast.expr) -> Iterator[str]:
    for sub in ast.walk(node):
        if isinstance(sub, ast.Name):
            yield sub.id
        elif isinstance(sub, ast.Attribute):
            yield sub.attr


def _kind_literals(node: ast.expr) -> bool:
    return any(isinstance(sub, ast.Constant) and sub.value in KIND_NAMES for sub in ast.walk(node))


def kind_branches(source: str) -> Iterator[tuple[int, str]]:
    """Each comparison with a kind's name, match case on one, or isinstance of an arm class:
    its line and its source text."""
    tree = ast.parse(source)
    for node in ast.walk(tree):
        hit = False
        if isinstance(node, ast.Compare):
            hit = any(_kind_literals(e) for e in [node.left, *node.comparators])
        elif isinstance(node, ast.match_case):
            hit = _kind_literals(node.pattern)  # type: ignore[arg-type]
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("isinstance", "issubclass")
            and len(node.args) == 2
        ):
            hit = any(name in ARM_CLASSES for name in _names(node.args[1]))
        if hit:
            where = node.pattern if isinstance(node, ast.match_case) else node
            yield where.lineno, ast.get_source_segment(source, where) or ""


def test_the_scanner_sees_a_kind_branch() -> None:
    # A guard on the scanner: each shape it must catch.
    code = (
        'if arm.kind == "solo": pass\n'
        'if tag in ("x", "supervisor"): pass\n'
        "if isinstance(arm, SoloArm | CommandArm): pass\n"
        'match tag:\n    case "command": pass\n'
        'kind = "solo"\n'  # naming a kind is no branch
    )
    assert [line for line, _ in kind_branches(code)] == [1, 2, 3, 5]


def test_no_kind_branch_outside_arms_and_the_kinds_table() -> None:
    found: list[str] = []
    seen: set[tuple[str, str]] = set()
    for path in sorted((REPO / "arenad").rglob("*.py")):
        rel = path.relative_to(REPO).as_posix()
        if rel.startswith(ALLOWED_DIRS) or rel in ALLOWED_FILES:
            continue
        for line, text in kind_branches(path.read_text()):
            if (rel, text) in ALLOW:
                seen.add((rel, text))
            else:
                found.append(f"{rel}:{line}: {text}")
    assert found == [], "look the kind up in arenad/cell/kinds.py instead"
    assert seen == set(ALLOW), "an allowed site is gone: remove it from ALLOW"
