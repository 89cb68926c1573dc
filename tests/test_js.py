from __future__ import annotations

import json
import math
import shutil
import subprocess
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from arenad.js import (
    MAX_TIME_MS,
    _js_stringify_python,
    iso_ms,
    js_date_parse,
    js_number,
    js_parse,
    js_round,
    js_slice,
    js_stringify,
    js_stringify_bytes,
    js_stringify_indented,
)

NODE = shutil.which("node")

# ---------------------------------------------------------------- numbers


@pytest.mark.parametrize(
    ("value", "js"),
    [
        (0, "0"),
        (-0.0, "0"),
        (0.0, "0"),
        (1.0, "1"),
        (-3.0, "-3"),
        (1.5, "1.5"),
        (0.1 + 0.2, "0.30000000000000004"),
        (1e20, "100000000000000000000"),
        (1e21, "1e+21"),
        (1.5e21, "1.5e+21"),
        (123456789012345680000.0, "123456789012345680000"),
        (1e-6, "0.000001"),
        (1.5e-6, "0.0000015"),
        (1e-7, "1e-7"),
        (1.25e-7, "1.25e-7"),
        (5e-324, "5e-324"),
        (1.7976931348623157e308, "1.7976931348623157e+308"),
        (2.0**53, "9007199254740992"),
        (100.0, "100"),
        (0.00321, "0.00321"),
        (float("nan"), "null"),
        (float("inf"), "null"),
        (float("-inf"), "null"),
        (2**53, "9007199254740992"),
        (2**53 + 1, "9007199254740992"),  # a JS number cannot hold it
        (2**64, "18446744073709552000"),
        (10**22, "1e+22"),
        (-(10**400), "null"),
    ],
)
def test_js_number(value: float, js: str) -> None:
    assert js_number(value) == js


def test_bools_are_not_numbers() -> None:
    with pytest.raises(TypeError):
        js_number(True)
    assert js_stringify([True, False, None, 1]) == "[true,false,null,1]"


# ---------------------------------------------------------------- strings and objects


@pytest.mark.parametrize(
    ("value", "js"),
    [
        ("plain", '"plain"'),
        ('q"b\\', '"q\\"b\\\\"'),
        ("\b\f\n\r\t", '"\\b\\f\\n\\r\\t"'),
        ("\x00\x1f\x7f", '"\\u0000\\u001f\x7f"'),
        ("a/b", '"a/b"'),
        ("é€😀", '"é€😀"'),
        ("\u2028\u2029", '"\u2028\u2029"'),
        ("lone \ud800 and \udfff", '"lone \\ud800 and \\udfff"'),
        ("pair \ud83d\ude00", '"pair 😀"'),
    ],
)
def test_strings(value: str, js: str) -> None:
    assert js_stringify(value) == js


def test_compact_insertion_order() -> None:
    value = {"z": 1, "a": [1.0, {"y": None, "b": "x"}], "m": {}}
    assert js_stringify(value) == '{"z":1,"a":[1,{"y":null,"b":"x"}],"m":{}}'
    assert js_stringify((1, 2)) == "[1,2]"


def test_raw_json_text_is_written_as_it_is_on_both_paths() -> None:
    # An encoded transcript (arenad.chat) inside a line: copied, never re-encoded.
    raw = msgspec.Raw(b'[{"role":"user","content":"hi"}]')
    assert js_stringify({"m": raw, "n": 1.5}) == '{"m":[{"role":"user","content":"hi"}],"n":1.5}'
    # A lone surrogate elsewhere sends the line to the Python writer: the same bytes.
    line = {"m": raw, "x": "\ud800", "k": 1.0}
    assert js_stringify(line) == _js_stringify_python(line)
    assert js_stringify(line) == '{"m":[{"role":"user","content":"hi"}],"x":"\\ud800","k":1}'


def test_array_index_keys_come_first_like_every_js_object() -> None:
    value = {"b": 1, "10": 2, "2": 3, "01": 4, "4294967295": 5, "4294967294": 6, "-1": 7}
    assert js_stringify(value) == (
        '{"2":3,"10":2,"4294967294":6,"b":1,"01":4,"4294967295":5,"-1":7}'
    )


def test_non_json_values_are_refused() -> None:
    with pytest.raises(TypeError):
        js_stringify({1: "int key"})
    with pytest.raises(TypeError):
        js_stringify({"a": {1, 2}})


def test_js_parse_refuses_what_json_parse_refuses() -> None:
    assert js_parse('{"a":[1,2.5,"x",null,true]}') == {"a": [1, 2.5, "x", None, True]}
    for bad in ["NaN", "[Infinity]", "{'a':1}", "", "[1,]", '"\x01"']:
        with pytest.raises(ValueError):
            js_parse(bad)
    with pytest.raises(ValueError):
        js_parse("[" * 100_000 + "]" * 100_000)


def test_js_parse_reads_what_msgspec_refuses_as_json_parse_does() -> None:
    # msgspec refuses these; JSON.parse reads a number past the double range as
    # Infinity (written back as null) and keeps a lone surrogate escape.
    assert js_parse('{"n":1e400,"m":-1e400}') == {"n": math.inf, "m": -math.inf}
    assert js_stringify(js_parse('{"n":1e400}')) == '{"n":null}'
    assert js_parse('"\\ud800"') == "\ud800"
    assert js_parse('{"a":1,"a":2}') == {"a": 2}  # the last duplicate wins, in place


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**53), max_value=2**53)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda children: (
        st.lists(children, max_size=5) | st.dictionaries(st.text(max_size=8), children, max_size=5)
    ),
    max_leaves=30,
)


@settings(max_examples=400)
@given(json_values)
def test_serialize_round_trips(value: Any) -> None:
    text = js_stringify(value)
    # Read back as JS would: a number is a double, so big integers come back as floats.
    assert json.loads(text, parse_int=_js_int) == value
    assert text.encode("utf-8")  # always encodable, even with lone surrogates
    assert text == js_stringify(js_parse(text))


# Every float msgspec could be handed: each range where its notation or JS's changes.
any_float = st.floats() | st.sampled_from(
    [0.0, -0.0, 1.0, 1e-5, 9.99e-6, 1e-6, 1e-7, 1e15, 9.99e14, 1e16, 1e21, 2.0**53, 0.5]
)
unusual = (
    any_float
    | st.integers()
    | st.tuples(st.integers(), st.text())
    | st.dictionaries(st.sampled_from(["0", "1", "10", "01", "-1", "a", "9z"]), st.integers())
)


@settings(max_examples=1000)
@given(
    st.recursive(
        json_values | unusual,
        lambda children: (
            st.lists(children, max_size=4)
            | st.dictionaries(st.text(max_size=4), children, max_size=4)
        ),
        max_leaves=20,
    )
)
def test_the_msgspec_path_writes_what_the_python_writer_writes(value: Any) -> None:
    # js_stringify hands msgspec what it writes as JS does and patches the rest; the
    # node-by-node writer (itself checked against node above) is the reference.
    assert js_stringify(value) == _js_stringify_python(value)
    assert js_stringify_bytes(value) == _js_stringify_python(value).encode()


def _js_int(digits: str) -> int | float:
    n = int(digits)
    return n if abs(n) <= 2**53 else float(n)


@settings(max_examples=400)
@given(st.floats(allow_nan=False, allow_infinity=False))
def test_integral_floats_never_print_a_fraction(x: float) -> None:
    text = js_number(x)
    if x.is_integer() and abs(x) < 1e21:
        assert "." not in text and "e" not in text
    assert float(text) == x


@pytest.mark.skipif(NODE is None, reason="node is not installed")
@settings(max_examples=25, deadline=None)
@given(st.lists(json_values | st.floats(allow_nan=True, allow_infinity=True), max_size=40))
def test_bytes_equal_node_json_stringify(values: list[Any]) -> None:
    # Ship each value to node in a lossless form (JSON text of a JS-parseable
    # encoding), let JS stringify it, and compare the bytes.
    def encode(v: Any) -> Any:
        if isinstance(v, float):
            if math.isnan(v):
                return {"$f": "NaN"}
            if math.isinf(v):
                return {"$f": "Infinity" if v > 0 else "-Infinity"}
            return {"$f": repr(v)}
        if isinstance(v, str):
            return {"$s": list(v.encode("utf-16-le", "surrogatepass"))}
        if isinstance(v, list):
            return [encode(x) for x in v]
        if isinstance(v, dict):
            return {"$o": [[encode(k), encode(x)] for k, x in v.items()]}
        return v

    script = """
    const dec = (v) => {
      if (Array.isArray(v)) return v.map(dec);
      if (v && typeof v === 'object') {
        if ('$f' in v) return Number(v.$f);
        if ('$s' in v) { const b = v.$s; const u = [];
          for (let i = 0; i < b.length; i += 2) u.push(b[i] | (b[i + 1] << 8));
          return String.fromCharCode(...u); }
        const o = {}; for (const [k, x] of v.$o) o[dec(k)] = dec(x); return o;
      }
      return v;
    };
    const vals = JSON.parse(require('fs').readFileSync(0, 'utf8')).map(dec);
    process.stdout.write(JSON.stringify(vals.map((v) => JSON.stringify(v))));
    """
    assert NODE is not None
    out = subprocess.run(
        [NODE, "-e", script],
        input=json.dumps([encode(v) for v in values]),
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout
    expected = json.loads(out)
    assert [js_stringify(v) for v in values] == expected


def test_indented_as_json_stringify_with_a_gap() -> None:
    value = {"a": [], "b": {}, "c": [1, {"d": 8.0}], "10": "x"}
    assert js_stringify_indented(value, 1) == (
        '{\n "10": "x",\n "a": [],\n "b": {},\n "c": [\n  1,\n  {\n   "d": 8\n  }\n ]\n}'
    )
    with pytest.raises(ValueError):
        js_stringify_indented(value, 0)


@pytest.mark.skipif(NODE is None, reason="node is not installed")
def test_indented_bytes_equal_node() -> None:
    values = [{"maxUsd": 8.0, "task": "é\n", "l": [[], {}, [1.5e-7]], "n": None}, [], {}, 3.0]
    script = (
        "const v = JSON.parse(require('fs').readFileSync(0, 'utf8'));"
        "process.stdout.write(JSON.stringify(v.map((x) => JSON.stringify(x, null, 1))));"
    )
    assert NODE is not None
    out = subprocess.run(
        [NODE, "-e", script], input=json.dumps(values), capture_output=True, text=True, check=True
    ).stdout
    assert [js_stringify_indented(v, 1) for v in values] == json.loads(out)


# ---------------------------------------------------------------- Math.round


@pytest.mark.parametrize(
    ("x", "rounded"),
    [
        (0.5, 1),
        (1.5, 2),
        (2.5, 3),
        (-0.5, 0),
        (-1.5, -1),
        (-2.5, -2),
        (-2.6, -3),
        (0.49999999999999994, 0),
        (4.4, 4),
        (4503599627370495.5, 4503599627370496),
        (7, 7),
    ],
)
def test_js_round(x: float, rounded: int) -> None:
    assert js_round(x) == rounded


def test_js_round_refuses_non_finite() -> None:
    with pytest.raises(ValueError):
        js_round(float("nan"))


# ---------------------------------------------------------------- dates


@pytest.mark.parametrize(
    ("ms", "iso"),
    [
        (0, "1970-01-01T00:00:00.000Z"),
        (1787393472123, "2026-08-22T10:11:12.123Z"),
        (-1, "1969-12-31T23:59:59.999Z"),
        (951782400000, "2000-02-29T00:00:00.000Z"),
        (253402300799999, "9999-12-31T23:59:59.999Z"),
        (253402300800000, "+010000-01-01T00:00:00.000Z"),
        (-62167219200000, "0000-01-01T00:00:00.000Z"),
        (-62167219200001, "-000001-12-31T23:59:59.999Z"),
        (MAX_TIME_MS, "+275760-09-13T00:00:00.000Z"),
        (-MAX_TIME_MS, "-271821-04-20T00:00:00.000Z"),
        (1.9, "1970-01-01T00:00:00.001Z"),
        (-1.9, "1969-12-31T23:59:59.999Z"),
    ],
)
def test_iso_ms(ms: int, iso: str) -> None:
    assert iso_ms(ms) == iso
    assert js_date_parse(iso) == int(ms)


@pytest.mark.parametrize("bad", [MAX_TIME_MS + 1, float("nan"), float("inf")])
def test_iso_ms_range(bad: float) -> None:
    with pytest.raises(ValueError):
        iso_ms(bad)


@pytest.mark.parametrize(
    ("text", "ms"),
    [
        ("2026-08-22T10:11:12.123Z", 1787393472123),
        ("2026-08-22T10:11:12Z", 1787393472000),
        ("2026-08-22T10:11Z", 1787393460000),
        ("2026-08-22", 1787356800000),
        ("2026-08", 1785542400000),
        ("2026", 1767225600000),
        ("2026-08-22Z", 1787356800000),
        ("+002026-08-22T00:00:00Z", 1787356800000),
        ("-000001-01-01T00:00:00Z", -62198755200000),
        ("2026-08-22T10:11:12.1Z", 1787393472100),
        ("2026-08-22T10:11:12.123456Z", 1787393472123),
        ("2026-08-22t10:11:12z", 1787393472000),
        ("2026-08-22 10:11:12Z", 1787393472000),
        ("2026-08-22T10:11:12+01:00", 1787389872000),
        ("2026-08-22T10:11:12+0100", 1787389872000),
        ("2026-08-22T10:11:12", 1787393472000),  # local time in JS; UTC here
        ("2026-02-31", 1772496000000),  # V8 rolls over
        ("2026-08-22T24:00:00Z", 1787443200000),
        ("+275760-09-13T00:00:00.000Z", 8640000000000000),
        ("2026-08-22T10:11:12.123-00:00", 1787393472123),
        ("2026-08-22T10:11:12.123+23:59", 1787307132123),
    ],
)
def test_date_parse_accepts(text: str, ms: int) -> None:
    assert js_date_parse(text) == ms


@pytest.mark.parametrize(
    "text",
    [
        "",
        "x",
        "-000000-01-01T00:00:00Z",
        "2026-13-01",
        "2026-00-01",
        "2026-01-00",
        "2026-01-32",
        "2026-08-22T24:00:01Z",
        "2026-08-22T23:60:00Z",
        "2026-08-22T23:59:60Z",
        "2026-08-22T",
        "2026-08-22T10",
        "2026-08-22T10:11:12.Z",
        "+275760-09-13T00:00:00.001Z",
        "-271821-04-19T23:59:59.999Z",
        "2026-08-22T10:11:12.123+24:00",
        "2026-08-22T10:11:12.123Z ",
        "2026-08-22+01:00",
        "2026-08-22T10:11:12,123Z",
        "20260822",
        "２０２６-08-22",
    ],
)
def test_date_parse_rejects(text: str) -> None:
    assert js_date_parse(text) is None


@pytest.mark.skipif(NODE is None, reason="node is not installed")
def test_date_parse_agrees_with_node_on_iso_strings() -> None:
    samples = [
        "2026-08-22T10:11:12.123Z",
        "2026-08-22",
        "2026-02-30T00:00:00Z",
        "2026-08-22T24:00Z",
        "2026-08-22T00:00:00.000+00:60",
        "2026-08-22T1:11:12Z",
        "+010000-01-01T00:00:00.000Z",
        "-271821-04-19T23:00:00.000-01:00",
        "2026-08-22T10:11+01:00",
        "0000-01-01T00:00:00Z",
    ] + [iso_ms(ms) for ms in range(-MAX_TIME_MS, MAX_TIME_MS, MAX_TIME_MS // 37)]
    script = (
        "const a = JSON.parse(require('fs').readFileSync(0, 'utf8'));"
        "process.stdout.write(JSON.stringify(a.map((s) => {"
        "const v = Date.parse(s); return Number.isNaN(v) ? null : v; })))"
    )
    assert NODE is not None
    out = subprocess.run(
        [NODE, "-e", script],
        input=json.dumps(samples),
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
        env={"TZ": "UTC", "PATH": "/usr/bin:/bin"},
    ).stdout
    assert [js_date_parse(s) for s in samples] == json.loads(out)


def test_js_slice_counts_utf16_code_units() -> None:
    assert js_slice("abc", 100) == "abc"
    assert js_slice("é" * 150, 100) == "é" * 100  # BMP: one unit each
    assert js_slice("😀" * 60, 100) == "😀" * 50  # astral: two units each
    # A cut through a surrogate pair keeps the high half, as "a".repeat(99) + "😀" does.
    assert js_slice("a" * 99 + "😀", 100) == "a" * 99 + "\ud83d"
    assert js_stringify([js_slice("a" * 99 + "😀", 100)]) == '["' + "a" * 99 + '\\ud83d"]'
    assert js_slice("abc", 0) == ""
