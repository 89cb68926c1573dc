"""Captures of what agents stored, taken when it happened so projections never
read an agent store or a file (stream ``capture/<cell_id>/<attempt>``)."""

from __future__ import annotations

from typing import Any, Literal

import msgspec

from events.base import Event


class MessageRow(msgspec.Struct, frozen=True, kw_only=True):
    id: str
    time_created: int
    # message.data verbatim (JSON text), or cut when longer than the capture's bound
    # (arenad.recovery.capture_bounds): then ``size`` and ``sha256`` are the whole data's.
    data: str
    size: int | None = None
    sha256: str | None = None


class PartRow(msgspec.Struct, frozen=True, kw_only=True):
    id: str
    message_id: str
    # part.data verbatim (JSON text), or cut as MessageRow.data is.
    data: str
    size: int | None = None
    sha256: str | None = None


class SessionTranscript(msgspec.Struct, frozen=True, kw_only=True):
    """A session's ledger messages, folded from its rows when it was captured (by
    ``arenad.recovery.opencode_transcript``), so a projection copies them instead of
    folding every row again. Derived, never the only record: the rows are kept beside it,
    and a projection whose rules are not ``rules`` folds the rows itself."""

    rules: int
    # The messages as the compact JSON array a ledger line carries ([] with a gap).
    messages: msgspec.Raw
    # Why the session cannot be a line's transcript (a tool name that is not a string,
    # a tool input or output nested too deep to write).
    gap: str | None = None


class AgentSessionCaptured(Event, tag="capture.opencode-session", frozen=True, kw_only=True):
    """One opencode session row with its messages and parts, read from the cell's store."""

    attempt: int
    # Why it was captured: the solo run's tree, or a supervisor worker cwd's session.
    purpose: Literal["solo", "worker", "command"]
    store_path: str
    session_id: str
    parent_id: str | None
    directory: str
    # Every column of the session row, verbatim.
    row: dict[str, Any]
    messages: list[MessageRow]
    parts: list[PartRow]
    # Parts/messages the reader could not read (a store integrity gap, kept visible).
    unreadable: list[str] = msgspec.field(default_factory=list)
    # The fold of messages and parts; None in captures recorded before it was kept.
    transcript: SessionTranscript | None = None
    # What the capture's bounds left out (arenad.recovery.capture_bounds): messages and
    # parts past the session's or the attempt's budget, counted with their data's bytes.
    omitted_messages: int = 0
    omitted_parts: int = 0
    omitted_bytes: int = 0
    # What was kept cut: row values (column, size, sha256); cut rows carry their own.
    cut: list[str] = msgspec.field(default_factory=list)


class AgentStoreUnavailable(Event, tag="capture.store-unavailable", frozen=True, kw_only=True):
    """The store could not be read: a labeled gap, never zeros."""

    attempt: int
    store_path: str
    error: str


class WorkerCwdUnmatched(Event, tag="capture.worker-cwd-unmatched", frozen=True, kw_only=True):
    """A worker cwd with no session row in the store (a join failure, recorded)."""

    attempt: int
    cwd: str


class ProposerShotCaptured(Event, tag="capture.proposer-shot", frozen=True, kw_only=True):
    """A proposer shot receipt file (stream ``proposer/shot/<path under proposer-shots>``),
    captured each time its content changes; the latest capture of a stream is the receipt."""

    path: str
    author: str | None
    generation: int
    candidate_index: int
    shot: int
    # The receipt file verbatim (JSON text), or None with the error when unreadable.
    # Content that is not a receipt (not JSON, no receipt object) is kept with the error.
    content: str | None
    error: str | None = None
    # sha256 (hex) of the file's bytes; None when they could not be read.
    sha256: str | None = None
    size: int | None = None
    # The worktree the shot ran in (its Claude Code cwd), resolved when captured.
    worktree: str | None = None


class ClaudeTranscriptCaptured(Event, tag="capture.claude-transcript", frozen=True, kw_only=True):
    """A Claude Code transcript of a proposer worktree, verbatim (stream
    ``proposer/transcript/<project slug>/<file>``); re-captured when its content changed."""

    cwd: str
    path: str
    session_id: str
    content: str
    # sha256 (hex) of the file's bytes (content is their UTF-8 decoding, U+FFFD for bad bytes).
    sha256: str | None = None
    size: int | None = None
