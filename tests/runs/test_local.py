"""The local executor passes the executor contract."""

from __future__ import annotations

from pathlib import Path

import pytest

from arenad.runs.executor import Executor
from arenad.runs.local import LocalExecutor
from tests.runs.executor_contract import ExecutorContract, MakeExecutor


class TestLocalExecutor(ExecutorContract):
    @pytest.fixture
    def make_executor(self, tmp_path: Path) -> MakeExecutor:
        async def make() -> Executor:
            executor = LocalExecutor(store_path=tmp_path / "absent.db")
            await executor.start()
            return executor

        return make
