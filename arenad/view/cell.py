"""One cell's page, as a pure fold of its streams: ``cell/<id>``, and each attempt's
``ingest/<id>/<n>`` and ``capture/<id>/<n>``.

Everything here is data for the page, read from events only (no file, no store, no
clock): the timeline (the audit trail: every event of the cell's stream, and the
ingestion's and captures' own facts), and per attempt its run, verdict, patch (the
``cell.patch-captured`` text), verify log (``cell.verify-log-captured``), spend, the
transcript (the captured opencode sessions, as the ledger reads them) and the ingested
lines. Text the agent produced stays text: it is shortened for the page (the log keeps
it whole) and escaped by the templates, never interpreted.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterable, Sequence
from typing import Any, Literal

import msgspec

from arenad.cell.machine import CellState, fold
from arenad.cell.spend import run_cost
from arenad.gateway.reconcile import gateway_calls, gateway_figures, mismatch
from arenad.readmodels.results import row_of
from arenad.recovery.opencode_transcript import (
    MAX_NESTING,
    ChatMessage,
    NestedTooDeeply,
    capture_chat_messages,
)
from arenad.view.diff import DiffLine, diff_lines
from events import capture as cap
from events import cell as ev
from events import ingest as ing
from events.base import Recorded
from events.streams import attempt_stream_parts, is_cell_stream

__all__ = [
    "EXCERPT_SHOWN",
    "LINES_SHOWN",
    "TEXT_SHOWN",
    "AttemptView",
    "CellView",
    "ExcerptView",
    "GradedTest",
    "GradedTests",
    "IngestedLine",
    "MessageView",
    "SessionView",
    "TimelineRow",
    "ToolCallView",
    "cell_view",
    "excerpt_text",
]

# What one page shows at most; the log (``arenad history --json``) has the rest.
TEXT_SHOWN = 20_000
EXCERPT_SHOWN = 100_000
LINES_SHOWN = 500
# Model calls listed per attempt (the sums count them all).
CALLS_SHOWN = 500
# Graded tests listed per attempt (the counts count them all); the verify log's last lines
# shown first (the whole excerpt the log keeps is a click away); an ingested line's fields.
TESTS_SHOWN = 500
TAIL_LINES = 40
FIELDS_SHOWN = 40
FIELD_SHOWN = 300
LINE_SHOWN = 2_000
SUMMARY_SHOWN = 160

# Fields too big for a timeline row (they have sections of their own).
_BULKY = frozenset({"spec", "patch", "log", "messages", "parts", "row", "content", "raw"})
_SKIPPED = frozenset({"type", "v", "attempt"})


class TimelineRow(msgspec.Struct, frozen=True, kw_only=True):
    seq: int
    at_ms: int
    # "cell", or the per-attempt stream's kind ("ingest", "capture").
    stream: str
    attempt: int | None
    tag: str
    summary: str


class ExcerptView(msgspec.Struct, frozen=True, kw_only=True):
    text: str
    # The text shown was cut further for the page (beyond the log's own bound).
    shortened: bool
    binary: bool
    kept_bytes: int
    size: int
    sha256: str
    cut: Literal["none", "head", "tail"]


class ToolCallView(msgspec.Struct, frozen=True, kw_only=True):
    id: str
    name: str
    arguments: str


class MessageView(msgspec.Struct, frozen=True, kw_only=True):
    role: str
    content: str | None
    reasoning: str | None
    tool_calls: list[ToolCallView]
    # A tool result's call: its name and id.
    tool_name: str | None
    tool_call_id: str | None
    # Characters of content/reasoning the page leaves out.
    shortened: int


class SessionView(msgspec.Struct, frozen=True, kw_only=True):
    session_id: str
    parent_id: str | None
    purpose: str
    directory: str
    messages: list[MessageView]
    unreadable: list[str]


class IngestedLine(msgspec.Struct, frozen=True, kw_only=True):
    seq: int
    source: str
    path: str
    offset: int
    kind: str | None
    text: str
    binary: bool
    partial: bool
    shortened: int
    # A line that was not the JSON it should be: why.
    malformed: str | None
    # A JSON object's fields (dotted paths to compact values), for a table; None: the
    # line is not a JSON object (its text is shown).
    fields: list[tuple[str, str]] | None = None
    fields_omitted: int = 0


class GradedTest(msgspec.Struct, frozen=True, kw_only=True):
    """One graded test: its group (FAIL_TO_PASS, PASS_TO_PASS), its id, and whether it
    came out as the grade needed."""

    group: str
    test: str
    passed: bool


class GradedTests(msgspec.Struct, frozen=True, kw_only=True):
    """The grade's tests (from the judge's verdict document), the first ``TESTS_SHOWN``."""

    rows: list[GradedTest]
    # group -> (passed, failed), over every test.
    counts: dict[str, tuple[int, int]]
    omitted: int


class CallView(msgspec.Struct, frozen=True, kw_only=True):
    """One model call as the gateway recorded it (the agent's words are not in it)."""

    model: str
    # "200", "429", "timeout", "refused: budget"...
    status: str
    tokens_in: int | float | None
    tokens_out: int | float | None
    cost_usd: int | float | None
    latency_ms: int | float | None


class GatewayView(msgspec.Struct, frozen=True, kw_only=True):
    """The attempt's calls through the model gateway (the first ``CALLS_SHOWN``), its sums
    (``arenad.gateway.reconcile``) and the fields where they disagree with the agent's
    store beyond rounding."""

    calls: list[CallView]
    figures: dict[str, Any]
    mismatch: list[str]


class AttemptView(msgspec.Struct, frozen=True, kw_only=True):
    number: int
    started: ev.RunStarted | None
    # How the run ended, one line ("completed rc 0 in 3.2 s"); None while it runs.
    ended: str | None
    wall_s: float | None
    verified: ev.CellVerified | None
    patch: ExcerptView | None
    # Every file of the whole patch with its size in it, listed before the head's lines
    # (None: recorded before the list was kept), and the files past the list, counted.
    patch_files: list[ev.PatchFile] | None
    patch_files_omitted: int
    patch_lines: list[DiffLine]
    verify_log: ExcerptView | None
    verdicts: list[ev.JudgeVerdictRecorded]
    recovered: ev.CellRecovered | None
    supervisor: ev.SupervisorOutcome | None
    cost_usd: float | None
    failed: ev.CellFailed | None
    sessions: list[SessionView]
    # Capture gaps (a store that could not be read, worker cwds without a session).
    gaps: list[str]
    lines: list[IngestedLine]
    lines_total: int
    # None: no call of the attempt went through the model gateway.
    gateway: GatewayView | None = None
    # The newest verdict's graded tests; None: the grade has no such table.
    tests: GradedTests | None = None
    # The verify log's last lines (what decided the grade), and whether that is all of it.
    verify_tail: str | None = None
    verify_tail_whole: bool = True


class CellView(msgspec.Struct, frozen=True, kw_only=True):
    cell_id: str
    campaign: str
    instance_id: str
    arm: str
    arm_kind: str
    rep: int
    state: str
    attempt: int
    paused: bool
    problem_statement: str
    verify_cmd: str
    timeline: list[TimelineRow]
    # Newest first: the current attempt is what one looks for.
    attempts: list[AttemptView]
    # The cell's result (arenad.readmodels.results: the campaign page's word for it) and
    # why, when it says why.
    result: str = "pending"
    why: str | None = None


# --------------------------------------------------------------------------- text


def _decoded(text: str, encoding: str) -> tuple[str, bool]:
    """(text to show, it was not UTF-8): base64 bytes decoded with U+FFFD."""
    if encoding == "base64":
        try:
            raw = base64.b64decode(text)
        except ValueError:
            return text, True
        return raw.decode("utf-8", errors="replace"), True
    return text, False


def excerpt_text(excerpt: ev.TextExcerpt) -> str:
    """The excerpt as text (base64 bytes decoded, U+FFFD for what is not UTF-8)."""
    return _decoded(excerpt.text, excerpt.encoding)[0]


def _shorten(text: str, limit: int) -> tuple[str, int]:
    """(the first ``limit`` characters, how many were left out)."""
    if len(text) <= limit:
        return text, 0
    return text[:limit], len(text) - limit


def _excerpt(excerpt: ev.TextExcerpt, keep: Literal["head", "tail"]) -> ExcerptView:
    text, binary = _decoded(excerpt.text, excerpt.encoding)
    shown = text[:EXCERPT_SHOWN] if keep == "head" else text[-EXCERPT_SHOWN:]
    return ExcerptView(
        text=shown,
        shortened=len(shown) < len(text),
        binary=binary,
        kept_bytes=excerpt.kept_bytes,
        size=excerpt.size,
        sha256=excerpt.sha256,
        cut=excerpt.cut,
    )


# --------------------------------------------------------------------------- timeline


def _value_text(value: Any) -> str:
    if isinstance(value, msgspec.Struct):
        value = {k: v for k, v in msgspec.structs.asdict(value).items() if v is not None}
    return str(value)


def summary(r: Recorded) -> str:
    """One line about an event: what a timeline row says."""
    e = r.event
    match e:
        case ev.CellSubmitted():
            spec = e.spec
            kind = type(spec.arm).__struct_config__.tag
            return (
                f"instance {spec.instance.instance_id}, arm {spec.arm.name} ({kind}),"
                f" rep {spec.rep}, attempt {e.attempt}"
            )
        case ev.PatchCaptured():
            return _excerpt_summary("patch", e.patch)
        case ev.VerifyLogCaptured():
            return _excerpt_summary("verify log", e.log)
        case cap.AgentSessionCaptured():
            return (
                f"session {e.session_id} ({e.purpose}): {len(e.messages)} messages,"
                f" {len(e.parts)} parts"
            )
        case ing.FileSnapshotted():
            return f"{e.source}:{e.path} snapshot, {e.size} bytes"
        case ing.LineIngested() | ing.LineMalformed():
            return f"{e.source}:{e.path} @{e.offset}"
    parts = []
    for key, value in msgspec.structs.asdict(e).items():
        if key in _SKIPPED or key in _BULKY or value is None or value == [] or value == {}:
            continue
        parts.append(f"{key}={_value_text(value)}")
    return _shorten(", ".join(parts), SUMMARY_SHOWN)[0]


def _excerpt_summary(what: str, x: ev.TextExcerpt) -> str:
    kept = "all" if x.cut == "none" else f"its {x.cut} ({x.kept_bytes} bytes)"
    return f"{what}: {x.size} bytes, sha256 {x.sha256[:12]}, kept {kept}"


def _row(r: Recorded, stream: str) -> TimelineRow:
    return TimelineRow(
        seq=r.seq,
        at_ms=r.recorded_at_ms,
        stream=stream,
        attempt=getattr(r.event, "attempt", None),
        tag=r.tag,
        summary=summary(r),
    )


# --------------------------------------------------------------------------- transcript


def _arguments(raw: object) -> str:
    """A call's arguments (JSON text) pretty-printed; as they are when not JSON."""
    text = raw if isinstance(raw, str) else json.dumps(raw)
    try:
        return json.dumps(json.loads(text), indent=2, ensure_ascii=False)
    except ValueError:
        return text


def _message(m: ChatMessage) -> MessageView:
    content = m.get("content")
    content = content if isinstance(content, str) else None if content is None else str(content)
    reasoning = m.get("reasoning_content")
    reasoning = reasoning if isinstance(reasoning, str) else None
    shortened = 0
    if content is not None:
        content, cut = _shorten(content, TEXT_SHOWN)
        shortened += cut
    if reasoning is not None:
        reasoning, cut = _shorten(reasoning, TEXT_SHOWN)
        shortened += cut
    calls = []
    for call in m.get("tool_calls") or []:
        function = call.get("function") or {}
        arguments, cut = _shorten(_arguments(function.get("arguments")), TEXT_SHOWN)
        shortened += cut
        calls.append(
            ToolCallView(
                id=str(call.get("id")), name=str(function.get("name")), arguments=arguments
            )
        )
    role = m.get("role")
    return MessageView(
        role=str(role),
        content=content,
        reasoning=reasoning,
        tool_calls=calls,
        tool_name=str(m["name"]) if role == "tool" and "name" in m else None,
        tool_call_id=str(m["tool_call_id"]) if "tool_call_id" in m else None,
        shortened=shortened,
    )


def _session(c: cap.AgentSessionCaptured) -> SessionView:
    unreadable = list(c.unreadable)
    try:
        messages = [_message(m) for m in capture_chat_messages(c)]
    except NestedTooDeeply:
        messages = []
        unreadable.append(f"a tool part nested more than {MAX_NESTING} deep (none shown)")
    return SessionView(
        session_id=c.session_id,
        parent_id=c.parent_id,
        purpose=c.purpose,
        directory=c.directory,
        messages=messages,
        unreadable=unreadable,
    )


# --------------------------------------------------------------------------- ingested lines


def _number(v: object) -> int | float | None:
    return v if isinstance(v, int | float) and not isinstance(v, bool) else None


def _call(call: dict[str, Any]) -> CallView:
    request = call.get("request")
    model = request.get("model") if isinstance(request, dict) else None
    upstream = call.get("upstream")
    upstream = upstream if isinstance(upstream, dict) else {}
    if call.get("refused"):
        status = f"refused: {call['refused']}"
    elif upstream.get("status") is not None:
        status = str(upstream["status"])
    else:
        status = str(upstream.get("error") or "-")
    usage = call.get("usage")
    usage = usage if isinstance(usage, dict) else {}
    return CallView(
        model=model if isinstance(model, str) else "-",
        status=status,
        tokens_in=_number(usage.get("input")),
        tokens_out=_number(usage.get("output")),
        cost_usd=_number(call.get("cost_usd")),
        latency_ms=_number(call.get("latency_ms")),
    )


def _flatten(value: object, path: str, out: list[tuple[str, str]]) -> None:
    """A JSON value's leaves as (dotted path, compact JSON) pairs, objects opened, lists
    and everything past ``FIELDS_SHOWN`` pairs left whole (counted by the caller)."""
    if isinstance(value, dict) and value:
        for key, inner in value.items():
            _flatten(inner, f"{path}.{key}" if path else str(key), out)
        return
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    out.append((path or "(value)", _shorten(text, FIELD_SHOWN)[0]))


def _fields(text: str) -> tuple[list[tuple[str, str]] | None, int]:
    try:
        doc = json.loads(text)
    except ValueError:
        return None, 0
    if not isinstance(doc, dict):
        return None, 0
    pairs: list[tuple[str, str]] = []
    try:
        _flatten(doc, "", pairs)
    except RecursionError:
        return None, 0
    return pairs[:FIELDS_SHOWN], max(0, len(pairs) - FIELDS_SHOWN)


def _line(r: Recorded, e: ing.LineIngested | ing.LineMalformed) -> IngestedLine:
    text, binary = _decoded(e.raw, e.encoding)
    fields, omitted = (None, 0) if isinstance(e, ing.LineMalformed) else _fields(text)
    text, shortened = _shorten(text, LINE_SHOWN)
    return IngestedLine(
        fields=fields,
        fields_omitted=omitted,
        seq=r.seq,
        source=e.source,
        path=e.path,
        offset=e.offset,
        kind=e.kind if isinstance(e, ing.LineIngested) else None,
        text=text,
        binary=binary,
        partial=e.partial,
        shortened=shortened,
        malformed=e.error if isinstance(e, ing.LineMalformed) else None,
    )


# --------------------------------------------------------------------------- the verdict


def _tests(verdict: ev.JudgeVerdictRecorded) -> GradedTests | None:
    """The FAIL_TO_PASS / PASS_TO_PASS table of a verdict document that has one (the
    swebench grade's ``report.tests_status``); None for any other document."""
    try:
        doc = json.loads(verdict.verdict_json)
    except (ValueError, RecursionError):
        return None
    report = doc.get("report") if isinstance(doc, dict) else None
    status = report.get("tests_status") if isinstance(report, dict) else None
    if not isinstance(status, dict):
        return None
    rows: list[GradedTest] = []
    counts: dict[str, tuple[int, int]] = {}
    for group in ("FAIL_TO_PASS", "PASS_TO_PASS"):
        found = status.get(group)
        if not isinstance(found, dict):
            continue
        passed = [str(t) for t in found.get("success") or [] if isinstance(t, str)]
        failed = [str(t) for t in found.get("failure") or [] if isinstance(t, str)]
        counts[group] = (len(passed), len(failed))
        # Failures first: what one looks for.
        rows += [GradedTest(group=group, test=t, passed=False) for t in failed]
        rows += [GradedTest(group=group, test=t, passed=True) for t in passed]
    if not counts:
        return None
    return GradedTests(
        rows=rows[:TESTS_SHOWN], counts=counts, omitted=max(0, len(rows) - TESTS_SHOWN)
    )


def _tail(log: ev.TextExcerpt | None) -> dict[str, Any]:
    if log is None:
        return {}
    lines = excerpt_text(log).splitlines()
    return {
        "verify_tail": "\n".join(lines[-TAIL_LINES:]),
        "verify_tail_whole": len(lines) <= TAIL_LINES,
    }


# --------------------------------------------------------------------------- the fold


class _Attempt:
    def __init__(self, number: int) -> None:
        self.number = number
        self.started: ev.RunStarted | None = None
        self.ended: str | None = None
        self.wall_s: float | None = None
        self.verified: ev.CellVerified | None = None
        self.patch: ev.TextExcerpt | None = None
        self.patch_files: list[ev.PatchFile] | None = None
        self.patch_files_omitted = 0
        self.verify_log: ev.TextExcerpt | None = None
        self.verdicts: list[ev.JudgeVerdictRecorded] = []
        self.recovered: ev.CellRecovered | None = None
        self.supervisor: ev.SupervisorOutcome | None = None
        self.failed: ev.CellFailed | None = None
        self.sessions: list[SessionView] = []
        self.gaps: list[str] = []
        self.lines: list[IngestedLine] = []
        self.lines_total = 0
        self.ingested: list[Recorded] = []

    def on_cell(self, e: object) -> None:
        match e:
            case ev.RunStarted():
                self.started = e
            case ev.RunCompleted():
                self.ended, self.wall_s = f"completed, rc {e.rc}", e.wall_s
            case ev.RunTimedOut():
                self.ended, self.wall_s = f"timed out, rc {e.rc}", e.wall_s
            case ev.RunAborted():
                self.ended, self.wall_s = f"aborted ({e.reason}), rc {e.rc}", e.wall_s
            case ev.CellVerified():
                self.verified = e
            case ev.PatchCaptured():
                self.patch = e.patch
                self.patch_files, self.patch_files_omitted = e.files, e.files_omitted
            case ev.VerifyLogCaptured():
                self.verify_log = e.log
            case ev.JudgeVerdictRecorded():
                self.verdicts.append(e)
            case ev.CellRecovered():
                self.recovered = e
            case ev.SupervisorOutcome():
                self.supervisor = e
            case ev.CellFailed():
                self.failed = e

    def on_capture(self, e: object) -> None:
        match e:
            case cap.AgentSessionCaptured():
                self.sessions.append(_session(e))
            case cap.AgentStoreUnavailable():
                self.gaps.append(f"the agent's store {e.store_path} could not be read: {e.error}")
            case cap.WorkerCwdUnmatched():
                self.gaps.append(f"no session for the worker directory {e.cwd}")

    def on_ingest(self, r: Recorded) -> bool:
        """Take an ingested line; False for the ingestion's other facts (timeline rows)."""
        e = r.event
        if not isinstance(e, ing.LineIngested | ing.LineMalformed):
            return False
        self.lines_total += 1
        if isinstance(e, ing.LineIngested) and e.source == "gateway":
            self.ingested.append(r)
        if len(self.lines) < LINES_SHOWN:
            self.lines.append(_line(r, e))
        return True

    def view(self, kind: str) -> AttemptView:
        cost = run_cost(kind, self.recovered, self.supervisor) if self.started is not None else None
        patch = _excerpt(self.patch, "head") if self.patch is not None else None
        return AttemptView(
            number=self.number,
            started=self.started,
            ended=self.ended,
            wall_s=self.wall_s,
            verified=self.verified,
            patch=patch,
            patch_files=self.patch_files,
            patch_files_omitted=self.patch_files_omitted,
            patch_lines=diff_lines(patch.text) if patch is not None else [],
            verify_log=_excerpt(self.verify_log, "tail") if self.verify_log else None,
            verdicts=self.verdicts,
            recovered=self.recovered,
            supervisor=self.supervisor,
            cost_usd=cost,
            failed=self.failed,
            sessions=self.sessions,
            gaps=self.gaps,
            lines=self.lines,
            lines_total=self.lines_total,
            gateway=self._gateway(),
            tests=_tests(self.verdicts[-1]) if self.verdicts else None,
            **_tail(self.verify_log),
        )

    def _gateway(self) -> GatewayView | None:
        calls = gateway_calls(self.ingested)
        if not calls:
            return None
        figures = gateway_figures(calls)
        s = self.recovered.spend if self.recovered is not None else None
        agent = (
            {
                "usd": s.cost_usd,
                "tokens_in": s.tokens_in,
                "tokens_out": s.tokens_out,
                "tokens_reasoning": s.tokens_reasoning,
                "cache_read": s.cache_read,
                "cache_write": s.cache_write,
            }
            if s is not None
            else {}
        )
        return GatewayView(
            calls=[_call(c) for c in calls[:CALLS_SHOWN]],
            figures=figures,
            mismatch=mismatch(agent, figures),
        )


def cell_view(records: Iterable[Recorded]) -> CellView | None:
    """The page of the cell whose streams ``records`` are (in any order); None when they
    hold no cell stream."""
    ordered = sorted(records, key=lambda r: r.seq)
    cell_records = [r for r in ordered if is_cell_stream(r.stream)]
    state = fold(cell_records)
    if state is None:
        return None
    attempts: dict[int, _Attempt] = {}

    def attempt(n: int) -> _Attempt:
        if n not in attempts:
            attempts[n] = _Attempt(n)
        return attempts[n]

    timeline: list[TimelineRow] = []
    for r in ordered:
        e = r.event
        if is_cell_stream(r.stream):
            timeline.append(_row(r, "cell"))
            number = getattr(e, "attempt", None)
            if isinstance(number, int):
                attempt(number).on_cell(e)
            continue
        parts = attempt_stream_parts(r.stream)
        if parts is None:
            continue
        kind, _, number = parts
        if kind == "ingest":
            if not attempt(number).on_ingest(r):
                timeline.append(_row(r, "ingest"))
        else:
            attempt(number).on_capture(e)
            timeline.append(_row(r, "capture"))
    return _view(state, timeline, attempts)


def _view(
    state: CellState, timeline: Sequence[TimelineRow], attempts: dict[int, _Attempt]
) -> CellView:
    spec = state.spec
    kind = type(spec.arm).__struct_config__.tag
    kind = kind if isinstance(kind, str) else ""
    return CellView(
        cell_id=state.cell_id,
        campaign=spec.campaign,
        instance_id=spec.instance.instance_id,
        arm=spec.arm.name,
        arm_kind=kind,
        rep=spec.rep,
        state=str(state.status),
        attempt=state.attempt,
        paused=state.paused,
        problem_statement=_shorten(spec.instance.problem_statement, TEXT_SHOWN)[0],
        verify_cmd=spec.instance.verify_cmd,
        timeline=list(timeline),
        attempts=[attempts[n].view(kind) for n in sorted(attempts, reverse=True)],
        result=(row := row_of(state)).result,
        why=row.why,
    )
