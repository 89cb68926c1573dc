"""The local SWE-bench for tests that need a real docker engine and real instance images.

``local_swebench`` (a session fixture) skips, saying why, where no engine answers (as the
browser tests skip without chromium); else it builds the debootstrap base image if the
engine lacks it (scripts/build-base-image, a few minutes, once per machine) and the
instances (scripts/build-local-swebench: images kept when unchanged) into a session dir.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import msgspec
import pytest

from arenad.containers.docker import engine_problem
from events.specs import InstanceSpec

REPO = Path(__file__).resolve().parents[1]


class LocalSwebench(msgspec.Struct, frozen=True, kw_only=True):
    parquet: Path
    rows: dict[str, dict[str, Any]]

    def instance(self, iid: str) -> InstanceSpec:
        row = dict(self.rows[iid])
        extra = {
            k: v
            for k, v in row.items()
            if k not in ("instance_id", "repo", "base_commit", "problem_statement")
        }
        return InstanceSpec(
            instance_id=iid,
            repo=row["repo"],
            base_commit=row["base_commit"],
            problem_statement=row["problem_statement"],
            verify_cmd="true",
            extra=extra,
        )


def engine_or_skip() -> None:
    problem = engine_problem()
    if problem is not None:
        pytest.skip(f"no container engine: {problem}")


@pytest.fixture(scope="session")
def local_swebench(tmp_path_factory: pytest.TempPathFactory) -> LocalSwebench:
    engine_or_skip()
    out = tmp_path_factory.mktemp("local-swebench")
    done = subprocess.run(
        [str(REPO / "scripts" / "build-local-swebench"), "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=1200,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    parquet = out / "data" / "test-00000-of-00001.parquet"
    import pyarrow.parquet as pq

    rows = {r["instance_id"]: r for r in pq.read_table(parquet).to_pylist()}
    assert all(json.loads(r["FAIL_TO_PASS"]) for r in rows.values())
    return LocalSwebench(parquet=parquet, rows=rows)
