"""The view's browser fixture (see tests/view/browser.py for why Debian's chromium)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.view.browser import CHROMIUM, CHROMIUM_ARGS, browser_skip_reason


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    reason = browser_skip_reason()
    if reason is not None:
        pytest.skip(reason)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        launched = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            yield launched
        finally:
            launched.close()
