"""The ledger's I/O edge: an operator's verdict file that does not decode is one line."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from arenad.errors import UserError
from arenad.home import Home
from arenad.ledger.service import record_verdict


def test_a_verdict_file_that_is_not_utf8_is_a_user_error(tmp_path: Path) -> None:
    bad = tmp_path / "judge.json"
    bad.write_bytes(b'{"resolved": true,\n "judge": "\xff"}')
    with pytest.raises(UserError) as info:
        asyncio.run(record_verdict(Home(tmp_path / "home"), "c:i:SOLO:0", bad))
    assert str(info.value) == f"{bad}:2: not UTF-8 (invalid start byte)"
