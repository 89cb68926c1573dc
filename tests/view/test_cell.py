"""arenad.view.cell and pages: a cell's page from its streams, and the page escaped."""

from __future__ import annotations

import asyncio
import base64
import json
from pathlib import Path

import msgspec
import pytest

from arenad.home import Home, open_store
from arenad.recovery.opencode_transcript import MAX_NESTING
from arenad.view.cell import LINES_SHOWN, TEXT_SHOWN, cell_view, excerpt_text
from arenad.view.pages import cell_page
from events import capture as cap
from events import cell as ev
from events import ingest as ing
from events.base import Event, Recorded
from events.codec import event_tag
from events.streams import attempt_prefixes, cell_stream
from tests.events.samples import make_spec
from tests.report.arena_log import T0
from tests.view.view_log import (
    CALM_CELL,
    PATCH,
    TOOL_XSS,
    USER_XSS,
    VERIFY_LOG,
    XSS_CELL,
    build_view_log,
)


async def _records(home: Path, cell_id: str) -> list[Recorded]:
    async with open_store(Home(home)) as store:
        ingest, capture = attempt_prefixes(cell_id)
        others = await store.streams(ingest) + await store.streams(capture)
        return await store.read_stream(cell_stream(cell_id)) + await store.read_streams(others)


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    home = tmp_path_factory.mktemp("view") / "home"
    asyncio.run(build_view_log(home))
    return home


def test_the_page_data_of_a_recovered_cell(home: Path) -> None:
    records = asyncio.run(_records(home, XSS_CELL))
    view = cell_view(reversed(records))  # any order: the fold sorts by seq
    assert view is not None
    assert (view.cell_id, view.state, view.attempt, view.arm_kind) == (
        XSS_CELL,
        "recovered",
        1,
        "solo",
    )
    (a,) = view.attempts
    assert a.ended == "completed, rc 0" and a.wall_s == 12.5 and a.cost_usd == 0.0125
    assert a.patch is not None and a.patch.text == PATCH and not a.patch.shortened
    assert [d.kind for d in a.patch_lines].count("add") == 1
    assert a.verify_log is not None and a.verify_log.text == VERIFY_LOG
    (session,) = a.sessions
    roles = [m.role for m in session.messages]
    assert roles == ["user", "assistant", "tool", "assistant"]
    assert session.messages[0].content == USER_XSS
    assert session.messages[1].reasoning == "The sign is wrong."
    assert session.messages[1].tool_calls[0].name == "bash"
    assert (session.messages[2].content, session.messages[2].tool_name) == (TOOL_XSS, "bash")
    assert a.lines_total == 2 and a.lines[1].malformed == "x"
    # The timeline is the audit trail: every cell event and the capture, no ingested line.
    tags = [r.tag for r in view.timeline]
    assert tags[0] == "cell.submitted" and "capture.opencode-session" in tags
    assert "cell.patch-captured" in tags and "ingest.line" not in tags
    assert [r.seq for r in view.timeline] == sorted(r.seq for r in view.timeline)
    # The solo run's usage figures, as the reference's result.json has them (finding 9).
    page = cell_page(view)
    assert "<th>largest context</th><td>1234</td>" in page
    assert "<th>total tokens</th><td>1670</td>" in page and "<th>steps</th><td>3</td>" in page


def test_every_hostile_string_is_escaped_on_the_page(home: Path) -> None:
    view = cell_view(asyncio.run(_records(home, XSS_CELL)))
    assert view is not None
    page = cell_page(view)
    for needle in ("<script>window", "<img", "<iframe", "<svg", '<a href="javascript', "<style>"):
        assert needle not in page, needle
    assert "&lt;script&gt;window.__xss=&#39;user&#39;&lt;/script&gt;" in page
    assert "&lt;b&gt;judge&lt;/b&gt;" in page


def test_a_running_cell_and_an_unknown_one(home: Path) -> None:
    view = cell_view(asyncio.run(_records(home, CALM_CELL)))
    assert view is not None and view.state == "running"
    (a,) = view.attempts
    assert (a.ended, a.verified, a.patch, a.sessions, a.cost_usd) == (None, None, None, [], None)
    assert "running" in cell_page(view)
    assert cell_view([]) is None


def _rec(seq: int, stream: str, event: Event) -> Recorded:
    return Recorded(seq, stream, seq, event_tag(event), 1, T0 + seq, event)


def test_an_older_log_without_captured_text_says_where_the_files_were(home: Path) -> None:
    records = [
        r
        for r in asyncio.run(_records(home, XSS_CELL))
        if not isinstance(r.event, ev.PatchCaptured | ev.VerifyLogCaptured)
    ]
    view = cell_view(records)
    assert view is not None and view.attempts[0].patch is None
    page = cell_page(view)
    assert "recorded before arenad kept patches" in page and "/h/patches/xss.solo.patch" in page
    assert "recorded before arenad kept verify logs" in page


def test_long_texts_are_shortened_for_the_page_and_say_so(home: Path) -> None:
    records = asyncio.run(_records(home, CALM_CELL))
    stream = "ingest/" + CALM_CELL + "/1"
    long_line = "x" * (TEXT_SHOWN * 3)
    extra = [
        _rec(
            1000 + i,
            stream,
            ing.LineIngested(source="stdout", path="oc.jsonl", offset=i, length=1, raw=long_line),
        )
        for i in range(LINES_SHOWN + 5)
    ]
    view = cell_view(records + extra)
    assert view is not None
    (a,) = view.attempts
    assert a.lines_total == LINES_SHOWN + 5 and len(a.lines) == LINES_SHOWN
    assert a.lines[0].shortened == len(long_line) - len(a.lines[0].text) > 0
    assert f"the first {LINES_SHOWN} shown" in cell_page(view)


def test_base64_excerpts_are_shown_as_text() -> None:
    raw = b"caf\xe9\n"
    excerpt = ev.TextExcerpt(
        text=base64.b64encode(raw).decode(), encoding="base64", kept_bytes=5, size=5, sha256="0"
    )
    assert excerpt_text(excerpt) == "caf\ufffd\n"


def test_a_session_too_deep_to_write_is_shown_as_unreadable_not_a_failed_page(
    home: Path,
) -> None:
    deep: object = "x"
    for _ in range(MAX_NESTING + 1):
        deep = [deep]
    part = {"type": "tool", "callID": "c9", "tool": "bash", "state": {"output": deep}}
    records = []
    for r in asyncio.run(_records(home, XSS_CELL)):
        if isinstance(r.event, cap.AgentSessionCaptured):
            row = cap.PartRow(id="prt_zz", message_id="msg_3", data=json.dumps(part))
            event = msgspec.structs.replace(r.event, parts=[*r.event.parts, row])
            r = msgspec.structs.replace(r, event=event)
        records.append(r)
    view = cell_view(records)
    assert view is not None
    (session,) = view.attempts[0].sessions
    assert session.messages == []
    assert session.unreadable[-1] == (
        f"a tool part nested more than {MAX_NESTING} deep (none shown)"
    )
    assert "none shown" in cell_page(view)


def test_the_calls_through_the_gateway_are_listed_with_where_the_sources_disagree(
    home: Path,
) -> None:
    records = asyncio.run(_records(home, XSS_CELL))
    stream = "ingest/" + XSS_CELL + "/1"
    calls = [
        {
            "request": {"model": "<b>fixer</b>"},
            "upstream": {"status": 200},
            "usage": {"input": 120, "output": 9},
            "cost_usd": 0.5,
            "latency_ms": 41.5,
        },
        {"request": {"model": "fixer"}, "upstream": {"status": 429}, "latency_ms": 3},
        {"request": {"model": "fixer"}, "refused": "budget", "upstream": {}},
    ]
    extra = [
        _rec(
            2000 + i,
            stream,
            ing.LineIngested(
                source="gateway",
                path="calls.jsonl",
                offset=i * 100,
                length=1,
                raw=json.dumps(c),
                kind="gateway.call",
            ),
        )
        for i, c in enumerate(calls)
    ]
    view = cell_view(records + extra)
    assert view is not None
    (a,) = view.attempts
    assert a.gateway is not None
    assert [c.status for c in a.gateway.calls] == ["200", "429", "refused: budget"]
    assert (a.gateway.figures["answered"], a.gateway.figures["usd"]) == (1, 0.5)
    # The store's figures of this cell are not the gateway's: named, both kept.
    assert "usd" in a.gateway.mismatch
    page = cell_page(view)
    assert "Model calls (recorded by the gateway)" in page
    assert "&lt;b&gt;fixer&lt;/b&gt;" in page and "<b>fixer" not in page
    assert "disagree on: usd" in page
    # A cell without gateway records has no such section.
    plain = cell_view(records)
    assert plain is not None and plain.attempts[0].gateway is None
    assert "Model calls" not in cell_page(plain)


def test_the_page_leads_with_the_verdict(home: Path) -> None:
    view = cell_view(asyncio.run(_records(home, XSS_CELL)))
    assert view is not None and (view.result, view.why) == ("resolved", None)
    page = cell_page(view)
    # The badge comes first; the run's argv, its sandbox and the lines are collapsed.
    assert page.index("✓ resolved") < page.index("<h3>Verdict</h3>") < page.index("<h3>Patch")
    assert page.index("<h3>Transcript") < page.index("<h3>Spend") < page.index('"run"')
    assert '<details class="run"><summary>Run: argv' in page
    assert '<details class="lines"><summary>Ingested lines (2)</summary>' in page
    # An ingested JSON line is a table of its fields, not raw JSON.
    (a,) = view.attempts
    assert a.lines[0].fields == [
        ("type", "text"),
        ("part.text", "<svg onload=window.__xss='line'>"),
    ]
    assert a.lines[1].fields is None  # not JSON: its text
    assert '<th class="l">part.text</th>' in page
    calm = cell_view(asyncio.run(_records(home, CALM_CELL)))
    assert calm is not None and calm.result == "running"
    assert '<span class="badge">running</span>' in cell_page(calm)


def _verdict(doc: object) -> ev.JudgeVerdictRecorded:
    return ev.JudgeVerdictRecorded(
        attempt=1, judge="swebench", verdict_json=json.dumps(doc), resolved=False, score=0.0
    )


def test_a_graded_tests_table_and_the_verify_logs_tail(home: Path) -> None:
    records = asyncio.run(_records(home, XSS_CELL))
    hostile = "tests/t.py::test_<script>window.__xss=1</script>"
    doc = {
        "judge": "swebench",
        "report": {
            "tests_status": {
                "FAIL_TO_PASS": {"success": ["tests/t.py::test_a"], "failure": [hostile]},
                "PASS_TO_PASS": {"success": ["tests/t.py::test_b", "tests/t.py::test_c"]},
            }
        },
    }
    log = "\n".join(f"line {i}" for i in range(100)) + "\n"
    raw = log.encode()
    excerpt = ev.TextExcerpt(text=log, kept_bytes=len(raw), size=len(raw), sha256="0")
    cell = cell_stream(XSS_CELL)
    extra = [
        _rec(900, cell, _verdict(doc)),
        _rec(901, cell, ev.VerifyLogCaptured(attempt=1, log=excerpt)),
    ]
    view = cell_view(records + extra)
    assert view is not None and view.result == "unresolved"
    (a,) = view.attempts
    assert a.tests is not None
    assert [(t.group, t.test, t.passed) for t in a.tests.rows] == [
        ("FAIL_TO_PASS", hostile, False),
        ("FAIL_TO_PASS", "tests/t.py::test_a", True),
        ("PASS_TO_PASS", "tests/t.py::test_b", True),
        ("PASS_TO_PASS", "tests/t.py::test_c", True),
    ]
    assert a.tests.counts == {"FAIL_TO_PASS": (1, 1), "PASS_TO_PASS": (2, 0)}
    assert a.verify_tail == "\n".join(f"line {i}" for i in range(60, 100))
    assert not a.verify_tail_whole
    page = cell_page(view)
    assert "<script>window.__xss=1" not in page and "test_&lt;script&gt;" in page
    assert "FAIL_TO_PASS: 1 passed, 1 failed · PASS_TO_PASS: 2 passed, 0 failed" in page
    assert "the whole verify log kept" in page
    # A verdict document without tests has no such table.
    plain = cell_view([*records, _rec(900, cell, _verdict({"resolved": False}))])
    assert plain is not None and plain.attempts[0].tests is None


def test_an_attempt_that_never_ran_says_so_in_one_line() -> None:
    spec = make_spec(campaign="web", instance_id="never")
    cell = cell_stream(spec.cell_id)
    failed = ev.CellFailed(
        attempt=1,
        stage="materialize",
        error="git clone failed: <b>no such repo</b>\n(details)",
        classification="infrastructure",
    )
    records = [
        _rec(1, cell, ev.CellSubmitted(spec=spec)),
        _rec(2, cell, failed),
        _rec(3, cell, ev.CellRetried(attempt=2, reason="policy", requested_by="policy")),
    ]
    view = cell_view(records)
    assert view is not None and [a.number for a in view.attempts] == [2, 1]
    page = cell_page(view)
    assert (
        "Never ran: infrastructure failure at materialize: git clone failed:"
        " &lt;b&gt;no such repo&lt;/b&gt;</p>" in page
    )
    assert "Not run yet." in page
    # Neither attempt has the sections of a run.
    assert "<h3>Patch" not in page and "Ingested lines" not in page
