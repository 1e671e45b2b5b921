"""Streamed turns through the real HTTP path (the official ``openai`` client, the fake engine streaming in pieces,
SGLang's parsers reading the pieces as they come): the deltas reassemble to the non-streamed answer, the buffer is
byte-identical to the one non-streamed turns keep, the first chunk says how the answer streams, and a client that
goes away mid-stream leaves the session as it was."""

from __future__ import annotations

import json

import pytest

from tests.conftest import SHARED_TOKENIZERS, requires_shared

pytest.importorskip("starlette", reason="the gateway extra is not installed (pip install -e '.[gateway]')")
openai = pytest.importorskip("openai", reason="the openai client is not installed (pip install -e '.[dev]')")
httpx = pytest.importorskip("httpx")

pytestmark = [
    requires_shared,
    pytest.mark.shared,
    pytest.mark.filterwarnings("ignore::tito_audit.session.TitoBreakWarning"),  # the response reports it
]

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Get the weather for a city.",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
        },
    },
    {
        "type": "function",
        "function": {
            "name": "search",
            "description": "Search the catalogue.",
            "parameters": {
                "type": "object",
                "properties": {"query": {"type": "string"}, "limit": {"type": "integer"}},
                "required": ["query"],
            },
        },
    },
]


def machinery_of(model: str):
    from tito_audit.session.machinery import ModelSourceSettings, machinery_for

    source = ModelSourceSettings.of([SHARED_TOKENIZERS], None, None, False, False, None, None)
    return machinery_for(model, source, None, ())


def sglang_or_skip() -> None:
    from tito_audit.parse import sglang

    if not sglang.available():
        pytest.skip(f"SGLang's parsers are not installed ({sglang.INSTALL})")


def reassembled(stream) -> tuple[dict, list]:
    """The message the chunks add up to, and the chunks."""
    chunks = list(stream)
    content, reasoning, calls, finish = "", "", {}, None
    for chunk in chunks:
        for choice in chunk.choices:
            delta = choice.delta
            content += delta.content or ""
            reasoning += (delta.model_extra or {}).get("reasoning_content") or ""
            for call in delta.tool_calls or []:
                slot = calls.setdefault(call.index, {"id": None, "name": "", "arguments": ""})
                slot["id"] = call.id or slot["id"]
                slot["name"] += (call.function.name or "") if call.function else ""
                slot["arguments"] += (call.function.arguments or "") if call.function else ""
            finish = choice.finish_reason or finish
    message: dict = {"role": "assistant", "content": content or None}
    if reasoning:
        message["reasoning_content"] = reasoning
    if calls:
        message["tool_calls"] = [
            {"id": c["id"], "type": "function", "function": {"name": c["name"], "arguments": c["arguments"]}}
            for _, c in sorted(calls.items())
        ]
    return {"message": message, "finish": finish}, chunks


def without_ids(message: dict) -> dict:
    calls = [{**c, "id": None} for c in message.get("tool_calls") or []]
    return {**message, "tool_calls": calls} if calls else message


@pytest.mark.parametrize("model", ["Qwen/Qwen2.5-7B-Instruct", "Qwen/Qwen3-4B"])
def test_streamed_turns_keep_the_buffer_and_answers_of_turns_not_streamed(model):
    """Two gateways with the same seed (the fake engine samples by session and turn): one streams every turn, the other
    answers whole. Every streamed answer reassembles to the other's answer, and the buffers are identical."""
    from tito_audit.gateway.gateway import Gateway, GatewayConfig
    from tito_audit.gateway.server import running

    sglang_or_skip()
    machinery = machinery_of(model)
    config = GatewayConfig(model, parser="sglang", seed=11)
    with (
        running(Gateway(config, machinery=machinery)) as streamed,
        running(Gateway(config, machinery=machinery)) as whole,
    ):
        apis = [openai.OpenAI(base_url=u + "/v1", api_key="x", max_retries=0, timeout=60) for u in (streamed, whole)]
        incremental = 0
        for session in ("s1", "s2", "s3"):
            first = [{"role": "user", "content": "What is the weather in Paris, and any umbrellas?"}]
            histories: list[list[dict]] = [list(first), list(first)]  # each gateway answers with its own call ids
            for _ in range(4):
                args = {"model": model, "tools": TOOLS, "user": session}
                got, chunks = reassembled(apis[0].chat.completions.create(messages=histories[0], **args, stream=True))
                incremental += chunks[0].model_extra["tito"]["stream"]["mode"] == "incremental"
                assert chunks[-1].model_extra["tito"]["stream"]["diverged"] == []
                answer = apis[1].chat.completions.create(messages=histories[1], **args).choices[0]
                want = answer.message.model_dump(exclude_none=True)
                assert without_ids(got["message"]) == without_ids({"content": None, **want})
                assert got["finish"] == answer.finish_reason
                for history, message in zip(histories, (got["message"], want), strict=True):
                    history.append({k: v for k, v in message.items() if v is not None})
                    calls = message.get("tool_calls") or []
                    history += [{"role": "tool", "tool_call_id": c["id"], "content": "rain"} for c in calls] or [
                        {"role": "user", "content": "Thanks, and tomorrow?"}
                    ]
            records = [httpx.get(f"{u}/sessions/{session}").json() for u in (streamed, whole)]
            assert records[0]["buffer"] == records[1]["buffer"]
            assert records[0]["loss_mask"] == records[1]["loss_mask"]
            assert len(records[0]["turns"]) == 4
        assert incremental == 12  # SGLang's parsers stream: every turn was relayed as it was read


def test_a_parser_that_cannot_stream_says_so_in_the_first_chunk_and_answers_once_the_engine_ends():
    from tito_audit.gateway.gateway import Gateway, GatewayConfig
    from tito_audit.gateway.server import running

    model = "Qwen/Qwen2.5-7B-Instruct"
    gateway = Gateway(GatewayConfig(model, parser="template", seed=2), machinery=machinery_of(model))
    with running(gateway) as url:
        api = openai.OpenAI(base_url=url + "/v1", api_key="x", max_retries=0)
        args = {"model": model, "messages": [{"role": "user", "content": "hi"}], "tools": TOOLS, "user": "buf"}
        got, chunks = reassembled(api.chat.completions.create(**args, stream=True))
        first = chunks[0].model_extra["tito"]["stream"]
        assert first["mode"] == "buffered" and "template parser" in first["why"]
        answer = api.chat.completions.create(**args).choices[0].message.model_dump(exclude_none=True)
        assert got["message"] == {"content": None, **answer}  # the fake engine's own call ids: the same both times


def test_a_client_that_goes_away_mid_stream_leaves_the_session_as_it_was():
    from tito_audit.gateway.gateway import Gateway, GatewayConfig
    from tito_audit.gateway.server import running

    sglang_or_skip()
    model = "Qwen/Qwen2.5-7B-Instruct"
    gateway = Gateway(GatewayConfig(model, parser="sglang", seed=5), machinery=machinery_of(model))
    gateway.engine.piece_ids, gateway.engine.piece_seconds = 1, 0.05  # a slow stream: one id every 50 ms
    with running(gateway) as url:
        body = {"messages": [{"role": "user", "content": "Tell me about Paris."}], "max_tokens": 64}
        headers = {"X-Session-Id": "gone"}
        whole = httpx.post(f"{url}/v1/chat/completions", json=body, headers=headers, timeout=60).json()
        before = httpx.get(f"{url}/sessions/gone").json()
        follow = {**body, "stream": True}
        follow["messages"] = [*body["messages"], whole["choices"][0]["message"], {"role": "user", "content": "More."}]
        with httpx.stream("POST", f"{url}/v1/chat/completions", json=follow, headers=headers, timeout=60) as response:
            lines = response.iter_lines()
            read = [next(lines) for _ in range(6)]  # the first chunk and a few deltas, then the client hangs up
        assert any('"mode": "incremental"' in line for line in read)
        assert httpx.get(f"{url}/sessions/gone").json() == before  # no half turn
        # the same request, whole: it waits for the session's lock, so the stream has been closed by then; had the
        # abandoned turn been committed, these messages would be a retry of it
        again = httpx.post(f"{url}/v1/chat/completions", json={**follow, "stream": False}, headers=headers, timeout=60)
        assert again.status_code == 200 and again.json()["tito"]["turn"] == 2 and again.json()["tito"]["retry"] is False
        opened = {"messages": [{"role": "user", "content": "A new one."}], "stream": True}
        with httpx.stream("POST", f"{url}/v1/chat/completions", json=opened, headers={"X-Session-Id": "new"}) as r:
            next(r.iter_lines())
        fresh = httpx.post(
            f"{url}/v1/chat/completions", json={**opened, "stream": False}, headers={"X-Session-Id": "new"}
        )
        assert fresh.status_code == 200 and fresh.json()["tito"]["turn"] == 1 and fresh.json()["tito"]["retry"] is False
        assert httpx.get(f"{url}/healthz").json()["sessions"] == 2


def test_completion_stream_holds_back_what_a_parser_may_still_change():
    """The pieces: arguments compact, trailing whitespace held until text follows, and what was sent that the whole
    parse reads otherwise named as diverged (the client keeps what it got)."""
    from tito_audit.gateway.completion_stream import CompletionStream
    from tito_audit.parse.incremental import CallPiece, Increment

    class Pieces:
        def __init__(self, increments):
            self.increments = list(increments)

        def feed(self, text):
            return self.increments.pop(0) if self.increments else Increment()

        def end(self):
            return Increment()

    class FakeSession:
        import threading

        stop_ids = frozenset({0})
        reasoning_open = False
        prompt_text = ""
        lock = threading.Lock()

        class codec:
            @staticmethod
            def decode(ids):
                return "x" * len(ids)

        @staticmethod
        def buffer_tail(count):
            return []

        @staticmethod
        def decode_completion(ids):
            return "x" * len(ids)

    stream = CompletionStream(FakeSession(), None, None)
    stream._parser = Pieces(
        [
            Increment(content="Hello  "),
            Increment(content="world.\n"),
            Increment(calls=[CallPiece(0, "f", '{"a": 1,')]),
            Increment(calls=[CallPiece(0, None, ' "b": "x y"}')]),
        ]
    )
    stream.mode = "incremental"
    sent = [d for ids in ([1], [2], [3], [4]) for d in stream.feed(ids)]
    assert [(d.field, d.text) for d in sent if d.field == "content"] == [("content", "Hello"), ("content", "  world.")]
    assert "".join(d.text for d in sent if d.field == "arguments") == '{"a":1,"b":"x y"}'
    wire = {
        "content": "Hello  world.",
        "tool_calls": [{"id": "c", "function": {"name": "f", "arguments": '{"a":1,"b":"x y"}'}}],
    }
    rest, got = stream.finish(wire)
    assert rest == [] and stream.diverged == [] and got["content"] == "Hello  world."
    other = CompletionStream(FakeSession(), None, None)
    other._parser = Pieces([Increment(content="Hi there")])
    other.feed([1])
    rest, got = other.finish({"content": "Bye", "tool_calls": []})
    assert other.diverged == ["content"] and got["content"] == "Hi there" and rest == []
    assert json.loads(got.get("tool_calls", [{}])[0]["function"]["arguments"]) if got.get("tool_calls") else True
