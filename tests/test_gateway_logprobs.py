"""Log-probabilities through the gateway, with the official ``openai`` client: asked of the engine every turn, kept in
the session record aligned with the buffer (a number on each sampled id, null on the prompt and the bridges), and
answered in OpenAI's shape (``choices[].logprobs.content``, ``top_logprobs``) when the request asks, streamed or
not. Behind it the fake engine (its values drawn apart, compared with the engine asked directly) and a stub answering
as vLLM and SGLang write log-probabilities; an engine whose log-probabilities name other ids is refused (502) and the
session stays as it was."""

from __future__ import annotations

import json
import math

import pytest

from tests.conftest import SHARED_TOKENIZERS, requires_shared
from tests.gateway_stub import StubEngine

pytest.importorskip("starlette", reason="the gateway extra is not installed (pip install -e '.[gateway]')")
openai = pytest.importorskip("openai", reason="the openai client is not installed (pip install -e '.[dev]')")
httpx = pytest.importorskip("httpx")

pytestmark = [requires_shared, pytest.mark.shared]

MODEL = "Qwen/Qwen2.5-7B-Instruct"
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Get the weather for a city.",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
        },
    }
]


@pytest.fixture(scope="module")
def machinery():
    from tito_audit.session.machinery import ModelSourceSettings, machinery_for

    source = ModelSourceSettings.of([SHARED_TOKENIZERS], None, None, False, False, None, None)
    return machinery_for(MODEL, source, None, ())


@pytest.fixture(scope="module")
def served(machinery):
    from tito_audit.gateway.gateway import Gateway, GatewayConfig
    from tito_audit.gateway.server import running

    gateway = Gateway(GatewayConfig(MODEL, parser="template", seed=11), machinery=machinery)
    with running(gateway) as url:
        yield gateway, url


def client(url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0, timeout=30)


def follow_up(message) -> list[dict]:
    calls = message.tool_calls or []
    return [{"role": "tool", "tool_call_id": c.id, "content": "sunny"} for c in calls] or [
        {"role": "user", "content": "And then?"}
    ]


def test_logprobs_are_kept_beside_the_buffer_and_answered_in_openai_shape(served, machinery):
    from tito_audit.gateway.fake import FakeEngine
    from tito_audit.gateway.sampling_engines import EngineRequest

    gateway, url = served
    api = client(url)
    codec = machinery.codec
    messages: list[dict] = [{"role": "user", "content": "Weather in Oslo?"}]
    answers = []
    for turn in range(3):
        response = api.chat.completions.create(
            model=MODEL, messages=messages, tools=TOOLS, user="lp", logprobs=True, top_logprobs=3
        )
        answers.append(response)
        messages += [response.choices[0].message.model_dump(exclude_none=True), *follow_up(response.choices[0].message)]
        assert response.model_extra["tito"]["turn"] == turn + 1
    record = httpx.get(f"{url}/sessions/lp").json()
    buffer, mask, logprobs = record["buffer"], record["loss_mask"], record["logprobs"]
    assert len(logprobs) == len(buffer) == len(mask)
    assert [value is not None for value in logprobs] == [bool(bit) for bit in mask]  # the fake gives every id one
    fake = FakeEngine(machinery, seed=11, clock=gateway.engine.clock)
    for turn, (response, kept) in enumerate(zip(answers, record["turns"], strict=True)):
        start, end = kept["completion"]
        content = response.choices[0].logprobs.content
        assert len(content) == end - start == response.usage.completion_tokens
        assert [entry.logprob for entry in content] == logprobs[start:end]
        # the tokens read as the completion does (the stop token's text included)
        assert "".join(entry.token for entry in content) == codec.decode(buffer[start:end])
        for entry in content:
            assert len(entry.top_logprobs) == 3
            values = [alternative.logprob for alternative in entry.top_logprobs]
            assert values == sorted(values, reverse=True) and all(v <= 0 for v in values)
            assert sum(math.exp(v) for v in values) <= 1 + 1e-6
            assert entry.bytes is None or bytes(entry.bytes).decode("utf-8") == entry.token
        # the engine asked directly for this turn (no alternatives) gives the same ids and log-probabilities
        asked = EngineRequest([], {}, [], MODEL, [], TOOLS, "auto", "lp", turn)
        asked.messages = record["messages"][: kept["message_index"]]
        direct = fake.sample(asked)
        assert direct.ids == buffer[start:end] and direct.logprobs == logprobs[start:end]


def test_without_asking_the_answer_has_none_and_the_record_still_keeps_them(served):
    _, url = served
    response = client(url).chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "hi"}], user="quiet"
    )
    assert response.choices[0].logprobs is None
    record = httpx.get(f"{url}/sessions/quiet").json()
    start, end = record["turns"][0]["completion"]
    assert all(isinstance(v, float) for v in record["logprobs"][start:end])
    assert set(record["logprobs"][:start]) == {None}


def test_a_streamed_turn_keeps_the_engines_logprobs_in_the_record(served):
    """The fake engine's last streamed piece carries the turn's log-probabilities: the record keeps them as for a
    turn answered whole (a streamed answer carries none: docs/gateway.md, "Not there yet")."""
    _, url = served
    api = client(url)
    messages = [{"role": "user", "content": "Tell me a story."}]
    for chunk in api.chat.completions.create(model=MODEL, messages=messages, user="stream-lp", stream=True):
        assert all(choice.logprobs is None for choice in chunk.choices)
    streamed = httpx.get(f"{url}/sessions/stream-lp").json()
    start, end = streamed["turns"][0]["completion"]
    again = api.chat.completions.create(  # a retry: the seeded fake samples the same turn again, answered whole
        model=MODEL, messages=messages, user="stream-lp", logprobs=True
    )
    assert again.model_extra["tito"]["retry"] is True
    assert streamed["logprobs"][start:end] == [e.logprob for e in again.choices[0].logprobs.content]
    assert all(isinstance(v, float) for v in streamed["logprobs"][start:end])


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"logprobs": "yes"}, "logprobs must be true or false"),
        ({"logprobs": True, "top_logprobs": 21}, "top_logprobs must be an integer from 0 to 20"),
        ({"logprobs": True, "top_logprobs": 1.5}, "top_logprobs must be an integer"),
        ({"top_logprobs": 2}, "top_logprobs needs logprobs: true"),
    ],
)
def test_bad_logprob_fields_are_refused_in_one_line(served, fields, message):
    _, url = served
    body = {"messages": [{"role": "user", "content": "hi"}], **fields}
    answer = httpx.post(f"{url}/v1/chat/completions", json=body, headers={"X-Session-Id": "bad-lp"})
    assert answer.status_code == 400
    error = answer.json()["error"]
    assert error["code"] == "invalid_request" and message in error["message"] and "\n" not in error["message"]
    assert httpx.get(f"{url}/sessions/bad-lp").status_code == 404


# -- behind vLLM and SGLang (a stub writing their shapes) ---------------------------------------------------------
class PlainParser:
    name = "plain"

    def parse(self, given):
        return {"role": "assistant", "content": given.text}


@pytest.mark.parametrize("api", ["vllm", "sglang"])
def test_engine_logprobs_are_read_aligned_and_checked(machinery, api):
    from tito_audit.gateway.gateway import Gateway, GatewayConfig
    from tito_audit.gateway.server import running

    ids = machinery.codec.encode("It is sunny.<|im_end|>")
    values = [-0.25 - n / 100 for n in range(len(ids))]
    top = [[(ids[n], values[n]), (n + 100, -3.0), (n + 200, -4.0)] for n in range(len(ids))]
    stub = StubEngine(ids, values, top)
    config = GatewayConfig(MODEL, engine=stub.url, engine_api=api, parser=PlainParser())
    try:
        with running(Gateway(config, machinery=machinery)) as url:
            first = [{"role": "user", "content": "Weather?"}]
            response = client(url).chat.completions.create(
                model=MODEL, messages=first, user=f"e-{api}", logprobs=True, top_logprobs=2
            )
            sent = stub.bodies[-1]
            if api == "vllm":
                assert sent["logprobs"] == 2 and sent["return_tokens_as_token_ids"] is True
            else:
                assert sent["return_logprob"] is True and sent["top_logprobs_num"] == 2
                assert sent["logprob_start_len"] == -1
            content = response.choices[0].logprobs.content
            # SGLang left the stop token out of output_ids and its triple out of the log-probabilities: the
            # gateway puts the id back, without a value (-9999.0 in the answer, null in the record)
            expected = values if api == "vllm" else [*values[:-1], None]
            assert [e.logprob for e in content] == [v if v is not None else -9999.0 for v in expected]
            assert [[a.logprob for a in e.top_logprobs] for e in content[:-1]] == [
                [values[n], -3.0] for n in range(len(ids) - 1)
            ]
            record = httpx.get(f"{url}/sessions/e-{api}").json()
            start, end = record["turns"][0]["completion"]
            assert record["logprobs"][start:end] == expected
            assert set(record["logprobs"][:start]) == {None}

            follow = [*first, response.choices[0].message.model_dump(exclude_none=True)]
            follow.append({"role": "user", "content": "And tomorrow?"})
            stub.sglang_stop_logprob = True  # an SGLang that keeps the stop token's triple: read the same way
            stub.mode = "bad_logprobs"
            before = httpx.get(f"{url}/sessions/e-{api}").json()
            failed = httpx.post(
                f"{url}/v1/chat/completions", json={"messages": follow}, headers={"X-Session-Id": f"e-{api}"}
            )
            assert failed.status_code == 502 and failed.json()["error"]["code"] == "engine_bad_response"
            assert "not the sampled id" in failed.json()["error"]["message"]
            assert httpx.get(f"{url}/sessions/e-{api}").json() == before
            stub.mode = "ok"
            resumed = client(url).chat.completions.create(model=MODEL, messages=follow, user=f"e-{api}")
            assert resumed.choices[0].logprobs is None
            after = httpx.get(f"{url}/sessions/e-{api}").json()
            start, end = after["turns"][1]["completion"]
            assert after["logprobs"][start:end] == values  # the stop token's value this time
            assert after["logprobs"][: len(before["logprobs"])] == before["logprobs"]
    finally:
        stub.close()


def test_an_engine_without_logprobs_is_refused_when_they_are_asked(machinery):
    from tito_audit.gateway.gateway import Gateway, GatewayConfig
    from tito_audit.gateway.server import running

    stub = StubEngine(machinery.codec.encode("Fine.<|im_end|>"))  # answers no log-probabilities at all
    config = GatewayConfig(MODEL, engine=stub.url, engine_api="vllm", parser=PlainParser())
    try:
        with running(Gateway(config, machinery=machinery)) as url:
            body = {"messages": [{"role": "user", "content": "hi"}], "logprobs": True}
            failed = httpx.post(f"{url}/v1/chat/completions", json=body, headers={"X-Session-Id": "none"})
            assert failed.status_code == 502 and "no logprobs" in failed.json()["error"]["message"]
            assert httpx.get(f"{url}/sessions/none").status_code == 404
            plain = httpx.post(f"{url}/v1/chat/completions", json={**body, "logprobs": False})
            assert plain.status_code == 200
            record = httpx.get(f"{url}/sessions/{plain.json()['tito']['session']}").json()
            assert set(record["logprobs"]) == {None}  # kept as null: the engine gave none
            assert json.loads(json.dumps(record)) == record
    finally:
        stub.close()
