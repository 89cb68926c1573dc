"""The view's screenshots (scripts/screenshots): a made-up campaign written into a fresh
home, the real `arenad view` serving it, Playwright's chromium at 1280x800 taking the
campaign page, one cell's page and the report into docs/view-*.png."""

from __future__ import annotations

import asyncio
import hashlib
import json
import sys
import tempfile
from pathlib import Path

from arenad.home import Home, open_store
from arenad.store.base import AppendRequest
from events import capture as cap
from events import cell as ev
from events import ingest as ing
from events.base import Event
from events.specs import CellSpec, InstanceSpec, MaterializerSpec, SoloArm
from events.streams import capture_stream, cell_stream, ingest_stream
from tests.report.arena_log import Tick
from tests.view.browser import CHROMIUM, CHROMIUM_ARGS, browser_skip_reason, view_server

DOCS = Path("docs")
SIZE = {"width": 1280, "height": 800}
INSTANCES = [
    "astropy__astropy-12907",
    "astropy__astropy-14365",
    "django__django-11099",
    "django__django-11133",
    "django__django-11179",
    "django__django-12453",
    "matplotlib__matplotlib-23314",
    "psf__requests-2317",
    "pytest-dev__pytest-5227",
    "scikit-learn__scikit-learn-13142",
    "sphinx-doc__sphinx-8595",
    "sympy__sympy-20590",
]
ARMS = ("SOLO", "CLI")
CELL = f"demo:{INSTANCES[2]}:SOLO:0"
PATCH = """diff --git a/django/core/validators.py b/django/core/validators.py
index 1111111..2222222 100644
--- a/django/core/validators.py
+++ b/django/core/validators.py
@@ -7,7 +7,7 @@ from django.utils.translation import gettext_lazy as _
 @deconstructible
 class ASCIIUsernameValidator(validators.RegexValidator):
-    regex = r'^[\\w.@+-]+$'
+    regex = r'\\A[\\w.@+-]+\\Z'
     message = _(
         'Enter a valid username. This value may contain only English letters, '
"""
VERIFY_LOG = (
    "".join(
        f"tests/auth_tests/test_validators.py::UsernameValidatorsTests::test_{n} PASSED\n"
        for n in ("ascii_validator", "unicode_validator", "trailing_newline")
    )
    + "============================== 3 passed in 0.41s ==============================\n"
)
TESTS = {
    "FAIL_TO_PASS": {
        "success": [
            "test_ascii_validator (auth_tests.test_validators.UsernameValidatorsTests)",
            "test_unicode_validator (auth_tests.test_validators.UsernameValidatorsTests)",
        ],
        "failure": [],
    },
    "PASS_TO_PASS": {
        "success": [
            "test_help_text (auth_tests.test_validators.MinimumLengthValidatorTest)",
            "test_validate (auth_tests.test_validators.MinimumLengthValidatorTest)",
        ],
        "failure": [],
    },
}


def _spec(instance: str, arm: str) -> CellSpec:
    return CellSpec(
        campaign="demo",
        instance=InstanceSpec(
            instance_id=instance,
            repo=instance.split("__")[0] + "/" + instance.split("__")[1].rsplit("-", 1)[0],
            base_commit="0" * 40,
            problem_statement="UsernameValidator allows a trailing newline in usernames.",
            verify_cmd="pytest tests/auth_tests/test_validators.py",
        ),
        arm=SoloArm(name=arm, model="anthropic/claude-sonnet-4", timeout_s=1800.0),
        rep=0,
        materializer=MaterializerSpec(kind="git", source="/srv/repos"),
    )


def _excerpt(text: str) -> ev.TextExcerpt:
    raw = text.encode()
    return ev.TextExcerpt(
        text=text, kept_bytes=len(raw), size=len(raw), sha256=hashlib.sha256(raw).hexdigest()
    )


def _run(i: int, result: str, graded: list[Event] | None = None) -> list[Event]:
    started: list[Event] = [
        ev.CellMaterialized(
            attempt=1,
            run_dir="/h/run",
            workspace="/h/run/ws",
            head="0" * 40,
            clean=True,
            materializer="git",
        ),
        ev.RunStarted(
            attempt=1,
            argv=["opencode", "run", "--format", "json", "-m", "anthropic/claude-sonnet-4"],
            cwd="/h/run/ws",
            pid=4000 + i,
            pgid=4000 + i,
            started_at_ms=0,
            deadline_ms=1,
            timeout_s=1800.0,
            kill_grace_s=5.0,
            sandbox=ev.SandboxView(
                kind="bwrap",
                version="0.8.0",
                read_only=["/usr", "/etc/ssl"],
                read_write=["/h/run/ws"],
                network="model",
                endpoints=["127.0.0.1:8765 -> 127.0.0.1:8765"],
            ),
        ),
    ]
    if result == "running":
        return started
    if result == "failed":
        return [
            ev.CellFailed(
                attempt=1,
                stage="run",
                error="provider unreachable: Cannot connect to API",
                classification="infrastructure",
            )
        ]
    passed = result == "resolved"
    return [
        *started,
        ev.RunCompleted(attempt=1, rc=0, wall_s=95.0 + 17 * (i % 7)),
        ev.CellVerified(
            attempt=1,
            scored=True,
            patch_lines=9,
            verify_rc=0 if passed else 1,
            verify_pass=passed,
            verify_in="checkout",
            patch_applied=True,
            patch_apply_note="applied with git apply",
        ),
        *(graded or []),
        ev.CellRecovered(
            attempt=1,
            store_available=True,
            spend=ev.SpendFigures(
                sessions=1, tokens_in=41_000 + 900 * i, tokens_out=2_400, cost_usd=0.11 + i / 97
            ),
        ),
    ]


def _graded() -> list[Event]:
    """The cell page's cell: its patch, verify log and graded tests."""
    doc = {
        "judge": "swebench",
        "kind": "swebench",
        "resolved": True,
        "report": {"tests_status": TESTS},
    }
    return [
        ev.PatchCaptured(attempt=1, patch=_excerpt(PATCH)),
        ev.VerifyLogCaptured(attempt=1, log=_excerpt(VERIFY_LOG)),
        ev.JudgeVerdictRecorded(
            attempt=1, judge="swebench", verdict_json=json.dumps(doc), resolved=True, score=1.0
        ),
    ]


def _rich() -> list[list[AppendRequest]]:
    """The cell page's cell: its transcript and an ingested line."""
    parts = [
        ("msg_1", {"type": "text", "text": "UsernameValidator allows a trailing newline."}),
        (
            "msg_2",
            {
                "type": "text",
                "text": "The regex uses $, which matches before a final"
                " newline; \\A and \\Z do not. Fixing both validators.",
            },
        ),
        (
            "msg_2",
            {
                "type": "tool",
                "callID": "call_1",
                "tool": "bash",
                "state": {
                    "status": "completed",
                    "input": {"command": "pytest -q tests/auth_tests"},
                    "output": "3 passed in 0.41s",
                    "title": "bash",
                    "metadata": {},
                },
            },
        ),
    ]
    session = cap.AgentSessionCaptured(
        attempt=1,
        purpose="solo",
        store_path="/h/xdg/data/opencode/opencode.db",
        session_id="ses_demo",
        parent_id=None,
        directory="/h/run/ws",
        row={"id": "ses_demo"},
        messages=[
            cap.MessageRow(id="msg_1", time_created=1, data=json.dumps({"role": "user"})),
            cap.MessageRow(id="msg_2", time_created=2, data=json.dumps({"role": "assistant"})),
        ],
        parts=[
            cap.PartRow(id=f"prt_{i:03d}", message_id=m, data=json.dumps(d))
            for i, (m, d) in enumerate(parts)
        ],
    )
    line = json.dumps({"type": "step_finish", "part": {"tokens": {"input": 41000, "output": 2400}}})
    return [
        [
            AppendRequest(capture_stream(CELL, 1), 0, [session]),
            AppendRequest(
                ingest_stream(CELL, 1),
                0,
                [
                    ing.LineIngested(
                        source="stdout",
                        path="opencode.jsonl",
                        offset=0,
                        length=len(line),
                        raw=line,
                        kind="step_finish",
                    )
                ],
            ),
        ]
    ]


async def build(home: Path) -> None:
    results = ("resolved", "unresolved", "resolved", "failed", "resolved", "unresolved")
    async with open_store(Home(home), clock=Tick(), create=True) as store:
        specs = [
            (i, _spec(inst, arm))
            for i, (inst, arm) in enumerate((inst, arm) for inst in INSTANCES for arm in ARMS)
        ]
        await store.append_many(
            [AppendRequest(cell_stream(s.cell_id), 0, [ev.CellSubmitted(spec=s)]) for _, s in specs]
        )
        for i, s in specs:
            result = "resolved" if s.cell_id == CELL else results[(i * 7 + i // 5) % 6]
            if i >= len(specs) - 3:
                result = "running" if i % 2 else "pending"
            if result != "pending":
                graded = _graded() if s.cell_id == CELL else None
                await store.append_many(
                    [AppendRequest(cell_stream(s.cell_id), 1, _run(i, result, graded))]
                )
        for batch in _rich():
            await store.append_many(batch)


def main() -> None:
    reason = browser_skip_reason()
    if reason is not None:
        sys.exit(f"scripts/screenshots: {reason}")
    from urllib.parse import quote

    from playwright.sync_api import sync_playwright

    with tempfile.TemporaryDirectory(prefix="arenad-shots-") as tmp:
        home = Path(tmp) / "home"
        asyncio.run(build(home))
        with view_server(home, log=Path(tmp) / "view.log") as server, sync_playwright() as p:
            browser = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
            page = browser.new_context(viewport=SIZE).new_page()
            page.goto(server.signed("/campaigns/demo"))
            page.wait_for_selector("#live-state:text('live')")
            shots = {
                "view-campaign.png": "/campaigns/demo",
                "view-cell.png": "/cells/" + quote(CELL, safe=""),
                "view-report.png": "/report?campaign=demo",
            }
            for name, path in shots.items():
                page.goto(server.at(path))
                page.screenshot(path=DOCS / name)
                print(f"wrote {DOCS / name}")
            browser.close()


if __name__ == "__main__":
    main()
