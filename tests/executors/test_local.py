"""The local executor passes the executor contract."""

from __future__ import annotations

from pathlib import Path

import pytest

from arenad.executors.local import LocalExecutor
from arenad.runs.executor import Executor, ExecutorMismatch
from events.specs import ExecutorSpec
from tests.runs.executor_contract import ExecutorContract, MakeExecutor, cell_spec


class TestLocalExecutor(ExecutorContract):
    @pytest.fixture
    def make_executor(self, tmp_path: Path) -> MakeExecutor:
        async def make() -> Executor:
            executor = LocalExecutor(store_path=tmp_path / "absent.db")
            await executor.start()
            return executor

        return make


async def test_a_cell_that_asks_for_another_executor_is_refused(tmp_path: Path) -> None:
    executor = LocalExecutor(store_path=tmp_path / "absent.db")
    spec = cell_spec(executor=ExecutorSpec(kind="ray", resources={"arenad_slot": 1}))
    with pytest.raises(ExecutorMismatch, match="asks for the ray executor"):
        await executor.site(spec.cell_id, 1, spec)
    assert await executor.site(spec.cell_id, 1, cell_spec()) is not None
