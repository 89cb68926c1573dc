"""Hugging Face SFT rows (``messages``, ``tools``), sharded parquet: one row per ledger
line, in ledger order.

Every line is a row, so the dataset's counts are the ledger's; a line whose transcript
is a gap (no messages) is an errored row (``has_error``, ``error`` names the gap) with
no messages, never a made-up conversation. ``reward`` is the ledger's (null: no verdict,
never 0). The training filter (completed, not truncated, no error, reward > 0, split
``search``) is left to the reader: every column it needs is here.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from arenad.export.hf_common import MESSAGE_TYPE, TOOL_TYPE, error_of, message_rows, tools_of
from arenad.export.output import ExportDir
from arenad.export.parquet import LINEAGE_TYPE, ShardedParquet
from arenad.export.source import ExportCell, Head

__all__ = ["SCHEMA", "SftWriter"]

SCHEMA = pa.schema(
    [
        ("messages", pa.list_(MESSAGE_TYPE)),
        ("tools", pa.list_(TOOL_TYPE)),
        ("rollout_id", pa.string()),
        ("parent_rollout_id", pa.string()),
        ("role", pa.string()),
        ("suite", pa.string()),
        ("instance_id", pa.string()),
        ("split", pa.string()),
        ("campaign", pa.string()),
        ("arm", pa.string()),
        ("rep", pa.int64()),
        ("model", pa.string()),
        ("reward", pa.float64()),
        ("reward_source", pa.string()),
        ("is_completed", pa.bool_()),
        ("is_truncated", pa.bool_()),
        ("has_error", pa.bool_()),
        ("error", pa.string()),
        ("lineage", LINEAGE_TYPE),
    ]
)


def _reward(v: Any) -> float | None:
    return float(v) if isinstance(v, int | float) and not isinstance(v, bool) else None


class SftWriter:
    name = "hf-sft"

    def __init__(self, out: ExportDir, head: Head) -> None:
        self.parquet = ShardedParquet(out, SCHEMA)

    def add(self, cell: ExportCell) -> None:
        spec = cell.spec
        for la in cell.lines:
            line = la.line
            outcome = line["outcome"]
            messages = message_rows(la)
            error = error_of(la)
            self.parquet.add(
                {
                    "messages": messages,
                    "tools": tools_of(messages),
                    "rollout_id": line["rollout_id"],
                    "parent_rollout_id": line["parent_rollout_id"],
                    "role": line["role"],
                    "suite": line["task"]["suite"],
                    "instance_id": line["task"]["instance_id"],
                    "split": line["task"]["split"],
                    "campaign": spec.campaign,
                    "arm": spec.arm.name,
                    "rep": spec.rep,
                    "model": line["policy"]["model"],
                    "reward": _reward(outcome["reward"]),
                    "reward_source": outcome["reward_source"],
                    "is_completed": outcome["is_completed"],
                    "is_truncated": outcome["is_truncated"],
                    "has_error": error is not None or not messages,
                    "error": error,
                    "lineage": la.lineage.as_dict(),
                }
            )

    def finish(self) -> dict[str, Any]:
        files = self.parquet.finish()
        return {"records": self.parquet.count, "files": files}
