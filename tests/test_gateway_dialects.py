"""OpenAI's Responses API and Anthropic's Messages API through their official Python clients, pointed at the gateway
on loopback (the fake engine, SGLang's parsers or the template parser): the same conversation spoken in each dialect
keeps the same buffer a chat-completions client keeps, ``previous_response_id`` chains turns without resending
history, streams reassemble to the answers, and bad input is one line naming the field."""

from __future__ import annotations

import json

import pytest

from tests.conftest import SHARED_TOKENIZERS, requires_shared

pytest.importorskip("starlette", reason="the gateway extra is not installed (pip install -e '.[gateway]')")
openai = pytest.importorskip("openai", reason="the openai client is not installed (pip install -e '.[dev]')")
anthropic = pytest.importorskip("anthropic", reason="the anthropic client is not installed (pip install -e '.[dev]')")
httpx = pytest.importorskip("httpx")

pytestmark = [
    requires_shared,
    pytest.mark.shared,
    pytest.mark.filterwarnings("ignore::tito_audit.session.TitoBreakWarning"),  # the response reports it
]

MODEL = "Qwen/Qwen3-4B"
SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
CHAT_TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "description": "Weather.", "parameters": SCHEMA}}
]
RESPONSES_TOOLS = [{"type": "function", "name": "get_weather", "description": "Weather.", "parameters": SCHEMA}]
MESSAGES_TOOLS = [{"name": "get_weather", "description": "Weather.", "input_schema": SCHEMA}]
SYSTEM = "You are terse."
FIRST = "Weather in Paris and in Rome?"


@pytest.fixture(scope="module")
def machinery():
    from tito_audit.session.machinery import ModelSourceSettings, machinery_for

    source = ModelSourceSettings.of([SHARED_TOKENIZERS], None, None, False, False, None, None)
    return machinery_for(MODEL, source, None, ())


@pytest.fixture(scope="module")
def parser():
    from tito_audit.parse import sglang

    return "sglang" if sglang.available() else "template"


def served(machinery, parser, **settings):
    from tito_audit.gateway.gateway import Gateway, GatewayConfig
    from tito_audit.gateway.server import running

    return running(Gateway(GatewayConfig(MODEL, parser=parser, seed=21, **settings), machinery=machinery))


def result_of(turn: int, call_id: str) -> str:
    """A tool's result (not its call id: the parser's ids are drawn per session, and Qwen3 does not render them)."""
    return json.dumps({"turn": turn, "sky": "clear"})


def chat_run(url: str, session: str, turns: int) -> list[dict]:
    """The conversation through chat completions; the answers as messages."""
    api = openai.OpenAI(base_url=url + "/v1", api_key="x", max_retries=0)
    messages: list[dict] = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": FIRST}]
    answers = []
    for turn in range(turns):
        message = api.chat.completions.create(model=MODEL, messages=messages, tools=CHAT_TOOLS, user=session)
        answer = message.choices[0].message.model_dump(exclude_none=True)
        answers.append(answer)
        messages.append(answer)
        calls = answer.get("tool_calls") or []
        messages += [{"role": "tool", "tool_call_id": c["id"], "content": result_of(turn, c["id"])} for c in calls]
        messages += [] if calls else [{"role": "user", "content": f"And then? ({turn})"}]
    return answers


def responses_run(url: str, session: str, turns: int, stream: bool) -> list[dict]:
    """The same conversation through the Responses API, chained by previous_response_id (no history resent)."""
    api = openai.OpenAI(base_url=url + "/v1", api_key="x", max_retries=0)
    items: list = [{"role": "user", "content": FIRST}]
    previous, answers = None, []
    for turn in range(turns):
        args = {"model": MODEL, "input": items, "instructions": SYSTEM, "tools": RESPONSES_TOOLS}
        args |= {"previous_response_id": previous} if previous else {"extra_headers": {"X-Session-Id": session}}
        if stream:
            with api.responses.stream(**args) as events:
                kinds = [event.type for event in events]
                response = events.get_final_response()
            assert kinds[:2] == ["response.created", "response.in_progress"] and kinds[-1] == "response.completed"
        else:
            response = api.responses.create(**args)
        assert response.status == "completed"
        answer: dict = {"role": "assistant"}
        calls = []
        for item in response.output:
            if item.type == "reasoning":
                answer["reasoning_content"] = "".join(part.text for part in item.content or [])
            elif item.type == "message":
                answer["content"] = "".join(part.text for part in item.content)
            else:
                calls.append({"id": item.call_id, "name": item.name, "arguments": json.loads(item.arguments)})
        answer["calls"] = calls
        answers.append(answer)
        previous = response.id
        items = [
            {"type": "function_call_output", "call_id": c["id"], "output": result_of(turn, c["id"])} for c in calls
        ] or [{"role": "user", "content": f"And then? ({turn})"}]
    return answers


def messages_run(url: str, session: str, turns: int, stream: bool) -> list[dict]:
    """The same conversation through the Messages API (the whole history each time, as its clients send it)."""
    api = anthropic.Anthropic(base_url=url, api_key="x", max_retries=0)
    messages: list[dict] = [{"role": "user", "content": FIRST}]
    answers = []
    for turn in range(turns):
        args = {"model": MODEL, "max_tokens": 1024, "system": SYSTEM, "messages": messages, "tools": MESSAGES_TOOLS}
        args["extra_headers"] = {"X-Session-Id": session}
        if stream:
            with api.messages.stream(**args) as events:
                kinds = [event.type for event in events]
                message = events.get_final_message()
            assert kinds[0] == "message_start" and kinds[-1] == "message_stop"
        else:
            message = api.messages.create(**args)
        blocks = [block.model_dump(exclude_none=True) for block in message.content]
        answer: dict = {"role": "assistant"}
        for block in blocks:
            if block["type"] == "thinking":
                answer["reasoning_content"] = block["thinking"]
            elif block["type"] == "text":
                answer["content"] = block["text"]
        calls = [{"id": b["id"], "name": b["name"], "arguments": b["input"]} for b in blocks if b["type"] == "tool_use"]
        answer["calls"] = calls
        assert message.stop_reason == ("tool_use" if calls else "end_turn")
        answers.append(answer)
        messages.append({"role": "assistant", "content": blocks})
        results = [{"type": "tool_result", "tool_use_id": c["id"], "content": result_of(turn, c["id"])} for c in calls]
        messages.append({"role": "user", "content": results or f"And then? ({turn})"})
    return answers


def chat_answers_as_calls(answers: list[dict]) -> list[dict]:
    out = []
    for answer in answers:
        calls = [
            {"id": c["id"], "name": c["function"]["name"], "arguments": json.loads(c["function"]["arguments"])}
            for c in answer.get("tool_calls") or []
        ]
        shaped = {"role": "assistant", "calls": calls}
        shaped |= {k: answer[k] for k in ("reasoning_content", "content") if answer.get(k)}
        out.append(shaped)
    return out


def without_ids(answers: list[dict]) -> list[dict]:
    return [{**a, "calls": [{**c, "id": None} for c in a["calls"]]} for a in answers]


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_each_dialect_keeps_the_buffer_chat_completions_keeps(machinery, parser, stream):
    """One conversation (a system prompt, a question, tool results) spoken in three dialects on three gateways seeded
    alike: the fake engine samples by session and turn, so the answers and the buffers must be the same."""
    turns = 5
    with served(machinery, parser) as chat, served(machinery, parser) as resp, served(machinery, parser) as msgs:
        reference = chat_answers_as_calls(chat_run(chat, "same", turns))
        through_responses = responses_run(resp, "same", turns, stream)
        through_messages = messages_run(msgs, "same", turns, stream)
        assert any(a["calls"] for a in reference) and any(not a["calls"] for a in reference)
        if parser == "template":  # the fake engine's own call ids: the same in every dialect
            assert through_responses == reference and through_messages == reference
        assert without_ids(through_responses) == without_ids(reference)
        assert without_ids(through_messages) == without_ids(reference)
        records = [httpx.get(f"{url}/sessions/same").json() for url in (chat, resp, msgs)]
    assert records[0]["buffer"] == records[1]["buffer"] == records[2]["buffer"]
    assert records[0]["loss_mask"] == records[1]["loss_mask"] == records[2]["loss_mask"]
    assert len(records[0]["turns"]) == turns


def test_the_dialects_refuse_bad_input_in_one_line_naming_the_field(machinery, parser):
    with served(machinery, parser, api_key="k3y") as url:
        auth = {"Authorization": "Bearer k3y"}
        cases = [
            ("/v1/responses", {"input": [{"type": "item_reference", "id": "x"}]}, 400, "input[0].type"),
            ("/v1/responses", {"input": [{"role": "user", "content": [{"type": "input_image"}]}]}, 400, "input[0]"),
            ("/v1/responses", {"input": "hi", "tools": [{"type": "function"}]}, 400, "tools[0]"),
            ("/v1/responses", {"input": "hi", "max_output_tokens": 0}, 400, "max_output_tokens"),
            ("/v1/responses", {"input": "hi", "previous_response_id": "resp_nope"}, 400, "previous_response_id"),
            ("/v1/responses", {"input": []}, 400, "input"),
            (
                "/v1/messages",
                {"max_tokens": 8, "messages": [{"role": "robot", "content": "x"}]},
                400,
                "messages[0].role",
            ),
            (
                "/v1/messages",
                {"max_tokens": 8, "messages": [{"role": "user", "content": [{"type": "image", "source": {}}]}]},
                400,
                "messages[0].content[0].type",
            ),
            (
                "/v1/messages",
                {"max_tokens": 8, "messages": [{"role": "user", "content": "x"}], "tool_choice": 3},
                400,
                "tool_choice",
            ),
        ]
        for path, body, status, field in cases:
            answer = httpx.post(url + path, json=body, headers=auth)
            assert answer.status_code == status, (path, body, answer.text)
            message = answer.json()["error"]["message"]
            assert field in message and "\n" not in message, message
        shaped = httpx.post(url + "/v1/messages", json=cases[6][1], headers={"x-api-key": "k3y"}).json()
        assert shaped["type"] == "error" and shaped["error"]["type"] == "invalid_request_error"
        assert httpx.post(url + "/v1/messages", json=cases[6][1]).status_code == 401
        client = anthropic.Anthropic(base_url=url, api_key="k3y", max_retries=0)
        with pytest.raises(anthropic.BadRequestError, match=r"messages\[0\]\.role"):
            client.messages.create(model=MODEL, max_tokens=8, messages=[{"role": "robot", "content": "x"}])


def test_previous_response_id_of_an_older_response_is_a_rewrite(machinery, parser):
    """Chaining from a response that is not the session's last sends a history that differs from the session's:
    refused (400) under --on-rewrite refuse, a new branch under --on-rewrite branch (the default)."""
    for on_rewrite in ("refuse", "branch"):
        with served(machinery, parser, on_rewrite=on_rewrite) as url:
            api = openai.OpenAI(base_url=url + "/v1", api_key="x", max_retries=0)
            first = api.responses.create(model=MODEL, input="Hello", extra_headers={"X-Session-Id": "old"})
            api.responses.create(model=MODEL, input="And?", previous_response_id=first.id)
            if on_rewrite == "refuse":
                with pytest.raises(openai.BadRequestError):
                    api.responses.create(model=MODEL, input="Or rather?", previous_response_id=first.id)
                continue
            api.responses.create(model=MODEL, input="Or rather?", previous_response_id=first.id)
            record = httpx.get(f"{url}/sessions/old").json()
            assert [b["parent"] for b in record["branches"]] == [None, 0]
            assert record["branches"][1]["shared_messages"] == 2  # the question and the first answer
