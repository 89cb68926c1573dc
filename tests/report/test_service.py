"""The report's I/O edge: campaigns chosen from a real home, the page written whole."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from arenad.errors import UserError
from arenad.home import Home
from arenad.report.render import html_page
from arenad.report.service import report
from tests.report.arena_log import build_arena


@pytest.fixture
def home(tmp_path: Path) -> Path:
    asyncio.run(build_arena(tmp_path / "home"))
    return tmp_path / "home"


def test_a_named_campaign_without_cells_is_a_user_error(home: Path) -> None:
    with pytest.raises(UserError, match="no such campaign: nope"):
        asyncio.run(report(Home(home), ["arena", "nope"]))


def test_the_page_is_written_whole(home: Path, tmp_path: Path) -> None:
    out = tmp_path / "report.html"
    out.write_text("an older page")
    result = asyncio.run(report(Home(home), ["arena", "arena"], html=out))
    assert result.campaigns == ["arena"]
    assert out.read_bytes() == html_page(result)
    assert out.stat().st_mode & 0o777 == 0o644
    # No temporary file is left beside it.
    assert sorted(p.name for p in tmp_path.iterdir()) == ["home", "report.html"]


def test_an_unwritable_page_is_a_user_error(home: Path, tmp_path: Path) -> None:
    with pytest.raises(UserError, match=r"cannot write .*missing/report\.html"):
        asyncio.run(report(Home(home), html=tmp_path / "missing" / "report.html"))


def test_a_home_without_a_store_is_a_user_error(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="no arenad store"):
        asyncio.run(report(Home(tmp_path / "empty")))
