"""The Ray executor passes the executor contract, on a real multi-node cluster."""

from __future__ import annotations

import pytest

from arenad.runs.executor import Executor
from tests.ray_support import RayTestCluster
from tests.runs.executor_contract import ExecutorContract, MakeExecutor


class TestRayExecutor(ExecutorContract):
    @pytest.fixture
    def make_executor(self, ray_cluster: RayTestCluster, ray_namespace: str) -> MakeExecutor:
        from arenad.runs.ray.executor import RayExecutor

        async def make() -> Executor:
            executor = RayExecutor(namespace=ray_namespace, heartbeat_s=10)
            await executor.start()
            return executor

        return make
