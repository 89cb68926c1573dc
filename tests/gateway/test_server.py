"""The gateway process against the real scripted model: forwarding, records, caps, errors."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from arenad.arms.evidence import gateway_cause
from arenad.gateway import grants, paths, process
from arenad.gateway.cell import attempt_grant
from arenad.scripted_model import wire
from tests.events.samples import make_spec
from tests.gateway.support import (
    SCRIPT,
    UPSTREAM_KEY,
    chat,
    grant_for,
    journal,
    post,
    sse_data,
    start_gateway,
)
from tests.opencode_support import RunningModel


@pytest.fixture
def home(tmp_path: Path) -> Iterator[Path]:
    yield tmp_path / "home"
    process.stop(tmp_path / "home")


def test_chat_non_stream_is_forwarded_and_recorded(
    home: Path, scripted_model: Callable[[str], RunningModel]
) -> None:
    model = scripted_model(SCRIPT)
    gw = start_gateway(home)
    token = grant_for(home, model.base_url)
    status, body = chat(gw.port, token, [{"role": "user", "content": "hello"}])
    assert status == 200, body
    answer = json.loads(body)
    assert answer["choices"][0]["message"]["content"].startswith("Hi there")
    # The upstream saw its own key, never the attempt's token.
    assert model.authorizations == [f"Bearer {UPSTREAM_KEY}"]
    [line] = journal(home)
    assert line["cell_id"] == "c1" and line["attempt"] == 1
    assert line["upstream"] == {"status": 200, "error": None}
    assert line["usage"] == {
        "input": 800,
        "output": 43,
        "reasoning": 7,
        "cache_read": 200,
        "cache_write": 0,
    }
    # opencode's own arithmetic (facts/opencode.md §2.4): 0.00321.
    assert line["cost_usd"] == pytest.approx(0.00321)
    assert line["request"]["new_messages"] == [{"role": "user", "content": "hello"}]
    assert line["response"]["content"].startswith("Hi there")
    assert line["response"]["finish_reason"] == "stop"


def test_an_unpriced_call_records_why_its_cost_is_unknown(
    home: Path, scripted_model: Callable[[str], RunningModel]
) -> None:
    """A null cost_usd is labeled (``unpriced``): the grant's reason, else the generic one;
    a priced call carries no label (issue 31)."""
    model = scripted_model(SCRIPT)
    gw = start_gateway(home)
    why = "the command arm names no model (its `model` key), so no price applies"
    token = grant_for(home, model.base_url, prices={"other": grants.Price()}, unpriced_reason=why)
    assert chat(gw.port, token, [{"role": "user", "content": "hello"}])[0] == 200
    token2 = grant_for(home, model.base_url, attempt=2, prices={"other": grants.Price()})
    assert chat(gw.port, token2, [{"role": "user", "content": "hello"}])[0] == 200
    token3 = grant_for(home, model.base_url, attempt=3)
    assert chat(gw.port, token3, [{"role": "user", "content": "hello"}])[0] == 200
    [first], [second], [third] = (journal(home, attempt=n) for n in (1, 2, 3))
    assert (first["cost_usd"], first["priced"], first["unpriced"]) == (None, False, why)
    assert second["cost_usd"] is None
    assert second["unpriced"] == "no price for model 'm' in the price table"
    assert third["priced"] and third["cost_usd"] is not None and "unpriced" not in third


def test_stream_relayed_and_only_new_messages_recorded(
    home: Path, scripted_model: Callable[[str], RunningModel]
) -> None:
    model = scripted_model(SCRIPT)
    gw = start_gateway(home)
    token = grant_for(home, model.base_url)
    first = [{"role": "user", "content": "hello"}]
    status, body = chat(gw.port, token, first, stream=True)
    assert status == 200
    assert body.rstrip().endswith(b"data: [DONE]")
    text = "".join(
        json.loads(line[6:])["choices"][0]["delta"].get("content") or ""
        for line in body.decode().splitlines()
        if line.startswith("data: {") and json.loads(line[6:])["choices"]
    )
    assert text == "Hi there, this is a longer streamed answer."
    second = [*first, {"role": "assistant", "content": text}, {"role": "user", "content": "more"}]
    status, _ = chat(gw.port, token, second, stream=True)
    assert status == 200
    one, two = journal(home)
    assert one["response"]["content"] == text
    assert two["response"]["content"] == "Second answer."
    assert two["request"]["prefix_len"] == 1
    assert two["request"]["prefix_hash"] == one["request"]["prompt_hash"]
    assert two["request"]["new_messages"] == second[1:]
    assert two["usage"]["input"] == 800


def test_unknown_token_is_refused_and_nothing_forwarded(
    home: Path, scripted_model: Callable[[str], RunningModel]
) -> None:
    model = scripted_model(SCRIPT)
    gw = start_gateway(home)
    token = grant_for(home, model.base_url)
    grants.revoke(home, token)
    status, _ = chat(gw.port, token, [{"role": "user", "content": "hello"}])
    assert status == 401
    assert model.requests == []


def test_max_usd_refuses_the_next_call_as_a_provider_would(
    home: Path, scripted_model: Callable[[str], RunningModel]
) -> None:
    model = scripted_model(SCRIPT)
    gw = start_gateway(home)
    token = grant_for(home, model.base_url, max_usd=0.005)
    messages: list[dict[str, Any]] = [{"role": "user", "content": "hello"}]
    statuses = [chat(gw.port, token, messages)[0] for _ in range(3)]
    # 0.00321 spent after one call (< cap); 0.00642 after two (>= cap): the third is refused.
    assert statuses == [200, 200, 402]
    lines = journal(home)
    assert [line.get("refused") for line in lines] == [None, None, "budget"]
    spent = sum(line["cost_usd"] or 0 for line in lines)
    assert spent <= 0.005 + 0.00321 + 1e-12
    assert len(model.requests) == 2


def test_the_campaigns_cap_holds_across_its_attempts_at_the_wire(
    home: Path, scripted_model: Callable[[str], RunningModel]
) -> None:
    # The campaign had spent 0.004 of 0.01 when both attempts started; every call of
    # either counts against the rest: the second call of the second attempt is refused.
    model = scripted_model(SCRIPT)
    gw = start_gateway(home)
    caps: dict[str, Any] = {"campaign_max_usd": 0.01, "campaign_spent_usd": 0.004}
    first = grant_for(home, model.base_url, cell="c1", **caps)
    second = grant_for(home, model.base_url, cell="c2", **caps)
    messages: list[dict[str, Any]] = [{"role": "user", "content": "hello"}]
    statuses = [chat(gw.port, token, messages)[0] for token in (first, second, second)]
    # 0.004 + 0.00321 < 0.01; + 0.00321 = 0.01042 >= 0.01: the third call is refused.
    assert statuses == [200, 200, 402]
    assert [line.get("refused") for line in journal(home, "c2")] == [None, "budget"]
    assert len(model.requests) == 2


def test_a_grant_carries_the_campaigns_cap_and_spend() -> None:
    config = {"provider": {"p": {"options": {"baseURL": "http://up/v1"}, "models": {}}}}
    grant, _, _ = attempt_grant(
        config, make_spec(), "c:i:A:0", 1, [], campaign_cap_usd=2.5, campaign_spent_usd=1.25
    )
    assert (grant.campaign_max_usd, grant.campaign_spent_usd) == (2.5, 1.25)
    grant, _, _ = attempt_grant(config, make_spec(), "c:i:A:0", 1, [])
    assert grant.campaign_max_usd is None


def test_upstream_error_is_relayed_and_recorded(
    home: Path, scripted_model: Callable[[str], RunningModel]
) -> None:
    model = scripted_model(
        SCRIPT.replace(
            'text = "Hi there, this is a longer streamed answer."',
            'error = { status = 429, message = "slow down" }',
        )
    )
    gw = start_gateway(home)
    token = grant_for(home, model.base_url)
    status, body = chat(gw.port, token, [{"role": "user", "content": "hello"}], stream=True)
    assert status == 429
    assert b"slow down" in body
    [line] = journal(home)
    assert line["upstream"] == {"status": 429, "error": "upstream 429"}
    assert line["usage"] is None


def test_refused_upstream_is_a_502_recorded_as_refused(home: Path) -> None:
    gw = start_gateway(home)
    token = grant_for(home, "http://127.0.0.1:9/v1")
    status, _ = chat(gw.port, token, [{"role": "user", "content": "hello"}])
    assert status == 502
    [line] = journal(home)
    assert line["upstream"]["status"] is None
    assert line["upstream"]["error"].startswith("refused")


def test_a_second_ensure_adopts_the_running_gateway(home: Path) -> None:
    first = start_gateway(home)
    second = start_gateway(home)
    assert second == first
    assert paths.model_endpoint(home).exists()


@pytest.mark.parametrize("stream", [False, True])
def test_token_ids_and_logprobs_are_recorded_when_returned(
    home: Path, scripted_model: Callable[[str], RunningModel], stream: bool
) -> None:
    model = scripted_model("chunk_chars = 8\n" + SCRIPT)
    gw = start_gateway(home)
    token = grant_for(home, model.base_url)
    messages = [{"role": "user", "content": "hello"}]
    status, _ = chat(
        gw.port,
        token,
        messages,
        stream=stream,
        logprobs=True,
        top_logprobs=2,
        return_token_ids=True,
    )
    assert status == 200
    [line] = journal(home)
    text = "Hi there, this is a longer streamed answer."
    expected = [text[i : i + 8] for i in range(0, len(text), 8)]
    assert line["token_ids"] == {
        "prompt": [wire.token_id("hello")],
        "completion": [wire.token_id(p) for p in expected],
    }
    assert [e["token"] for e in line["logprobs"]] == expected
    assert [e["logprob"] for e in line["logprobs"]] == [wire.token_logprob(p) for p in expected]
    assert all(len(e["top"]) == 2 for e in line["logprobs"])
    assert line["request"]["sampling"]["top_logprobs"] == 2


def test_concurrent_starts_make_one_gateway(home: Path) -> None:
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(4) as pool:
        endpoints = list(pool.map(lambda _: start_gateway(home), range(4)))
    assert len({e.pid for e in endpoints}) == 1
    assert process.running(home) == endpoints[0]


# -- the responses and messages wires ------------------------------------------------------------

WIRE_SCRIPT = SCRIPT.replace(
    "reasoning_tokens = 7", "reasoning_tokens = 7\ncache_write_tokens = 100"
)
WIRE_PRICES = {"m": grants.Price(input=3.0, output=15.0, cache_read=0.3, cache_write=3.75)}


def _wire_call(
    wire_name: str, port: int, token: str, messages: list[dict[str, Any]], **extra: Any
) -> tuple[int, str, bytes]:
    """One call in the wire's own shape, with the token in the wire's own auth header."""
    if wire_name == "responses":
        body: dict[str, Any] = {"model": "m", "input": messages, **extra}
        headers = {"Authorization": f"Bearer {token}"}
    else:
        body = {"model": "m", "max_tokens": 1024, "messages": messages, **extra}
        headers = {"x-api-key": token, "anthropic-version": "2023-06-01"}
    if wire_name == "chat":
        headers = {"Authorization": f"Bearer {token}"}
    headers["Content-Type"] = "application/json"
    path = "/v1/chat/completions" if wire_name == "chat" else f"/v1/{wire_name}"
    return post(port, path, body, headers)


def _text(wire_name: str, stream: bool, body: bytes) -> str:
    if not stream:
        answer = json.loads(body)
        if wire_name == "responses":
            return "".join(
                part["text"]
                for item in answer["output"]
                if item["type"] == "message"
                for part in item["content"]
            )
        return "".join(block["text"] for block in answer["content"] if block["type"] == "text")
    kind = "response.output_text.delta" if wire_name == "responses" else "content_block_delta"
    return "".join(
        e["delta"] if wire_name == "responses" else e["delta"].get("text", "")
        for e in sse_data(body)
        if e["type"] == kind
    )


# Each wire's usage mapped to opencode's buckets (arenad.gateway.protocols), and its cost.
WIRE_USAGE = {
    # input_tokens 1000 (200 cached), output_tokens 50 (7 reasoning); no cache write on it.
    "responses": ({"input": 800, "output": 43, "reasoning": 7, "cache_read": 200}, 0.00321),
    # input_tokens 700 + cache_read 200 + cache_creation 100; output_tokens 50.
    "messages": (
        {"input": 700, "output": 50, "reasoning": 0, "cache_read": 200, "cache_write": 100},
        (700 * 3.0 + 50 * 15.0 + 200 * 0.3 + 100 * 3.75) / 1e6,
    ),
}


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("wire_name", ["responses", "messages"])
def test_a_wire_call_is_forwarded_and_recorded_once_with_its_usage_and_cost(
    home: Path, scripted_model: Callable[[str], RunningModel], wire_name: str, stream: bool
) -> None:
    model = scripted_model(WIRE_SCRIPT)
    gw = start_gateway(home)
    token = grant_for(home, model.base_url, prices=WIRE_PRICES)
    first = [{"role": "user", "content": "hello"}]
    status, head, body = _wire_call(wire_name, gw.port, token, first, stream=stream)
    assert status == 200, body
    text = _text(wire_name, stream, body)
    assert text == "Hi there, this is a longer streamed answer."
    # The upstream saw its own key in the wire's header, never the attempt's token; the
    # cell-facing answer and the journal hold no trace of the key.
    if wire_name == "messages":
        assert (model.api_keys, model.authorizations) == ([UPSTREAM_KEY], [None])
    else:
        assert (model.api_keys, model.authorizations) == ([None], [f"Bearer {UPSTREAM_KEY}"])
    assert UPSTREAM_KEY not in head and UPSTREAM_KEY.encode() not in body
    [line] = journal(home)
    assert UPSTREAM_KEY not in json.dumps(line)
    assert line["endpoint"] == wire_name
    assert line["upstream"] == {"status": 200, "error": None}
    usage, cost = WIRE_USAGE[wire_name]
    assert line["usage"] == {"cache_write": 0, **usage}
    assert line["cost_usd"] == pytest.approx(cost)
    assert line["response"]["content"] == text
    assert line["request"]["new_messages"] == first
    assert line["request"]["stream"] is stream
    # The second turn: only what is new since the first call is recorded, and the script
    # answers its second step (the wire's history read as a chat history).
    second: list[dict[str, Any]] = [*first, {"role": "assistant", "content": text}]
    second.append({"role": "user", "content": "more"})
    status, _, body = _wire_call(wire_name, gw.port, token, second, stream=stream)
    assert status == 200 and _text(wire_name, stream, body) == "Second answer."
    one, two = journal(home)
    assert two["request"]["prefix_hash"] == one["request"]["prompt_hash"]
    assert two["request"]["new_messages"] == second[1:]


@pytest.mark.parametrize("wire_name", ["responses", "messages"])
def test_a_cap_refusal_is_phrased_as_the_wires_provider_would(
    home: Path, scripted_model: Callable[[str], RunningModel], wire_name: str
) -> None:
    model = scripted_model(WIRE_SCRIPT)
    gw = start_gateway(home)
    token = grant_for(home, model.base_url, prices=WIRE_PRICES, max_usd=0.003)
    messages: list[dict[str, Any]] = [{"role": "user", "content": "hello"}]
    first, _, _ = _wire_call(wire_name, gw.port, token, messages)
    status, _, body = _wire_call(wire_name, gw.port, token, messages, stream=True)
    assert (first, status) == (200, 402)
    error = json.loads(body)
    if wire_name == "messages":
        assert error["type"] == "error" and error["error"]["type"] == "billing_error"
    else:
        assert error["error"]["type"] == "insufficient_quota"
    assert "max_usd" in error["error"]["message"]
    lines = journal(home)
    assert [line.get("refused") for line in lines] == [None, "budget"]
    assert lines[1]["endpoint"] == wire_name
    assert len(model.requests) == 1


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("wire_name", ["responses", "messages"])
def test_an_upstream_429_on_a_wire_is_classified(
    home: Path, scripted_model: Callable[[str], RunningModel], wire_name: str, stream: bool
) -> None:
    model = scripted_model(
        WIRE_SCRIPT.replace(
            'text = "Hi there, this is a longer streamed answer."',
            'error = { status = 429, message = "slow down" }',
        )
    )
    gw = start_gateway(home)
    token = grant_for(home, model.base_url, prices=WIRE_PRICES)
    messages = [{"role": "user", "content": "hello"}]
    status, _, body = _wire_call(wire_name, gw.port, token, messages, stream=stream)
    assert status == 429
    if wire_name == "messages":
        assert json.loads(body)["error"]["type"] == "rate_limit_error"
    [line] = journal(home)
    assert line["upstream"] == {"status": 429, "error": "upstream 429"}
    assert line["usage"] is None
    cause = gateway_cause([line])
    assert cause is not None and cause.cause == "provider rate limit (HTTP 429): slow down"


@pytest.mark.parametrize(
    ("wire_name", "said"),
    [
        ("chat", "Overloaded"),
        ("responses", "Overloaded"),
        ("messages", "overloaded_error: Overloaded"),
    ],
)
def test_an_error_inside_a_200_stream_is_an_infrastructure_cause(
    home: Path, scripted_model: Callable[[str], RunningModel], wire_name: str, said: str
) -> None:
    model = scripted_model(
        WIRE_SCRIPT.replace(
            'text = "Hi there, this is a longer streamed answer."',
            'error = { status = 529, message = "Overloaded", in_stream = true }',
        )
    )
    gw = start_gateway(home)
    token = grant_for(home, model.base_url, prices=WIRE_PRICES)
    messages = [{"role": "user", "content": "hello"}]
    status, _, _ = _wire_call(wire_name, gw.port, token, messages, stream=True)
    assert status == 200
    [line] = journal(home)
    error = f"upstream error in its stream: {said}"
    assert line["upstream"] == {"status": 200, "error": error}
    cause = gateway_cause([line] * 2)
    assert cause is not None
    assert cause.cause == f"provider failed mid-answer (HTTP 200): {error}"


@pytest.mark.parametrize("stream", [False, True])
def test_responses_logprobs_are_recorded_when_returned(
    home: Path, scripted_model: Callable[[str], RunningModel], stream: bool
) -> None:
    model = scripted_model("chunk_chars = 8\n" + SCRIPT)
    gw = start_gateway(home)
    token = grant_for(home, model.base_url)
    messages = [{"role": "user", "content": "hello"}]
    include = ["message.output_text.logprobs"]
    status, _, _ = _wire_call(
        "responses", gw.port, token, messages, stream=stream, include=include, top_logprobs=2
    )
    assert status == 200
    [line] = journal(home)
    text = "Hi there, this is a longer streamed answer."
    expected = [text[i : i + 8] for i in range(0, len(text), 8)]
    assert [e["token"] for e in line["logprobs"]] == expected
    assert [e["logprob"] for e in line["logprobs"]] == [wire.token_logprob(p) for p in expected]
    assert all(len(e["top"]) == 2 for e in line["logprobs"])
    assert line["request"]["sampling"]["top_logprobs"] == 2


@pytest.mark.parametrize("stream", [False, True])
def test_responses_token_ids_are_recorded_when_returned(
    home: Path, scripted_model: Callable[[str], RunningModel], stream: bool
) -> None:
    """vLLM's ``enable_response_messages``: the prompt's and the answer's raw messages carry
    their token ids, recorded as the call's ``token_ids`` like chat's (issue 31)."""
    model = scripted_model("chunk_chars = 8\n" + SCRIPT)
    gw = start_gateway(home)
    token = grant_for(home, model.base_url)
    messages = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hello"}]
    status, _, _ = _wire_call(
        "responses", gw.port, token, messages, stream=stream, enable_response_messages=True
    )
    assert status == 200
    [line] = journal(home)
    text = "Hi there, this is a longer streamed answer."
    completion = [wire.token_id(text[i : i + 8]) for i in range(0, len(text), 8)]
    prompt = [wire.token_id("be brief"), wire.token_id("hello")]
    assert line["token_ids"] == {"prompt": prompt, "completion": completion}
    assert line["request"]["sampling"]["enable_response_messages"] is True
    # Not asked: nothing recorded, as with chat.
    _wire_call("responses", gw.port, token, messages, stream=stream)
    assert "token_ids" not in journal(home)[1]


def test_a_campaigns_spend_since_a_grant_is_a_bisection_over_its_calls() -> None:
    """What the campaign cap reads per call: the calls that ended at or after the grant was
    issued, without summing every call of the campaign again (that was O(n**2))."""
    from arenad.gateway.server import _CampaignCalls

    calls = _CampaignCalls()
    assert calls.since(0) == 0.0
    for ended, usd in ((10, 1.0), (20, 2.0), (20, 4.0), (30, 8.0)):
        calls.add(ended, usd)
    assert [calls.since(t) for t in (0, 10, 11, 20, 21, 30, 31)] == [15, 15, 14, 14, 8, 8, 0]
    assert calls.largest_usd == 8.0
    # A clock that steps back files the call at the latest end: it still counts.
    calls.add(5, 16.0)
    assert calls.since(30) == 24.0 and calls.since(31) == 0.0
