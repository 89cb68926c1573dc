"""Instance files as benchmarks distribute them: rows, one at a time, each with where it is.

``.jsonl`` (one JSON object per line), ``.json`` (an array of objects, or JSON lines under
a .json name, as ``datasets.to_json`` writes them) and ``.parquet`` (pyarrow, a batch of
rows at a time, so a large file never sits in memory whole). Every row comes with the
place an error about it should name: ``FILE:LINE`` for JSON lines, ``FILE: row N`` for an
array or a parquet file. Anything unreadable (not UTF-8, not JSON, not parquet, not an
object) raises :class:`~arenad.errors.CampaignError` naming the file and the line or row.

Parquet values are made JSON-like (what a .jsonl of the same rows would give): dates and
times become ISO strings, decimals strings, NaN null; pandas' index columns
(``__index_level_N__``) are not part of a row.

Datasets as the Hugging Face tools keep them, read the same way:

- **a directory written by ``datasets.Dataset.save_to_disk``** (``state.json`` naming its
  ``.arrow`` shards, Arrow IPC streams): the shards in the order ``state.json`` gives. A
  ``DatasetDict``'s directory (``dataset_dict.json``) holds one per split: name the split's
  directory (``DIR/test``), the error lists them;
- **the hub's parquet shards**: a glob (``data/test-*.parquet``), or a directory whose
  ``.parquet`` files are all one split's shards, read in name order (shards of several
  splits in one directory are refused: a glob says which).
"""

from __future__ import annotations

import datetime as dt
import decimal
import glob
import json
import math
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec

from arenad.errors import CampaignError

Row = tuple[dict[str, Any], str]
"""A row and where it is (for error messages)."""

SUFFIXES = (".jsonl", ".ndjson", ".json", ".parquet")
# Rows per parquet batch: big enough that pyarrow's per-batch cost is noise, small enough
# that a batch of SWE-bench rows (patches, test patches) stays a few MiB.
PARQUET_BATCH_ROWS = 256


_decode = msgspec.json.Decoder().decode


def _reject_constant(name: str) -> Any:
    # JSON has no NaN or Infinity (Python's json accepts them; a stored spec could not).
    raise ValueError(f"{name} is not JSON")


def _utf8(data: bytes, where: str, *, first_line: int = 1) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = first_line + data.count(b"\n", 0, exc.start)
        raise CampaignError(
            f"{where}:{line}: not UTF-8 (byte 0x{data[exc.start]:02x}: {exc.reason})"
        ) from None


def _fast_object(raw: bytes) -> dict[str, Any] | None:
    """A row parsed by msgspec (several times faster than the standard parser), or None
    when it is not plainly a JSON object: the standard path then gives the same row or
    the same error as before (msgspec refuses what it accepts too: NaN, integers past 64
    bits, lone surrogates, invalid UTF-8)."""
    try:
        row = _decode(raw)
    except msgspec.DecodeError:
        return None
    return row if isinstance(row, dict) else None


def _object(text: str, where: str) -> dict[str, Any]:
    try:
        row = json.loads(text, parse_constant=_reject_constant)
    except json.JSONDecodeError as exc:
        raise CampaignError(f"{where}: not a JSON row ({exc.msg}, column {exc.colno})") from None
    except (ValueError, RecursionError) as exc:
        raise CampaignError(f"{where}: not a JSON row ({exc})") from None
    if not isinstance(row, dict):
        raise CampaignError(f"{where}: a row must be a JSON object, not {_kind(row)}")
    return row


def _kind(value: object) -> str:
    return {list: "an array", str: "a string", bool: "a boolean", type(None): "null"}.get(
        type(value), "a number"
    )


def _jsonl(path: Path) -> Iterator[Row]:
    try:
        f = path.open("rb")
    except OSError as exc:
        raise CampaignError(f"cannot read instances_file {path}: {exc.strerror}") from None
    with f:
        for n, raw in enumerate(f, 1):
            row = _fast_object(raw)
            if row is not None:
                yield row, f"{path}:{n}"
                continue
            text = _utf8(raw, str(path), first_line=n)
            if not text.strip():
                continue
            yield _object(text, f"{path}:{n}"), f"{path}:{n}"


def _json(path: Path) -> Iterator[Row]:
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise CampaignError(f"cannot read instances_file {path}: {exc.strerror}") from None
    text = _utf8(data, str(path))
    if text.lstrip().startswith("{"):
        # JSON lines under a .json name (what ``datasets.Dataset.to_json`` writes).
        del text, data
        yield from _jsonl(path)
        return
    try:
        rows = _decode(data)
    except msgspec.DecodeError:
        rows = None  # the standard parser's error (or its reading) follows
    try:
        if rows is None:
            rows = json.loads(text, parse_constant=_reject_constant)
    except json.JSONDecodeError as exc:
        raise CampaignError(
            f"{path}:{exc.lineno}: not JSON ({exc.msg}, column {exc.colno})"
        ) from None
    except (ValueError, RecursionError) as exc:
        raise CampaignError(f"{path}: not JSON ({exc})") from None
    del text, data
    if not isinstance(rows, list):
        raise CampaignError(
            f"{path}: a .json instances file holds an array of rows (as the Hugging Face hub"
            f" exports them), not {_kind(rows)}"
        )
    for n, row in enumerate(rows, 1):
        if not isinstance(row, dict):
            raise CampaignError(f"{path}: row {n}: a row must be a JSON object, not {_kind(row)}")
        yield row, f"{path}: row {n}"


def _plain(value: Any, where: str, key: str) -> Any:
    """A parquet value as the JSON of the same row would hold it."""
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): _plain(v, where, key) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v, where, key) for v in value]
    if isinstance(value, dt.datetime | dt.date | dt.time):
        return value.isoformat()
    if isinstance(value, decimal.Decimal):
        return str(value)
    if isinstance(value, bytes):
        try:
            return value.decode("utf-8")
        except UnicodeDecodeError:
            raise CampaignError(f"{where}: field {key!r} is binary, not text") from None
    if isinstance(value, dt.timedelta):
        return value.total_seconds()
    raise CampaignError(f"{where}: field {key!r} has a {type(value).__name__} value")


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _parquet(path: Path) -> Iterator[Row]:
    import pyarrow as pa  # a heavy import, only when a parquet file is read
    import pyarrow.parquet as pq

    try:
        parquet = pq.ParquetFile(path)
    except OSError as exc:
        reason = exc.strerror or _first_line(exc)
        raise CampaignError(f"{path}: not a readable parquet file ({reason})") from None
    except pa.ArrowException as exc:
        raise CampaignError(f"{path}: not a readable parquet file ({_first_line(exc)})") from None
    n = 0
    with parquet:
        batches = parquet.iter_batches(batch_size=PARQUET_BATCH_ROWS)
        while True:
            try:
                batch = next(batches)
            except StopIteration:
                return
            except (pa.ArrowException, OSError) as exc:
                raise CampaignError(
                    f"{path}: row {n + 1}: cannot be read ({_first_line(exc)})"
                ) from None
            yield from _batches_rows(path, iter([batch]), n)
            n += batch.num_rows


def _batches_rows(path: Path, batches: Iterator[Any], start: int = 0) -> Iterator[Row]:
    """The rows of record batches (pyarrow), as JSON-like dicts, numbered from ``start``."""
    n = start
    for batch in batches:
        for raw in batch.to_pylist():
            n += 1
            where = f"{path}: row {n}"
            yield (
                {
                    str(k): _plain(v, where, str(k))
                    for k, v in raw.items()
                    if not str(k).startswith("__index_level_")
                },
                where,
            )


def _arrow_stream(path: Path) -> Iterator[Row]:
    """One ``.arrow`` shard of a saved dataset (an Arrow IPC stream), a batch at a time."""
    import pyarrow as pa  # a heavy import, only when a dataset is read

    try:
        source = pa.memory_map(str(path))
        reader = pa.ipc.open_stream(source)
    except (OSError, pa.ArrowException) as exc:
        raise CampaignError(f"{path}: not a readable Arrow shard ({_first_line(exc)})") from None
    with source:
        try:
            yield from _batches_rows(path, iter(reader))
        except (OSError, pa.ArrowException) as exc:
            raise CampaignError(f"{path}: cannot be read ({_first_line(exc)})") from None


def _saved_dataset(path: Path, where: str) -> Iterator[Row]:
    """A ``save_to_disk`` directory: its shards in ``state.json``'s order."""
    state_file = path / "state.json"
    try:
        state = json.loads(state_file.read_bytes())
        names = [str(f["filename"]) for f in state["_data_files"]]
    except OSError as exc:
        raise CampaignError(f"cannot read {state_file}: {exc.strerror}") from None
    except (ValueError, KeyError, TypeError):
        raise CampaignError(
            f"{state_file}: not a saved dataset's state (no _data_files list)"
        ) from None
    for name in names:
        shard = path / name
        if Path(name).is_absolute() or ".." in Path(name).parts or not shard.is_file():
            raise CampaignError(f"{state_file}: shard {name!r} is not a file in {path}")
        yield from _arrow_stream(shard)


_SHARD = re.compile(r"^(?P<split>.+?)-\d+-of-\d+\.parquet$")


def _parquet_shards(files: list[Path], where: str, what: str) -> Iterator[Row]:
    if not files:
        raise CampaignError(f"{where}: instances_file {what} matches no parquet file")
    bad = [f.name for f in files if f.suffix.lower() != ".parquet"]
    if bad:
        raise CampaignError(f"{where}: instances_file {what}: {bad[0]} is not a .parquet file")
    for f in files:
        yield from _parquet(f)


def _directory(path: Path, where: str) -> Iterator[Row]:
    if (path / "dataset_dict.json").is_file():
        splits = sorted(p.name for p in path.iterdir() if (p / "state.json").is_file())
        raise CampaignError(
            f"{where}: instances_file {path} is a dataset with splits {', '.join(splits)}:"
            f' name one, e.g. instances_file = "{path.name}/{splits[0] if splits else "test"}"'
        )
    if (path / "state.json").is_file():
        return _saved_dataset(path, where)
    shards = sorted(p for p in path.iterdir() if p.suffix.lower() == ".parquet")
    names = sorted({m.group("split") for p in shards if (m := _SHARD.match(p.name))})
    if len(names) > 1:
        raise CampaignError(
            f"{where}: instances_file {path} holds the shards of several splits"
            f" ({', '.join(names)}): name one with a glob, e.g."
            f' "{path.name}/{names[0]}-*.parquet"'
        )
    return _parquet_shards(shards, where, str(path))


def read_rows(path: Path, where: str) -> Iterator[Row]:
    """The rows of an instances file, by its suffix, a dataset directory, or a glob of
    parquet shards (``where`` names the key that gave it)."""
    if glob.has_magic(str(path)):
        files = sorted(Path(p) for p in glob.glob(str(path)))
        return _parquet_shards(files, where, repr(str(path)))
    if path.is_dir():
        return _directory(path, where)
    suffix = path.suffix.lower()
    if suffix in (".jsonl", ".ndjson"):
        return _jsonl(path)
    if suffix == ".json":
        return _json(path)
    if suffix == ".parquet":
        return _parquet(path)
    raise CampaignError(f"{where}: instances_file {path.name!r} must end in {', '.join(SUFFIXES)}")
