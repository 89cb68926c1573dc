"""A small log for the view's tests, written through a real home's store.

Campaign ``web``: cell ``web:xss:SOLO:0`` ran, was verified and recovered, and everything
it left is hostile markup (its transcript, its patch, its verify log, an ingested line,
its judge's verdict, the problem statement); cell ``web:calm:SOLO:0`` is still running.
Every hostile string, if it ever ran, would set ``window.__xss``.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import msgspec

from arenad.home import Home, open_store
from arenad.store.base import AppendRequest
from events import capture as cap
from events import cell as ev
from events import ingest as ing
from events.base import Event
from events.streams import capture_stream, cell_stream, ingest_stream
from tests.events.samples import make_spec
from tests.report.arena_log import T0, Tick

XSS_CELL = "web:xss:SOLO:0"
CALM_CELL = "web:calm:SOLO:0"

USER_XSS = "<script>window.__xss='user'</script>Fix the bug, please."
LINK_XSS = "See <a href=\"javascript:window.__xss='link'\">this link</a>"
IMG_XSS = "<img src=x onerror=\"window.__xss='img'\">"
TOOL_XSS = "</pre><script>window.__xss='tool'</script><pre>"
ARGS_XSS = "echo '<script>window.__xss=1</script>'"
PATCH = (
    "diff --git a/add.py b/add.py\n"
    "index 1111111..2222222 100644\n"
    "--- a/add.py\n"
    "+++ b/add.py\n"
    "@@ -1,2 +1,2 @@\n"
    " def add(a, b):\n"
    "-    return a - b\n"
    "+    return a + b  # <script>window.__xss='patch'</script>\n"
)
VERIFY_LOG = "collected 1 item\n<iframe src=\"javascript:window.__xss='log'\"></iframe>\n1 passed\n"
LINE_XSS = json.dumps({"type": "text", "part": {"text": "<svg onload=window.__xss='line'>"}})
PROBLEM_XSS = "<style>body{display:none}</style>add() subtracts."


def _excerpt(text: str) -> ev.TextExcerpt:
    raw = text.encode()
    return ev.TextExcerpt(
        text=text, kept_bytes=len(raw), size=len(raw), sha256=hashlib.sha256(raw).hexdigest()
    )


def _session(attempt: int) -> cap.AgentSessionCaptured:
    def part(mid: str, i: int, data: dict[str, Any]) -> cap.PartRow:
        return cap.PartRow(id=f"prt_{mid}_{i:03d}", message_id=mid, data=json.dumps(data))

    tool_state = {
        "status": "completed",
        "input": {"command": ARGS_XSS},
        "output": TOOL_XSS,
        "title": "bash",
        "metadata": {},
    }
    messages = [
        cap.MessageRow(id="msg_1", time_created=1, data=json.dumps({"role": "user"})),
        cap.MessageRow(id="msg_2", time_created=2, data=json.dumps({"role": "assistant"})),
        cap.MessageRow(id="msg_3", time_created=3, data=json.dumps({"role": "assistant"})),
    ]
    parts = [
        part("msg_1", 0, {"type": "text", "text": USER_XSS}),
        part("msg_2", 0, {"type": "step-start"}),
        part("msg_2", 1, {"type": "reasoning", "text": "The sign is wrong."}),
        part("msg_2", 2, {"type": "text", "text": f"{LINK_XSS} {IMG_XSS}"}),
        part("msg_2", 3, {"type": "tool", "callID": "call_1", "tool": "bash", "state": tool_state}),
        part("msg_3", 0, {"type": "step-start"}),
        part("msg_3", 1, {"type": "text", "text": "Done: add() adds now."}),
    ]
    return cap.AgentSessionCaptured(
        attempt=attempt,
        purpose="solo",
        store_path="/h/xdg/data/opencode/opencode.db",
        session_id="ses_xss",
        parent_id=None,
        directory="/h/ws",
        row={"id": "ses_xss", "directory": "/h/ws"},
        messages=messages,
        parts=parts,
    )


def _started(attempt: int) -> list[Event]:
    return [
        ev.CellMaterialized(
            attempt=attempt,
            run_dir="/h/run",
            workspace="/h/run/ws",
            head="0" * 40,
            clean=True,
            materializer="git",
        ),
        ev.RunStarted(
            attempt=attempt,
            argv=["opencode", "run", "--format", "json"],
            cwd="/h/run/ws",
            pid=4242,
            pgid=4242,
            started_at_ms=T0,
            deadline_ms=T0 + 60_000,
            timeout_s=60.0,
            kill_grace_s=1.0,
        ),
    ]


def view_requests() -> list[list[AppendRequest]]:
    """The log, one transaction per list (as a daemon writes it)."""
    xss = msgspec.structs.replace(
        make_spec(campaign="web", instance_id="xss"),
        instance=msgspec.structs.replace(
            make_spec().instance, instance_id="xss", problem_statement=PROBLEM_XSS
        ),
    )
    calm = make_spec(campaign="web", instance_id="calm")
    cell = cell_stream(XSS_CELL)
    lines: list[Event] = [
        ing.LineIngested(
            source="stdout", path="oc.jsonl", offset=0, length=len(LINE_XSS), raw=LINE_XSS
        ),
        ing.LineMalformed(
            source="stdout", path="oc.jsonl", offset=100, length=9, raw="<b>oops</b>", error="x"
        ),
    ]
    return [
        [AppendRequest(cell, 0, [ev.CellSubmitted(spec=xss)])],
        [AppendRequest(cell_stream(CALM_CELL), 0, [ev.CellSubmitted(spec=calm), *_started(1)])],
        [AppendRequest(cell, 1, _started(1))],
        [AppendRequest(ingest_stream(XSS_CELL, 1), 0, lines)],
        [
            AppendRequest(
                cell,
                3,
                [
                    ev.RunCompleted(attempt=1, rc=0, wall_s=12.5),
                    ev.CellVerified(
                        attempt=1,
                        scored=True,
                        patch_path="/h/patches/xss.solo.patch",
                        patch_lines=8,
                        patch_sha256=_excerpt(PATCH).sha256,
                        verify_rc=0,
                        verify_pass=True,
                        verify_log="/h/run/verify.log",
                    ),
                    ev.PatchCaptured(attempt=1, patch=_excerpt(PATCH)),
                    ev.VerifyLogCaptured(attempt=1, log=_excerpt(VERIFY_LOG)),
                    ev.JudgeVerdictRecorded(
                        attempt=1,
                        judge="<b>judge</b>",
                        verdict_json='{"resolved": true, "note": "<script>x</script>"}',
                        resolved=True,
                        score=1.0,
                    ),
                    ev.CellRecovered(
                        attempt=1,
                        store_available=True,
                        spend=ev.SpendFigures(
                            sessions=1, tokens_in=1600, tokens_out=70, cost_usd=0.0125
                        ),
                        usage=ev.SoloUsage(
                            steps=3,
                            tokens_in=1600,
                            tokens_out=70,
                            reasoning=0,
                            cache_w=0,
                            cache_r=0,
                            max_ctx=1234,
                            oc_cost=0.0125,
                            total_io=1670,
                        ),
                    ),
                ],
            ),
            AppendRequest(capture_stream(XSS_CELL, 1), 0, [_session(1)]),
        ],
    ]


async def build_view_log(home: Path) -> None:
    async with open_store(Home(home), clock=Tick(), create=True) as store:
        for batch in view_requests():
            await store.append_many(batch)
