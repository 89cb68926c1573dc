"""Rows to sharded parquet files, as the Hugging Face hub keeps a dataset:
``data/train-00000-of-00003.parquet`` ... (``datasets.load_dataset("parquet", ...)``).

Rows are buffered a row group at a time and shards are cut every ``SHARD_ROWS`` rows:
memory holds one row group whatever the export's size, and the cuts depend on the rows
alone, so the same rows give the same files (pyarrow writes no time into them). The
shards get their ``-of-N`` names once N is known, at the end.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from arenad.export.output import ExportDir

__all__ = ["LINEAGE_TYPE", "ShardedParquet"]

ROW_GROUP_ROWS = 256
SHARD_ROWS = 20_000

LINEAGE_TYPE = pa.struct(
    [
        ("cell", pa.string()),
        ("attempt", pa.int64()),
        ("first_seq", pa.int64()),
        ("last_seq", pa.int64()),
        ("head_seq", pa.int64()),
        ("head_hash", pa.string()),
        ("rollout_id", pa.string()),
    ]
)


class ShardedParquet:
    def __init__(self, out: ExportDir, schema: pa.Schema, split: str = "train") -> None:
        self.out = out
        self.schema = schema
        self.split = split
        self.rows: list[dict[str, Any]] = []
        self.shards: list[Path] = []
        self.writer: pq.ParquetWriter | None = None
        self.in_shard = 0
        self.count = 0

    def add(self, row: dict[str, Any]) -> None:
        self.rows.append(row)
        self.count += 1
        if len(self.rows) >= ROW_GROUP_ROWS:
            self._flush()

    def _flush(self) -> None:
        if not self.rows:
            return
        if self.writer is None:
            path = self.out.path(f"data/{self.split}-{len(self.shards):05d}.parquet")
            self.shards.append(path)
            self.writer = pq.ParquetWriter(path, self.schema, compression="zstd")
        self.writer.write_table(pa.Table.from_pylist(self.rows, schema=self.schema))
        self.in_shard += len(self.rows)
        self.rows = []
        if self.in_shard >= SHARD_ROWS:
            self.writer.close()
            self.writer = None
            self.in_shard = 0

    def finish(self) -> list[str]:
        """Close the last shard; the shards' final names (relative to the export)."""
        self._flush()
        if self.writer is not None:
            self.writer.close()
        if not self.shards:
            # No row: one empty shard, so a reader still finds the dataset's columns.
            path = self.out.path(f"data/{self.split}-00000.parquet")
            pq.write_table(self.schema.empty_table(), path, compression="zstd")
            self.shards.append(path)
        names = []
        total = len(self.shards)
        for i, path in enumerate(self.shards):
            name = f"data/{self.split}-{i:05d}-of-{total:05d}.parquet"
            os.replace(path, self.out.root / name)
            names.append(name)
        return names
