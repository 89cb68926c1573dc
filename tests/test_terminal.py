"""The one escape every rendering of an event string uses (arenad.terminal), and the
daemon log's formatter built on it."""

from __future__ import annotations

import json
import logging
import sys

import msgspec
from hypothesis import given
from hypothesis import strategies as st

from arenad.logs import PrintableFormatter
from arenad.terminal import json_printable, printable

OSC52 = "\x1b]52;c;cHduZWQ=\x07"  # writes "pwned" into the reader's clipboard
UNTERMINATED = "\x1b]0;title that never ends"
CSI_C1 = "\x9b2J"  # the one-byte CSI: "erase the screen" where C1 is obeyed


def _controls(text: str) -> list[str]:
    return [
        c
        for c in text
        if ord(c) < 0x20 or 0x7F <= ord(c) <= 0x9F or c in "\u202e\u2066\u2028\u061c"
    ]


def test_control_sequences_print_as_visible_escapes() -> None:
    assert printable(OSC52) == "\\x1b]52;c;cHduZWQ=\\x07"
    assert printable(UNTERMINATED) == "\\x1b]0;title that never ends"
    assert printable(CSI_C1) == "\\x9b2J"
    assert printable("a\u202eb\u2066c\u2028d\u061c\x7f\x00") == (
        "a\\u202eb\\u2066c\\u2028d\\u061c\\x7f\\x00"
    )
    # One line: a reason never breaks a table's row.
    assert printable("one\ntwo\tthree\r") == "one\\ntwo\\tthree\\r"


def test_newlines_and_tabs_stay_in_a_multi_line_rendering() -> None:
    assert printable("one\n\ttwo\x1b[31m", newlines=True) == "one\n\ttwo\\x1b[31m"
    assert printable("cr\rhides", newlines=True) == "cr\\rhides"


def test_text_in_any_script_is_left_as_it_is() -> None:
    text = "résumé · 数据 · Ελληνικά · עברית · 😀 · \\x1b (already text)"
    assert printable(text) == text


@given(st.text())
def test_nothing_a_terminal_obeys_is_left(text: str) -> None:
    assert _controls(printable(text)) == []
    assert _controls(printable(text, newlines=True).replace("\n", "").replace("\t", "")) == []


@given(st.text())
def test_json_keeps_its_value_and_loses_its_raw_controls(text: str) -> None:
    raw = msgspec.json.encode({"reason": text, "n": 1})
    safe = json_printable(raw)
    assert json.loads(safe) == {"reason": text, "n": 1}
    assert _controls(safe.decode("utf-8", errors="surrogatepass")) == []


def test_the_daemon_log_escapes_its_records_traceback_included() -> None:
    formatter = PrintableFormatter("%(levelname)s %(message)s")
    try:
        raise ValueError(f"agent said {OSC52}")
    except ValueError:
        info = sys.exc_info()
    record = logging.LogRecord(
        "arenad.cell", logging.WARNING, __file__, 1, "%s: run failed: %s", ("c1", CSI_C1), info
    )
    text = formatter.format(record)
    assert text.startswith("WARNING c1: run failed: \\x9b2J\nTraceback")
    assert "ValueError: agent said \\x1b]52;c;cHduZWQ=\\x07" in text
    assert _controls(text.replace("\n", "")) == []
