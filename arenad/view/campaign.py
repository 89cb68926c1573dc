"""The campaign page's query, from its URL: every filter, the order and the page are in
the query string, so a URL names one table; a value the page cannot mean is the user's
mistake (a 400, said in one line), not an empty table. (The page's reads:
:func:`arenad.readmodels.results.campaign_results`.)
"""

from __future__ import annotations

from collections.abc import Mapping

from arenad.cell.machine import CellStatus
from arenad.errors import UserError
from arenad.readmodels.results import RESULTS, SORTS, ResultQuery

__all__ = ["parse_query"]

TEXT_CHARS = 200
STATUS_VALUES = tuple(str(s) for s in CellStatus)


def parse_query(campaign: str, params: Mapping[str, str]) -> ResultQuery:
    """The results query a URL's parameters ask (absent or empty: no filter)."""

    def given(key: str) -> str | None:
        value = params.get(key)
        return value if value else None

    state, result = given("state"), given("result")
    if state is not None and state not in STATUS_VALUES:
        raise UserError(f"state must be one of {', '.join(STATUS_VALUES)}, not {state[:40]!r}")
    if result is not None and result not in RESULTS:
        raise UserError(f"result must be one of {', '.join(RESULTS)}, not {result[:40]!r}")
    sort = given("sort") or "instance"
    if sort not in SORTS:
        raise UserError(f"sort must be one of {', '.join(SORTS)}, not {sort[:40]!r}")
    order = given("order") or "asc"
    if order not in ("asc", "desc"):
        raise UserError(f"order must be asc or desc, not {order[:40]!r}")
    page = given("page") or "1"
    if not page.isdigit() or len(page) > 9 or int(page) < 1:
        raise UserError(f"page must be a number from 1, not {page[:40]!r}")
    text = given("q")
    if text is not None and len(text) > TEXT_CHARS:
        raise UserError(f"q (a part of an instance id) is at most {TEXT_CHARS} characters")
    return ResultQuery(
        campaign=campaign,
        state=state,
        result=result,
        arm=given("arm"),
        instance=given("instance"),
        text=text,
        sort=sort,
        desc=order == "desc",
        page=int(page),
    )
