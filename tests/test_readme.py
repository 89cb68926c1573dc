"""README.md is a user's door (issue 28): short, with internals in docs/."""

from __future__ import annotations

import re
from pathlib import Path

from arenad.cell.machine import CellStatus

REPO = Path(__file__).resolve().parents[1]


def test_the_readme_stays_under_200_lines() -> None:
    lines = (REPO / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) < 200, "README.md is a door: move details into docs/ and link them"


def test_the_readme_says_where_arenad_lives_and_what_each_state_means() -> None:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert "docs/campaign-file.md" in readme
    assert ".venv/bin" in readme
    # Every state of the cell machine is in the glossary, with what it means.
    for state in CellStatus:
        assert f"| `{state.value}` |" in readme


def test_one_word_for_the_reference_system() -> None:
    # Issue 28: the code said "the seed" where the README says "the reference".
    root = Path(__file__).resolve().parents[1]
    word = re.compile(r"\b[Tt]he seed\b|\bseed's\b")
    paths = [root / "README.md", *(root / "docs").rglob("*.md")]
    paths += [p for top in ("arenad", "events") for p in (root / top).rglob("*.py")]
    found = [str(p.relative_to(root)) for p in sorted(paths) if word.search(p.read_text())]
    assert found == []
