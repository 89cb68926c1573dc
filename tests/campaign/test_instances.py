"""Instance files as benchmarks distribute them: JSON lines, a JSON array, parquet; every
unreadable one is one error naming the file and the line or row."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from arenad.campaign.instances import read_rows
from arenad.errors import CampaignError

ROWS: list[dict[str, Any]] = [
    {
        "instance_id": f"org__repo-{n}",
        "repo": "org/repo",
        "base_commit": f"{n:040x}",
        "problem_statement": f"Bug {n}: ünïcode and \u2028 separators survive",
        "FAIL_TO_PASS": json.dumps([f"tests/test_{n}.py::test_it"]),
        "version": "1.0",
        "difficulty": None,
    }
    for n in range(5)
]


def write_jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
    return path


def write_json(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text(json.dumps(rows, indent=2, ensure_ascii=False))
    return path


def write_parquet(path: Path, rows: list[dict[str, Any]], row_group_size: int = 2) -> Path:
    pq.write_table(pa.Table.from_pylist(rows), path, row_group_size=row_group_size)
    return path


def rows_of(path: Path) -> list[tuple[dict[str, Any], str]]:
    return list(read_rows(path, "campaign.toml"))


def test_the_three_forms_give_the_same_rows(tmp_path: Path) -> None:
    jsonl = rows_of(write_jsonl(tmp_path / "i.jsonl", ROWS))
    array = rows_of(write_json(tmp_path / "i.json", ROWS))
    parquet = rows_of(write_parquet(tmp_path / "i.parquet", ROWS))
    assert [r for r, _ in jsonl] == [r for r, _ in array] == [r for r, _ in parquet] == ROWS
    assert jsonl[2][1] == f"{tmp_path / 'i.jsonl'}:3"
    assert array[2][1] == f"{tmp_path / 'i.json'}: row 3"
    assert parquet[2][1] == f"{tmp_path / 'i.parquet'}: row 3"


def test_json_lines_under_a_json_name_are_read_as_lines(tmp_path: Path) -> None:
    # datasets.Dataset.to_json writes JSON lines, whatever the file is called.
    path = write_jsonl(tmp_path / "export.json", ROWS)
    assert [r for r, _ in rows_of(path)] == ROWS


def test_parquet_is_read_a_batch_at_a_time(tmp_path: Path) -> None:
    path = write_parquet(tmp_path / "i.parquet", ROWS)
    rows = read_rows(path, "c.toml")
    first, _ = next(rows)  # one row read: the file is not decoded whole
    assert first == ROWS[0]
    assert len(list(rows)) == len(ROWS) - 1


def test_parquet_values_become_what_json_would_hold(tmp_path: Path) -> None:
    import datetime as dt

    table = pa.table(
        {
            "instance_id": ["a"],
            "created_at": pa.array([dt.datetime(2024, 1, 2, 3, 4, 5)], pa.timestamp("us")),
            "score": [float("nan")],
            "tags": [["x", "y"]],
            "__index_level_0__": [7],
        }
    )
    pq.write_table(table, tmp_path / "t.parquet")
    [(row, _)] = rows_of(tmp_path / "t.parquet")
    assert row == {
        "instance_id": "a",
        "created_at": "2024-01-02T03:04:05",
        "score": None,
        "tags": ["x", "y"],
    }


# Rows msgspec parses and rows it leaves to the standard parser (a number past 64 bits
# parses in both; 1e999, a lone surrogate, a BOM-less NBSP-only line only in the latter).
TRICKY = [
    '{"instance_id": "a", "n": 123456789012345678901234567890, "f": -0.0, "x": [1.5, null]}',
    '{"instance_id": "b", "s": "\\u00e9\\ud83d\\ude00 caf\u00e9", "d": 1, "d": 2}',
    '{"instance_id": "c", "big": 1e999, "lone": "\\ud800"}',
    "\u00a0",
    '  {"instance_id": "d", "nested": {"k": [true, false, {}]}}  ',
]


def test_rows_are_what_the_standard_parser_reads(tmp_path: Path) -> None:
    expected = [json.loads(t) for t in TRICKY if t.strip()]
    lines = tmp_path / "rows.jsonl"
    lines.write_text("\n".join(TRICKY) + "\n", encoding="utf-8")
    array = tmp_path / "rows.json"
    array.write_text("[" + ",".join(t for t in TRICKY if t.strip()) + "]", encoding="utf-8")
    for path in (lines, array):
        got = [row for row, _ in read_rows(path, "c.toml")]
        assert repr(got) == repr(expected)  # repr: -0.0 and inf compared as written
    wheres = [where for _, where in read_rows(lines, "c.toml")]
    assert wheres == [f"{lines}:{n}" for n in (1, 2, 3, 5)]


@pytest.mark.parametrize(
    ("name", "content", "message"),
    [
        # Finding 2 of issue 14: invalid UTF-8 was a 61-line traceback.
        ("bad.jsonl", b'{"a": 1}\n{"instance_id": "\xff\xfe"}\n', "bad.jsonl:2: not UTF-8"),
        ("bad.json", b'[\n{"a": 1},\n{"b": "\xc3"}\n]', "bad.json:3: not UTF-8"),
        ("bad.jsonl", b'{"a": 1}\n{"a": \n', "bad.jsonl:2: not a JSON row"),
        ("bad.jsonl", b'{"a": NaN}\n', "bad.jsonl:1: not a JSON row (NaN is not JSON)"),
        ("bad.jsonl", b"[1, 2]\n", "bad.jsonl:1: a row must be a JSON object, not an array"),
        ("bad.json", b'[{"a": 1},\n {"a": 2,}]', "bad.json:2: not JSON"),
        ("bad.json", b'[{"a": 1}, "x"]', "bad.json: row 2: a row must be a JSON object"),
        ("bad.json", b'"rows"', "holds an array of rows"),
        ("bad.parquet", b"PAR1 this is not parquet", "bad.parquet: not a readable parquet file"),
        ("bad.csv", b"a,b\n", "must end in .jsonl, .ndjson, .json, .parquet"),
    ],
)
def test_unreadable_files_are_one_line_naming_file_and_line(
    tmp_path: Path, name: str, content: bytes, message: str
) -> None:
    path = tmp_path / name
    path.write_bytes(content)
    with pytest.raises(CampaignError) as info:
        rows_of(path)
    text = str(info.value)
    assert message in text
    assert "\n" not in text


def test_a_missing_file_names_it(tmp_path: Path) -> None:
    with pytest.raises(CampaignError, match=r"cannot read instances_file .*nope\.jsonl"):
        rows_of(tmp_path / "nope.jsonl")


# -- datasets as the Hugging Face tools keep them (written by the real `datasets`) --------


def test_a_dataset_saved_to_disk_gives_the_same_rows(tmp_path: Path) -> None:
    datasets = pytest.importorskip("datasets")
    saved = tmp_path / "saved"
    # Two shards, so their order (state.json's) is part of what is checked.
    datasets.Dataset.from_list(ROWS).save_to_disk(str(saved), num_shards=2)
    rows = rows_of(saved)
    assert [r for r, _ in rows] == ROWS
    assert rows[0][1] == f"{saved / 'data-00000-of-00002.arrow'}: row 1"


def test_a_dataset_dict_names_its_splits(tmp_path: Path) -> None:
    datasets = pytest.importorskip("datasets")
    saved = tmp_path / "dict"
    ds = datasets.Dataset.from_list(ROWS)
    datasets.DatasetDict({"test": ds, "dev": ds.select([0])}).save_to_disk(str(saved))
    with pytest.raises(CampaignError, match=r"splits dev, test: name one, e\.g\. instances_file"):
        rows_of(saved)
    assert [r for r, _ in rows_of(saved / "dev")] == ROWS[:1]


def test_the_hubs_parquet_shards_by_directory_or_glob(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    write_parquet(data / "test-00000-of-00002.parquet", ROWS[:3])
    write_parquet(data / "test-00001-of-00002.parquet", ROWS[3:])
    assert [r for r, _ in rows_of(data)] == ROWS
    write_parquet(data / "dev-00000-of-00001.parquet", ROWS[:1])
    with pytest.raises(CampaignError, match=r"several splits \(dev, test\): name one with a glob"):
        rows_of(data)
    assert [r for r, _ in rows_of(data / "test-*.parquet")] == ROWS
    with pytest.raises(CampaignError, match="matches no parquet file"):
        rows_of(data / "train-*.parquet")


def test_a_saved_dataset_whose_state_names_a_shard_outside_is_refused(tmp_path: Path) -> None:
    saved = tmp_path / "saved"
    saved.mkdir()
    (saved / "state.json").write_text(json.dumps({"_data_files": [{"filename": "../x.arrow"}]}))
    with pytest.raises(CampaignError, match="is not a file in"):
        rows_of(saved)
