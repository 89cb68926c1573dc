"""Hugging Face RL rows in verl's layout (``data_source``, ``prompt``, ``ability``,
``reward_model``, ``extra_info``; verl ``docs/preparation/prepare_data.rst``) plus the
rollout's outcome (``reward``, ``is_truncated``, ``has_error``, ``split``), sharded parquet:
one row per ledger line, in ledger order.

- ``data_source`` is the task's suite; ``prompt`` the task as a chat (the instance's
  problem statement as the user's turn); ``ability`` is ``coding``.
- ``reward_model`` is ``{style: "verdict", ground_truth}``: arenad's reward comes from a
  verify command or a judge, not a rule over an answer, so ``ground_truth`` is the
  verdict the reward came from (its JSON, null when there is none).
- ``reward`` is the ledger's: null when there is no verdict (a gap, a failed or unscored
  attempt), never a 0 standing in for "unknown"; ``has_error`` marks a row whose attempt
  failed or whose transcript is a gap.
- ``extra_info`` holds ``index`` (the row's number), the split, and where the row came
  from (instance, cell, attempt, role, rollout id).
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from arenad.export.hf_common import error_of
from arenad.export.output import ExportDir
from arenad.export.parquet import LINEAGE_TYPE, ShardedParquet
from arenad.export.source import ExportCell, Head
from arenad.js import js_stringify

__all__ = ["SCHEMA", "RlWriter"]

SCHEMA = pa.schema(
    [
        ("data_source", pa.string()),
        ("prompt", pa.list_(pa.struct([("role", pa.string()), ("content", pa.string())]))),
        ("ability", pa.string()),
        ("reward_model", pa.struct([("style", pa.string()), ("ground_truth", pa.string())])),
        (
            "extra_info",
            pa.struct(
                [
                    ("index", pa.int64()),
                    ("split", pa.string()),
                    ("instance_id", pa.string()),
                    ("cell", pa.string()),
                    ("attempt", pa.int64()),
                    ("role", pa.string()),
                    ("rollout_id", pa.string()),
                    ("campaign", pa.string()),
                    ("arm", pa.string()),
                    ("rep", pa.int64()),
                ]
            ),
        ),
        ("reward", pa.float64()),
        ("is_truncated", pa.bool_()),
        ("has_error", pa.bool_()),
        ("split", pa.string()),
        ("lineage", LINEAGE_TYPE),
    ]
)


class RlWriter:
    name = "hf-rl"

    def __init__(self, out: ExportDir, head: Head) -> None:
        self.parquet = ShardedParquet(out, SCHEMA)

    def add(self, cell: ExportCell) -> None:
        spec = cell.spec
        for la in cell.lines:
            line = la.line
            outcome = line["outcome"]
            reward = outcome["reward"]
            reward = (
                float(reward)
                if isinstance(reward, int | float) and not isinstance(reward, bool)
                else None
            )
            verdict = outcome["verdict"]
            split = line["task"]["split"]
            error = error_of(la)
            self.parquet.add(
                {
                    "data_source": line["task"]["suite"],
                    "prompt": [{"role": "user", "content": spec.instance.problem_statement}],
                    "ability": "coding",
                    "reward_model": {
                        "style": "verdict",
                        "ground_truth": js_stringify(verdict) if verdict is not None else None,
                    },
                    "extra_info": {
                        "index": self.parquet.count,
                        "split": split,
                        "instance_id": line["task"]["instance_id"],
                        "cell": cell.cell_id,
                        "attempt": la.attempt,
                        "role": line["role"],
                        "rollout_id": line["rollout_id"],
                        "campaign": spec.campaign,
                        "arm": spec.arm.name,
                        "rep": spec.rep,
                    },
                    "reward": reward,
                    "is_truncated": outcome["is_truncated"],
                    "has_error": error is not None,
                    "split": split,
                    "lineage": la.lineage.as_dict(),
                }
            )

    def finish(self) -> dict[str, Any]:
        files = self.parquet.finish()
        return {"records": self.parquet.count, "files": files}
