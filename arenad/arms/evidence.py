"""Why a run failed, from its evidence: an outage is not the agent's loss.

A run that ended without a single completed model step, and whose stream or stderr shows
the model provider failing it (unreachable, refusing the credentials, rate limiting, a 5xx),
never gave the agent a chance: it is an infrastructure failure, retried under the infra
policy and counted apart from the agent's failures. Anything less certain stays the agent's
(as it was before): a completed step means the agent had its turn, and output in a format
this module does not know says nothing about steps.

Shapes read (opencode 1.18 ``run --format json``): after its own retries (about 70 s for a
retryable error) opencode prints one line
``{"type":"error","error":{"name":"APIError","data":{"message":…,"statusCode":…}}}`` and
exits 1, with stderr empty; ``name`` may also be ``ProviderAuthError``. An unreachable
endpoint has no ``statusCode`` and a message like "Cannot connect to API: Unable to
connect…". Completed steps show as ``step_finish`` (and ``text`` / ``tool_use``) lines.

Pure: parsed stream objects and stderr text in, a one-line cause (or None) out.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

import msgspec

# opencode's stream "type"s: a stream of these is one whose steps can be counted.
OPENCODE_TYPES = frozenset({"step_start", "step_finish", "text", "tool_use", "reasoning", "error"})
# A model step that completed (the agent had its turn).
COMPLETED_TYPES = frozenset({"step_finish", "text", "tool_use"})
CAUSE_CHARS = 300

_UNREACHABLE = re.compile(
    r"cannot connect to api|unable to connect|econnrefused|econnreset|enotfound|eai_again"
    r"|connection refused|connection reset|could not resolve host|getaddrinfo|fetch failed"
    r"|network is unreachable|no route to host",
    re.IGNORECASE,
)
_AUTH = re.compile(
    r"providerautherror|invalid[ _-]?api[ _-]?key|incorrect api key|authentication[ _]error"
    r"|\b401\b.*unauthori[sz]ed|unauthori[sz]ed.*\b401\b|\b403\b.*forbidden",
    re.IGNORECASE,
)
_SERVER = re.compile(
    r"\b(?:http|status(?: code)?)[ :]*5\d\d\b|\b5\d\d\b.*(?:internal server error|bad gateway"
    r"|service unavailable|gateway timeout|server_error|overloaded)",
    re.IGNORECASE,
)


class InfraCause(msgspec.Struct, frozen=True, kw_only=True):
    """A provider failure that ended the run before any model step completed."""

    # One line, from the evidence ("provider unreachable: Cannot connect to API: …").
    cause: str


def _line(text: str) -> str:
    one = " ".join(text.split())
    return one if len(one) <= CAUSE_CHARS else one[: CAUSE_CHARS - 1] + "…"


def _from_error(error: Mapping[str, Any]) -> str | None:
    """The cause an opencode ``error`` object names, if it is the provider's."""
    name = str(error.get("name") or "")
    data = error.get("data")
    data = data if isinstance(data, dict) else {}
    message = str(data.get("message") or name or "error")
    status = data.get("statusCode")
    code = status if isinstance(status, int) and not isinstance(status, bool) else None
    url = data.get("metadata", {}).get("url") if isinstance(data.get("metadata"), dict) else None
    if name == "ProviderAuthError" or code in (401, 403):
        http = f" (HTTP {code})" if code is not None else ""
        return f"provider refused the credentials{http}: {message}"
    if code == 429:
        return f"provider rate limit (HTTP 429): {message}"
    if code is not None and 500 <= code <= 599:
        return f"provider error (HTTP {code}): {message}"
    if code is None and _UNREACHABLE.search(message):
        at = f" ({url})" if isinstance(url, str) and url else ""
        return f"provider unreachable{at}: {message}"
    return None


def _from_stderr(stderr: str) -> str | None:
    """The last stderr line that names a provider failure."""
    for raw in reversed(stderr.splitlines()):
        line = raw.strip()
        if not line:
            continue
        if _AUTH.search(line):
            return f"provider refused the credentials: {line}"
        if _UNREACHABLE.search(line):
            return f"provider unreachable: {line}"
        if _SERVER.search(line):
            return f"provider error: {line}"
    return None


def infra_cause(stream: Iterable[Any], stderr: str) -> InfraCause | None:
    """The infrastructure cause of a failed run, or None when it stays the agent's.

    ``stream``: the run's stdout, parsed line by line (non-objects are kept: they mark a
    format this module does not read); ``stderr``: the tail of its stderr."""
    known = False
    unknown = False
    cause: str | None = None
    for obj in stream:
        kind = obj.get("type") if isinstance(obj, dict) else None
        if kind not in OPENCODE_TYPES:
            unknown = True
            continue
        known = True
        if kind in COMPLETED_TYPES:
            return None
        error = obj.get("error")
        if kind == "error" and isinstance(error, dict):
            cause = _from_error(error) or cause
    if cause is None and (known or not unknown):
        # stderr counts only where the stream says no step completed (or says nothing).
        cause = _from_stderr(stderr)
    return InfraCause(cause=_line(cause)) if cause is not None else None
