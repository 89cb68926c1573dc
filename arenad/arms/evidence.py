"""Why a run failed, from the provider's evidence: an outage is not the agent's loss.

A run that ended without a single completed model step, and whose opencode stream holds a
*structured* error event naming the model provider (unreachable, refusing the credentials,
rate limiting, a 5xx), never gave the agent a chance: it is an infrastructure failure,
retried under the infra policy and counted apart from the agent's failures. Anything less
certain stays the agent's: a completed step means the agent had its turn.

The agent's own words are never evidence. stderr is not read at all: an agent (or any
process it starts) writes there what it likes, and ``Error: connect ECONNREFUSED
127.0.0.1:443`` printed by a command that then exits 1 is that command's failure, not the
provider's. An arm with ``uses_model = false`` has no provider to blame, so its failures
are always its own (``arenad.arms.command``); a supervisor's driver has no structured
stream of its model calls, so its failures are its own unless the model gateway's records
of its workers' (and its own) calls say otherwise (:func:`gateway_cause`).

Shapes read (opencode 1.18 ``run --format json``): after its own retries (about 70 s for a
retryable error) opencode prints one line
``{"type":"error","error":{"name":"APIError","data":{"message":…,"statusCode":…}}}`` and
exits 1, with stderr empty; ``name`` may also be ``ProviderAuthError``. An unreachable
endpoint has no ``statusCode`` and a message like "Cannot connect to API: Unable to
connect…". Completed steps show as ``step_finish`` (and ``text`` / ``tool_use``) lines.

Pure: parsed stream objects in, a one-line cause (or None) out.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from typing import Any

import msgspec

from arenad.gateway.reconcile import answered

# A model step that completed (the agent had its turn).
COMPLETED_TYPES = frozenset({"step_finish", "text", "tool_use"})
CAUSE_CHARS = 300

_UNREACHABLE = re.compile(
    r"cannot connect to api|unable to connect|econnrefused|econnreset|enotfound|eai_again"
    r"|connection refused|connection reset|could not resolve host|getaddrinfo|fetch failed"
    r"|network is unreachable|no route to host",
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


def infra_cause(stream: Iterable[Any]) -> InfraCause | None:
    """The infrastructure cause of a failed run, or None when it stays the agent's.

    ``stream``: the run's opencode stdout, parsed line by line (lines that are not objects
    of its format are passed over). Only its structured ``error`` events are evidence."""
    cause: str | None = None
    for obj in stream:
        kind = obj.get("type") if isinstance(obj, dict) else None
        if kind in COMPLETED_TYPES:
            return None
        error = obj.get("error") if isinstance(obj, dict) else None
        if kind == "error" and isinstance(error, dict):
            cause = _from_error(error) or cause
    return InfraCause(cause=_line(cause)) if cause is not None else None


def _upstream_message(call: Mapping[str, Any], fallback: str) -> str:
    """The upstream's own error message (its JSON body's ``error.message``), if it gave one."""
    body = call.get("upstream_body")
    if isinstance(body, str):
        try:
            parsed = json.loads(body)
        except ValueError:
            parsed = None
        error = parsed.get("error") if isinstance(parsed, dict) else None
        if isinstance(error, dict) and isinstance(error.get("message"), str):
            return str(error["message"])
        if isinstance(error, str):
            return error
    return fallback


def _call_cause(call: Mapping[str, Any]) -> str | None:
    """What one gateway record says failed upstream (None: the call was answered, or its
    failure was the request's own, a 4xx other than 401/403/429). ``upstream.error`` is
    the gateway's evidence (arenad.gateway.server): ``upstream <n>`` for an error status,
    ``timeout`` / ``refused: …`` when no answer came, and beside a 200 ``upstream error in
    its stream: …``, ``timeout mid-answer``, ``cut mid-answer: …`` or ``stream ended
    before its end event``."""
    if answered(call):
        return None
    upstream = call.get("upstream")
    upstream = upstream if isinstance(upstream, dict) else {}
    status = upstream.get("status")
    error = upstream.get("error")
    code = status if isinstance(status, int) and not isinstance(status, bool) else None
    if code is not None and code < 400:
        # Not answered despite a success status (reconcile.answered, the one rule): its
        # stream carried the provider's error event, timed out or was cut before its end.
        return f"provider failed mid-answer (HTTP {code}): {error}"
    if code in (401, 403):
        message = _upstream_message(call, "unauthorized")
        return f"provider refused the credentials (HTTP {code}): {message}"
    if code == 429:
        return f"provider rate limit (HTTP 429): {_upstream_message(call, 'rate limited')}"
    if code is not None and code >= 500:
        return f"provider error (HTTP {code}): {_upstream_message(call, 'server error')}"
    if code is None and isinstance(error, str):
        url = str(call.get("upstream_url") or call.get("upstream_name") or "")
        return f"provider unreachable ({url}): {error}" if url else f"provider {error}"
    return None


def gateway_cause(calls: Iterable[Any]) -> InfraCause | None:
    """The infrastructure cause of a failed run from the model gateway's records of its
    calls (arenad.gateway; the agent cannot write them): every call failed upstream (a 429,
    a 5xx, refused credentials, a timeout, a refused connection, or a 200 whose stream
    carried an error event, timed out or ended early) and none was answered whole; the
    cause is the last call's. None when a call was answered, one was refused by the
    attempt's own spend cap, one failed as the request's own fault, or there were none."""
    cause: str | None = None
    for call in calls:
        if not isinstance(call, dict) or call.get("type") != "gateway.call":
            continue
        if call.get("refused"):
            return None
        cause = _call_cause(call)
        if cause is None:
            return None
    return InfraCause(cause=_line(cause)) if cause is not None else None


def budget_stop(calls: Iterable[Any]) -> str | None:
    """Why the attempt was stopped at a spend cap, from the gateway's record of the first
    call it refused (``refused = "budget"``; the agent cannot write these records, so its
    own words never decide it): ``budget: <the gateway's reason>``. None when no call was
    refused at a cap."""
    for call in calls:
        if not isinstance(call, dict) or call.get("type") != "gateway.call":
            continue
        if call.get("refused") == "budget":
            reason = call.get("reason")
            said = reason if isinstance(reason, str) and reason else "a spend cap is reached"
            return _line(f"budget: {said} at the gateway")
    return None
