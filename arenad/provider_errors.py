"""The error types a model provider's wire names for each HTTP status, in one table that the
gateway (:mod:`arenad.gateway.protocols`, its own answers in Anthropic's shape) and the
scripted model (:mod:`arenad.scripted_model.messages`, a stand-in provider) both read, so
the two cannot drift apart. Pure data, no imports: either may depend on it without an
upward arrow.

Anthropic's table, as its API documents its errors (``{"type": "error", "error": {"type":
…, "message": …}}``); any other status is ``api_error``:

====== =========================
status ``error.type``
====== =========================
400    ``invalid_request_error``
401    ``authentication_error``
402    ``billing_error``
403    ``permission_error``
404    ``not_found_error``
413    ``request_too_large``
429    ``rate_limit_error``
500    ``api_error``
504    ``timeout_error``
529    ``overloaded_error`` (the API is overloaded for everyone; not a rate limit)
====== =========================
"""

from __future__ import annotations

ANTHROPIC_ERROR_TYPES: dict[int, str] = {
    400: "invalid_request_error",
    401: "authentication_error",
    402: "billing_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    504: "timeout_error",
    529: "overloaded_error",
}


def anthropic_error_type(status: int) -> str:
    """The ``error.type`` Anthropic gives ``status`` (``api_error`` when it names none)."""
    return ANTHROPIC_ERROR_TYPES.get(status, "api_error")
