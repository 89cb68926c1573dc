"""The few JavaScript behaviours the ledger and the run-dir documents (result.json,
params.json) must reproduce byte for byte. Pure: no I/O.

JSON: ``js_stringify`` / ``js_parse``. Numbers: ``js_number`` (``String(x)``),
``js_round`` (``Math.round``). Time: ``iso_ms`` (``toISOString``), ``js_date_parse``
(``Date.parse`` for the ISO family).

 ``js_stringify`` is byte-compatible with ``JSON.stringify(value)`` (no
indentation) for the JSON-able Python values (dict with str keys, list/tuple, str, int,
float, bool, None):

- compact, keys in insertion order, except that keys which are *array indices*
  (canonical decimal integers ``0 .. 2**32-2``) come first in ascending numeric order,
  as in every JS object;
- non-ASCII characters raw, ``/`` not escaped, the short escapes ``\\b \\t \\n \\f \\r``
  and ``\\u00XX`` (lowercase hex) for the other control characters, lone surrogates
  escaped as ``\\udXXX`` (well-formed ``JSON.stringify``, ES2019);
- numbers as ``Number.prototype.toString`` prints them (see ``js_number``): integral
  floats without ``.0``, ``-0`` as ``0``, NaN and ±Infinity as ``null``.

``js_parse`` is ``JSON.parse``: it refuses the ``NaN``/``Infinity`` literals Python's
``json`` accepts, and every error is a ``ValueError``.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from typing import Any

import msgspec

__all__ = [
    "MAX_TIME_MS",
    "PlainJsonList",
    "iso_ms",
    "js_date_parse",
    "js_number",
    "js_parse",
    "js_round",
    "js_slice",
    "js_string",
    "js_stringify",
    "js_stringify_bytes",
    "js_stringify_indented",
]

# Integers beyond this magnitude are not exact in a JS number (a double).
_MAX_SAFE = 2**53
_MAX_ARRAY_INDEX = 2**32 - 2

_ESCAPES = {
    '"': '\\"',
    "\\": "\\\\",
    "\b": "\\b",
    "\f": "\\f",
    "\n": "\\n",
    "\r": "\\r",
    "\t": "\\t",
}
_NEEDS_ESCAPE = re.compile('[\\x00-\\x1f"\\\\\ud800-\udfff]')
_SURROGATE_PAIR = re.compile("[\ud800-\udbff][\udc00-\udfff]")


def _escape(match: re.Match[str]) -> str:
    ch = match.group(0)
    short = _ESCAPES.get(ch)
    return short if short is not None else f"\\u{ord(ch):04x}"


def _join_pair(match: re.Match[str]) -> str:
    # A high+low surrogate pair held as two code points is one character to JS.
    pair = match.group(0)
    hi, lo = pair[0], pair[1]
    return chr(0x10000 + ((ord(hi) - 0xD800) << 10) + (ord(lo) - 0xDC00))


_SURROGATE = re.compile("[\ud800-\udfff]")
# CPython's C string encoder (ensure_ascii=False) escapes exactly what JSON.stringify does
# — '"', '\\', the short escapes, \u00XX lowercase for the other controls — except lone
# surrogates, which it leaves raw: strings with surrogates take the slow path.
_encode_basestring: Any = getattr(json.encoder, "c_encode_basestring", None) or (
    json.encoder.py_encode_basestring
)


def js_string(s: str) -> str:
    """``JSON.stringify(s)`` for a string."""
    if _SURROGATE.search(s) is None:
        return str(_encode_basestring(s))
    s = _SURROGATE_PAIR.sub(_join_pair, s)
    return '"' + _NEEDS_ESCAPE.sub(_escape, s) + '"'


def js_number(x: int | float) -> str:
    """``String(x)`` for a JS number, as ``JSON.stringify`` writes it (non-finite → ``null``).

    Floats use the shortest round-trip digits (Python's ``repr``, the same digits
    ECMAScript's Number::toString picks) laid out by the ECMAScript rules: plain
    notation for decimal exponents -7 < e < 21 (``1e20`` → ``100000000000000000000``,
    ``1e-6`` → ``0.000001``), otherwise ``d.ddde±x`` (``1e+21``, ``1e-7``,
    ``1.5e+300``). Ints are exact up to 2**53 and beyond that are first rounded to the
    nearest double, as JS would hold them; an int too large for a double is ``null``
    (JS: Infinity).
    """
    if isinstance(x, bool):
        raise TypeError("a bool is not a JS number")
    if isinstance(x, int):
        if -_MAX_SAFE <= x <= _MAX_SAFE:
            return str(x)
        try:
            x = float(x)
        except OverflowError:
            return "null"
    if not math.isfinite(x):
        return "null"
    if x == 0:
        return "0"
    sign = "-" if x < 0 else ""
    r = repr(abs(x))
    mant, _, exp_s = r.partition("e")
    exp = int(exp_s) if exp_s else 0
    int_part, _, frac_part = mant.partition(".")
    digits = int_part + frac_part
    n = len(int_part) + exp
    stripped = digits.lstrip("0")
    n -= len(digits) - len(stripped)
    digits = stripped.rstrip("0")
    k = len(digits)
    if k <= n <= 21:
        body = digits + "0" * (n - k)
    elif 0 < n <= 21:
        body = digits[:n] + "." + digits[n:]
    elif -6 < n <= 0:
        body = "0." + "0" * (-n) + digits
    else:
        e = n - 1
        e_s = f"e+{e}" if e >= 0 else f"e-{-e}"
        body = digits + e_s if k == 1 else digits[0] + "." + digits[1:] + e_s
    return sign + body


def _is_array_index(key: str) -> bool:
    if not key or not key.isascii() or not key.isdigit():
        return False
    if len(key) > 1 and key[0] == "0":
        return False
    return int(key) <= _MAX_ARRAY_INDEX


def _js_key_order(obj: Mapping[Any, Any]) -> list[str]:
    keys = list(obj)
    maybe_index = False
    for key in keys:
        if not isinstance(key, str):
            raise TypeError(f"object keys must be str, not {type(key).__name__}")
        # Every array index starts with an ASCII digit; most objects have no such key.
        if key and "0" <= key[0] <= "9":
            maybe_index = True
    if not maybe_index:
        return keys
    index_keys = [k for k in keys if _is_array_index(k)]
    if not index_keys:
        return keys
    index_keys.sort(key=int)
    return index_keys + [k for k in keys if not _is_array_index(k)]


def _write(value: Any, out: list[str]) -> None:
    # Exact built-in types first (the hot path of a ledger: dicts, lists, strings, small
    # numbers); anything else — subclasses, other mappings, tuples — takes the general one.
    kind = type(value)
    if kind is str:
        out.append(js_string(value))
    elif kind is dict:
        _write_object(value, out)
    elif kind is list:
        _write_array(value, out)
    elif kind is int and -_MAX_SAFE <= value <= _MAX_SAFE:
        out.append(str(value))
    elif kind is float and value.is_integer() and -_MAX_SAFE < value < _MAX_SAFE:
        # Exact below 2**53, where the shortest digits are the integer's own (-0 → 0).
        out.append(str(int(value)))
    else:
        _write_general(value, out)


def _write_general(value: Any, out: list[str]) -> None:
    if value is None:
        out.append("null")
    elif value is True:
        out.append("true")
    elif value is False:
        out.append("false")
    elif isinstance(value, str):
        out.append(js_string(value))
    elif isinstance(value, int | float):
        out.append(js_number(value))
    elif isinstance(value, Mapping):
        _write_object(value, out)
    elif isinstance(value, list | tuple):
        _write_array(value, out)
    elif type(value) is msgspec.Raw:
        out.append(str(value, "utf-8"))  # JSON text already (an encoded transcript)
    else:
        raise TypeError(f"{type(value).__name__} is not JSON-able")


def _write_object(value: Mapping[Any, Any], out: list[str]) -> None:
    out.append("{")
    first = True
    for key in _js_key_order(value):
        if not first:
            out.append(",")
        first = False
        out.append(js_string(key))
        out.append(":")
        _write(value[key], out)
    out.append("}")


def _write_array(value: list[Any] | tuple[Any, ...], out: list[str]) -> None:
    out.append("[")
    for i, item in enumerate(value):
        if i:
            out.append(",")
        _write(item, out)
    out.append("]")


def _js_stringify_python(value: Any) -> str:
    """The reference implementation of ``js_stringify``, node by node in Python."""
    out: list[str] = []
    _write(value, out)
    return "".join(out)


class PlainJsonList(list[Any]):
    """A list its maker vouches for: only dicts whose keys are strs not starting with a
    digit, lists of the same, strs, bools, None and ints within ±2**53 — no float, no
    other type. msgspec writes such a value byte for byte as JSON.stringify does, so
    ``js_stringify`` takes it without walking it (a transcript's messages: the bulk of a
    ledger). A lone surrogate in a string is still caught: msgspec refuses it."""


class _NeedsPython(Exception):
    """A value msgspec would not write as JSON.stringify does, and that is not worth
    patching in place (rare: non-str keys, array-index keys, tuples, subclasses)."""


def _raw_number(x: int | float) -> msgspec.Raw:
    return msgspec.Raw(js_number(x).encode())


def _msgspec_ready(value: Any) -> Any:
    """``value`` with every leaf msgspec writes differently from JS replaced by the JS
    bytes (``msgspec.Raw``): containers on the path to such a leaf are shallow copies,
    the rest is shared. msgspec writes strings exactly as JSON.stringify does (short
    escapes, ``\\u00XX`` lowercase, everything else raw) and small ints, bools and null
    alike; it differs on integral floats (``1.0``), on the exponent form (``1e16``,
    ``1e-6``), on ints past 2**53 and on NaN/Infinity — so a float is taken as it is
    only when it is not integral and 1e-5 <= |x| < 1e15, where both print the same
    shortest digits in plain notation. A ``msgspec.Raw`` is JSON text already (a
    transcript encoded when it was captured, ``arenad.chat``): written as it is, by both
    writers. Raises ``_NeedsPython`` for the rest.
    """
    kind = type(value)
    if kind is dict:
        return _ready_dict(value)
    if kind is list:
        return _ready_list(value)
    if kind is str or kind is bool or value is None:
        return value
    if kind is int:
        return value if -_MAX_SAFE <= value <= _MAX_SAFE else _raw_number(value)
    if kind is float:
        if 1e-5 <= abs(value) < 1e15 and not value.is_integer():
            return value
        return _raw_number(value)
    if isinstance(value, PlainJsonList) or kind is msgspec.Raw:
        return value
    raise _NeedsPython


# Leaves msgspec writes as JSON.stringify does whatever their value: no call for them.
_PLAIN_LEAVES = frozenset({str, bool, type(None)})


def _ready_list(value: list[Any]) -> list[Any]:
    plain = _PLAIN_LEAVES
    for i, item in enumerate(value):
        if type(item) in plain:
            continue
        ready = _msgspec_ready(item)
        if ready is not item:
            return [*value[:i], ready, *map(_msgspec_ready, value[i + 1 :])]
    return value


def _ready_dict(value: dict[Any, Any]) -> dict[str, Any]:
    plain = _PLAIN_LEAVES
    copy: dict[str, Any] | None = None
    for key, item in value.items():
        # A key starting with a digit may be an array index, which JS writes first: rare,
        # so the Python writer takes it ("0" <= key < ":" is exactly "starts with a digit").
        if type(key) is not str or "0" <= key < ":":
            raise _NeedsPython
        ready = item if type(item) in plain else _msgspec_ready(item)
        if copy is not None:
            copy[key] = ready
        elif ready is not item:
            copy = {}
            for before, kept in value.items():
                if before == key:
                    break
                copy[before] = kept
            copy[key] = ready
    return value if copy is None else copy


_encode_json = msgspec.json.Encoder().encode


def js_stringify_bytes(value: Any) -> bytes:
    """The UTF-8 bytes of ``js_stringify(value)``: C speed for the common shapes.

    msgspec writes the value once the few leaves it would write differently are
    replaced (``_msgspec_ready``); a value it cannot take as it is — and a string with a
    lone surrogate, which msgspec refuses to encode — goes through the Python writer.
    """
    try:
        return _encode_json(_msgspec_ready(value))
    except (_NeedsPython, UnicodeEncodeError):
        return _js_stringify_python(value).encode()


def js_stringify(value: Any) -> str:
    """``JSON.stringify(value)`` (compact). Raises ``TypeError`` for non-JSON values."""
    return js_stringify_bytes(value).decode()


def _write_indented(value: Any, gap: str, level: int, out: list[str]) -> None:
    if isinstance(value, Mapping):
        keys = _js_key_order(value)
        if not keys:
            out.append("{}")
            return
        inner = "\n" + gap * (level + 1)
        out.append("{")
        for i, key in enumerate(keys):
            out.append(inner if i == 0 else "," + inner)
            out.append(js_string(key))
            out.append(": ")
            _write_indented(value[key], gap, level + 1, out)
        out.append("\n" + gap * level + "}")
    elif isinstance(value, list | tuple):
        if not value:
            out.append("[]")
            return
        inner = "\n" + gap * (level + 1)
        out.append("[")
        for i, item in enumerate(value):
            out.append(inner if i == 0 else "," + inner)
            _write_indented(item, gap, level + 1, out)
        out.append("\n" + gap * level + "]")
    else:
        _write(value, out)


def js_stringify_indented(value: Any, indent: int) -> str:
    """``JSON.stringify(value, null, indent)``: the run-dir documents' form (result.json,
    params.json, judge.json are written with an indent of 1). An empty object or array
    stays ``{}`` / ``[]``; keys, strings and numbers as ``js_stringify`` writes them
    (``8``, never ``8.0``)."""
    if not 0 < indent <= 10:  # JS clamps the gap to 10; 0 is the compact form
        raise ValueError("indent must be 1..10 (use js_stringify for the compact form)")
    out: list[str] = []
    _write_indented(value, " " * indent, 0, out)
    return "".join(out)


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


# One decoder: json.loads with keyword arguments builds a new one per call.
_DECODER = json.JSONDecoder(parse_constant=_refuse_constant)


_decode_json = msgspec.json.Decoder().decode


def js_parse(text: str) -> Any:
    """``JSON.parse(text)``; raises ``ValueError`` where JS throws a SyntaxError.

    msgspec first (several times faster on the small documents a store holds); any text
    it refuses is read again by ``json``, which decides: msgspec refuses a few documents
    JSON.parse accepts (a number past the double range, ``1e400`` → Infinity; a lone
    surrogate escape), and accepts none it refuses, reading the rest to the same value.
    """
    try:
        return _decode_json(text)
    except (msgspec.DecodeError, RecursionError):
        pass
    try:
        return _DECODER.decode(text)
    except RecursionError as exc:
        raise ValueError("JSON nested too deeply") from exc


def js_slice(s: str, end: int) -> str:
    """``s.slice(0, end)``: the first ``end`` UTF-16 code units, as JS counts a string's
    length. A cut through a surrogate pair keeps its high half (a lone surrogate, which
    ``js_stringify`` escapes as JS does); Python's ``s[:end]`` counts code points."""
    if end <= 0:
        return ""
    if len(s) * 2 <= end:  # no code point is more than two units: all of it fits
        return s
    units = s.encode("utf-16-le", "surrogatepass")
    return units[: 2 * end].decode("utf-16-le", "surrogatepass")


def js_round(x: float) -> int:
    """``Math.round(x)``: the nearest integer, halves toward +Infinity (``-2.5`` → ``-2``).

    Python's ``round`` rounds halves to even; ``floor(x + 0.5)`` is wrong for
    ``0.49999999999999994``. Non-finite input (JS: NaN/±Infinity out) raises
    ``ValueError``.
    """
    if isinstance(x, int) and not isinstance(x, bool):
        return x
    if not math.isfinite(x):
        raise ValueError(f"Math.round of {x!r} is not an integer")
    f = math.floor(x)
    # x - floor(x) is exact for every double, so the comparison is too.
    return f + 1 if x - f >= 0.5 else f


# ECMAScript time values: ±100,000,000 days around the epoch.
MAX_TIME_MS = 8_640_000_000_000_000
_MS_PER_DAY = 86_400_000


def _days_from_civil(y: int, m: int, d: int) -> int:
    # Proleptic Gregorian, any year (H. Hinnant's algorithm); day 0 = 1970-01-01.
    y -= m <= 2
    era = y // 400
    yoe = y - era * 400
    doy = (153 * (m + (-3 if m > 2 else 9)) + 2) // 5 + d - 1
    doe = yoe * 365 + yoe // 4 - yoe // 100 + doy
    return era * 146097 + doe - 719468


def _civil_from_days(z: int) -> tuple[int, int, int]:
    z += 719468
    era = z // 146097
    doe = z - era * 146097
    yoe = (doe - doe // 1460 + doe // 36524 - doe // 146096) // 365
    doy = doe - (365 * yoe + yoe // 4 - yoe // 100)
    mp = (5 * doy + 2) // 153
    d = doy - (153 * mp + 2) // 5 + 1
    m = mp + (3 if mp < 10 else -9)
    return yoe + era * 400 + (m <= 2), m, d


def iso_ms(epoch_ms: int | float) -> str:
    """``new Date(epoch_ms).toISOString()``: ``YYYY-MM-DDTHH:MM:SS.sssZ``.

    Fractions of a millisecond are truncated toward zero (TimeClip); years outside
    0..9999 use the six-digit signed form (``+010000-…``, ``-000001-…``). Outside the
    ECMAScript range (``±8.64e15`` ms) or non-finite: ``ValueError`` (JS: RangeError).
    """
    if isinstance(epoch_ms, bool):
        raise TypeError("a bool is not a time value")
    if isinstance(epoch_ms, float):
        if not math.isfinite(epoch_ms):
            raise ValueError(f"invalid time value {epoch_ms!r}")
        epoch_ms = math.trunc(epoch_ms)
    if abs(epoch_ms) > MAX_TIME_MS:
        raise ValueError(f"invalid time value {epoch_ms!r}")
    days, ms_of_day = divmod(epoch_ms, _MS_PER_DAY)
    y, m, d = _civil_from_days(days)
    secs, ms = divmod(ms_of_day, 1000)
    hh, rem = divmod(secs, 3600)
    mi, ss = divmod(rem, 60)
    year = f"{y:04d}" if 0 <= y <= 9999 else f"{'+' if y > 0 else '-'}{abs(y):06d}"
    return f"{year}-{m:02d}-{d:02d}T{hh:02d}:{mi:02d}:{ss:02d}.{ms:03d}Z"


_ISO_DATE = re.compile(
    r"(?:(?P<ey>[+-]\d{6})|(?P<y>\d{4}))(?:-(?P<mo>\d{2})(?:-(?P<d>\d{2}))?)?"
    r"(?:(?P<time>[Tt ](?P<h>\d{2}):(?P<mi>\d{2})(?::(?P<s>\d{2})(?:\.(?P<f>\d+))?)?"
    r"(?:(?P<tz>[Zz])|(?P<os>[+-])(?P<oh>\d{2}):?(?P<om>\d{2}))?)|(?P<dz>[Zz]))?",
    re.ASCII,
)


def js_date_parse(text: str) -> int | None:
    """``Date.parse(text)`` for ISO-8601-style strings: epoch ms, or ``None`` for NaN.

    Accepts what V8 accepts in the ECMAScript date-time family: ``YYYY``, ``YYYY-MM``,
    ``YYYY-MM-DD`` (and ``±YYYYYY`` years, never ``-000000``), optionally followed by
    ``T``/``t``/space and ``HH:mm[:ss[.fraction]]`` (any number of fraction digits;
    ``24:00`` only as midnight), then ``Z``/``z`` or ``±HH:mm``/``±HHmm``; a date alone
    may end in ``Z``. Days are checked against 1..31 only (V8 rolls ``02-31`` over).
    A time without an offset is local time in JS; it is read as UTC here (the
    validity answer is the same). V8's legacy fallback formats (``Aug 22 2026``,
    ``2026/08/22``, a bare ``1``) are not accepted: this is stricter than JS.
    """
    match = _ISO_DATE.fullmatch(text)
    if match is None:
        return None
    g = match.group
    if g("ey") is not None:
        if g("ey") == "-000000":
            return None
        year = int(g("ey"))
    else:
        year = int(g("y"))
    month = int(g("mo") or 1)
    day = int(g("d") or 1)
    if not (1 <= month <= 12 and 1 <= day <= 31):
        return None
    hour = int(g("h") or 0)
    minute = int(g("mi") or 0)
    second = int(g("s") or 0)
    frac = g("f") or ""
    millis = int((frac + "00")[:3]) if frac else 0
    if minute > 59 or second > 59 or hour > 24:
        return None
    if hour == 24 and (minute or second or any(c != "0" for c in frac)):
        return None
    offset = 0
    if g("os") is not None:
        oh, om = int(g("oh")), int(g("om"))
        if oh > 23 or om > 59:
            return None
        offset = (oh * 60 + om) * 60_000 * (1 if g("os") == "+" else -1)
    days = _days_from_civil(year, month, 1) + day - 1
    ms = days * _MS_PER_DAY + ((hour * 60 + minute) * 60 + second) * 1000 + millis - offset
    return ms if abs(ms) <= MAX_TIME_MS else None
