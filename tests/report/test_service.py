"""The report's I/O edge: campaigns chosen from a real home, the page written whole."""

from __future__ import annotations

import asyncio
from pathlib import Path

import msgspec
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


def test_as_of_is_the_report_of_the_log_s_prefix(home: Path, tmp_path: Path) -> None:
    """The report as of event N equals the report of a log that holds only the first N
    events: at each transaction's end, a home built from that many of the arena's cells."""
    from arenad.home import open_store
    from arenad.report.service import report_store
    from tests.report.arena_log import Tick, arena_requests

    async def go() -> None:
        requests = arena_requests()
        ends = []
        for request in requests:
            ends.append((ends[-1] if ends else 0) + len(request.events))
        for j in (1, 5, 9, len(requests)):
            part = Home(tmp_path / f"part{j}")
            async with open_store(part, clock=Tick(), create=True) as store:
                for request in requests[:j]:
                    await store.append_many([request])
                expected = await report_store(store)
            async with open_store(Home(home)) as store:
                seen = await report_store(store, as_of=ends[j - 1])
            assert seen.as_of_seq == ends[j - 1]
            assert msgspec.structs.replace(seen, as_of_seq=None) == expected

    asyncio.run(go())


@pytest.mark.parametrize("as_of", [0, 10_000])
def test_as_of_outside_the_log_is_a_user_error(home: Path, as_of: int) -> None:
    with pytest.raises(UserError, match=r"--as-of .*numbered 1 to \d+"):
        asyncio.run(report(Home(home), as_of=as_of))


def test_as_of_before_a_named_campaign_s_first_cell_is_a_user_error(home: Path) -> None:
    with pytest.raises(UserError, match="no cell of side at event 3"):
        asyncio.run(report(Home(home), ["side"], as_of=3))
