"""One Anthropic status -> error-type table: the gateway's answers and the scripted model's
agree with each other and with Anthropic's documented types (issue 31)."""

from __future__ import annotations

import json

from arenad.gateway.protocols import anthropic_error
from arenad.provider_errors import ANTHROPIC_ERROR_TYPES, anthropic_error_type
from arenad.scripted_model.messages import error_body

DOCUMENTED = {
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


def test_the_table_is_anthropics_documented_one() -> None:
    assert ANTHROPIC_ERROR_TYPES == DOCUMENTED
    assert anthropic_error_type(503) == "api_error"


def test_the_gateway_and_the_scripted_model_type_every_status_alike() -> None:
    for status in [*DOCUMENTED, 502, 503]:
        gateway = json.loads(anthropic_error(status, "m", "code"))
        fake = error_body(status, "m")
        assert (
            gateway
            == fake
            == {
                "type": "error",
                "error": {"type": anthropic_error_type(status), "message": "m"},
            }
        )
