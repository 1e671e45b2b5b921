"""The gateway through its real HTTP path (uvicorn on a loopback port, the official ``openai`` client) with the fake
engine and a real tokenizer: the buffer it keeps is the one a TitoSession fed the same turns keeps, history edits
are refused, streamed chunks reassemble to the answer, and bad requests get one line and the right status."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
import warnings

import pytest

from tests.conftest import SHARED_TOKENIZERS, requires_shared

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
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}, "unit": {"type": "string", "enum": ["c", "f"]}},
                "required": ["city"],
            },
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


@pytest.fixture(scope="module")
def machinery():
    from tito_audit.session.machinery import ModelSourceSettings, machinery_for

    source = ModelSourceSettings.of([SHARED_TOKENIZERS], None, None, False, False, None, None)
    return machinery_for(MODEL, source, None, ())


@pytest.fixture(scope="module")
def served(machinery):
    from tito_audit.gateway.gateway import Gateway, GatewayConfig
    from tito_audit.gateway.server import running

    config = GatewayConfig(MODEL, parser="template", seed=7, max_request_bytes=64 * 1024, on_rewrite="refuse")
    gateway = Gateway(config, machinery=machinery)
    with running(gateway) as url:
        yield gateway, url


def client(url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0, timeout=30)


def tool_results(message) -> list[dict]:
    return [
        {"role": "tool", "tool_call_id": call.id, "content": json.dumps({"city": "Paris", "sky": "clear"})}
        for call in message.tool_calls or []
    ]


def echo(message) -> dict:
    """What an agent sends back: the message as the client parsed it."""
    return message.model_dump(exclude_none=True)


def test_three_tool_turns_keep_the_buffer_a_session_keeps(served, machinery):
    from tito_audit.gateway.fake import FakeEngine
    from tito_audit.gateway.sampling_engines import EngineRequest
    from tito_audit.session import TitoSession

    gateway, url = served
    api = client(url)
    messages: list[dict] = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Weather?"}]
    answers = []
    for _ in range(3):
        response = api.chat.completions.create(
            model=MODEL, messages=messages, tools=TOOLS, extra_headers={"X-Session-Id": "three"}, temperature=0.7
        )
        message = response.choices[0].message
        answers.append(message)
        messages.append(echo(message))
        messages += tool_results(message) or [{"role": "user", "content": "And tomorrow?"}]
    record = httpx.get(f"{url}/sessions/three").json()

    # the same turns fed to a TitoSession by hand, the completions drawn from the fake engine directly
    fake = FakeEngine(machinery, seed=7, clock=gateway.engine.clock)
    reference = TitoSession.from_model(
        MODEL, tools=TOOLS, mirrors=[SHARED_TOKENIZERS], allow_hub=False, on_break="warn"
    )
    reference.start(messages[:2])
    position = 2
    for turn, answer in enumerate(answers):
        sampled = fake.sample(EngineRequest([], {}, [], MODEL, reference.messages, TOOLS, "auto", "three", turn))
        assert (answer.content or "") == (sampled.message.get("content") or "")
        got_calls = [(c.function.name, json.loads(c.function.arguments)) for c in answer.tool_calls or []]
        want_calls = [
            (c["function"]["name"], c["function"]["arguments"]) for c in sampled.message.get("tool_calls", [])
        ]
        assert got_calls == want_calls
        following = messages[position + 1 : position + 1 + max(1, len(answer.tool_calls or []))]
        position += 1 + len(following)
        if turn < len(answers) - 1:
            reference.extend(sampled.ids, sampled.message, following)
        else:
            reference.finish(sampled.ids, sampled.message)
    assert record["buffer"] == reference.buffer
    assert record["loss_mask"] == reference.loss_mask
    assert [t["completion"] for t in record["turns"]] == [list(t.completion) for t in reference.turns]
    assert sum(record["loss_mask"]) == sum(end - start for start, end in (t["completion"] for t in record["turns"]))
    assert any(a.tool_calls for a in answers)
    codec = machinery.codec
    sampled_ids = [record["buffer"][start:end] for start, end in (t["completion"] for t in record["turns"])]
    assert any(ids != codec.encode(codec.decode(ids)) for ids in sampled_ids)  # a non-canonical split was kept


def test_an_edit_of_earlier_history_is_refused_and_changes_nothing(served):
    _, url = served
    api = client(url)
    messages = [{"role": "user", "content": "Find shoes."}]
    first = api.chat.completions.create(model=MODEL, messages=messages, tools=TOOLS, user="edits").choices[0].message
    before = httpx.get(f"{url}/sessions/edits").json()
    edited_user = [{"role": "user", "content": "Find boots."}, echo(first), *tool_results(first)]
    edited_user += [] if first.tool_calls else [{"role": "user", "content": "ok"}]
    with pytest.raises(openai.APIStatusError) as refused:
        api.chat.completions.create(model=MODEL, messages=edited_user, tools=TOOLS, user="edits")
    assert refused.value.status_code == 400  # not 409, which the official SDKs retry to the same refusal
    assert "messages[0]" in refused.value.message and "only appends" in refused.value.message
    changed = {**echo(first), "content": "something I never said"}
    with pytest.raises(openai.APIStatusError) as refused_answer:
        api.chat.completions.create(
            model=MODEL, messages=[*messages, changed, *edited_user[2:]], tools=TOOLS, user="edits"
        )
    assert refused_answer.value.status_code == 400 and "messages[1]" in refused_answer.value.message
    assert httpx.get(f"{url}/sessions/edits").json() == before


def test_streamed_chunks_reassemble_to_the_answer(served):
    _, url = served
    api = client(url)
    messages = [{"role": "user", "content": "Search for a mug."}]
    stream = api.chat.completions.create(
        model=MODEL,
        messages=messages,
        tools=TOOLS,
        user="streamed",
        stream=True,
        stream_options={"include_usage": True},
    )
    content, reasoning, calls, finish, usage = "", "", {}, None, None
    for chunk in stream:
        if chunk.usage is not None:
            usage = chunk.usage
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
    # the same messages again are a retry of the turn: the seeded fake engine samples the same answer
    whole = api.chat.completions.create(model=MODEL, messages=messages, tools=TOOLS, user="streamed")
    message = whole.choices[0].message
    assert content == (message.content or "")
    assert reasoning == ((message.model_extra or {}).get("reasoning_content") or "")
    assert [calls[i] for i in sorted(calls)] == [
        {"id": c.id, "name": c.function.name, "arguments": c.function.arguments} for c in message.tool_calls or []
    ]
    assert finish == whole.choices[0].finish_reason
    assert usage is not None and usage.completion_tokens == whole.usage.completion_tokens
    assert whole.model_extra["tito"]["retry"] is True


def test_sessions_endpoints_and_bad_requests(served):
    _, url = served
    api = client(url)
    api.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "hi"}], user="gone")
    assert httpx.get(f"{url}/healthz").json()["status"] == "ok"
    assert httpx.delete(f"{url}/sessions/gone").status_code == 200
    missing = httpx.get(f"{url}/sessions/gone")
    assert missing.status_code == 404 and "no session 'gone'" in missing.json()["error"]["message"]
    assert httpx.delete(f"{url}/sessions/gone").status_code == 404
    resumed = [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "x"},
        {"role": "user", "content": "?"},
    ]
    unknown = httpx.post(f"{url}/v1/chat/completions", json={"messages": resumed}, headers={"X-Session-Id": "nope"})
    # a conversation the gateway has not seen: its assistant turn is context, rendered and never in the loss
    assert unknown.status_code == 200, unknown.text
    resumed_record = httpx.get(f"{url}/sessions/nope").json()
    assert resumed_record["unsampled"] == [1] and len(resumed_record["turns"]) == 1
    assert sum(resumed_record["loss_mask"]) == resumed_record["trainable"]["in_loss"] > 0
    malformed = httpx.post(f"{url}/v1/chat/completions", content=b'{"messages": [', headers={"X-Session-Id": "m"})
    assert malformed.status_code == 400 and malformed.json()["error"]["code"] == "invalid_json"
    oversized = httpx.post(f"{url}/v1/chat/completions", json={"messages": [{"role": "user", "content": "x" * 70_000}]})
    assert oversized.status_code == 413
    bad_role = httpx.post(f"{url}/v1/chat/completions", json={"messages": [{"role": "robot", "content": "x"}]})
    assert bad_role.status_code == 400 and "messages[0].role" in bad_role.json()["error"]["message"]
    odd_tool = {"type": "function", "function": {"name": "odd", "parameters": {"type": "object", "not": {}}}}
    undrawable = httpx.post(
        f"{url}/v1/chat/completions",
        json={"messages": [{"role": "user", "content": "x"}], "tools": [odd_tool], "tool_choice": "required"},
        headers={"X-Session-Id": "odd"},
    )
    assert undrawable.status_code == 400 and undrawable.json()["error"]["code"] == "tool_schema"
    assert "odd" in undrawable.json()["error"]["message"] and "not" in undrawable.json()["error"]["message"]
    for error in (missing, malformed, oversized, bad_role, undrawable):
        assert "\n" not in error.json()["error"]["message"]
    assert httpx.get(f"{url}/healthz").status_code == 200  # still up


def test_bearer_token_and_session_bound(machinery):
    from tito_audit.gateway.gateway import Gateway, GatewayConfig
    from tito_audit.gateway.server import running

    gateway = Gateway(GatewayConfig(MODEL, parser="template", api_key="s3cret", max_sessions=2), machinery=machinery)
    with running(gateway) as url:
        body = {"messages": [{"role": "user", "content": "hi"}]}
        assert httpx.post(f"{url}/v1/chat/completions", json=body).status_code == 401
        assert (
            httpx.post(f"{url}/v1/chat/completions", json=body, headers={"Authorization": "Bearer no"}).status_code
            == 401
        )
        api = openai.OpenAI(base_url=url + "/v1", api_key="s3cret", max_retries=0)
        for name in ("a", "b", "c"):
            api.chat.completions.create(model=MODEL, messages=body["messages"], user=name)
        health = httpx.get(f"{url}/healthz").json()
        assert health["sessions"] == 2 and health["evicted"] == 1
        auth = {"Authorization": "Bearer s3cret"}
        assert httpx.get(f"{url}/sessions/a", headers=auth).status_code == 404  # the least recently used went
        assert httpx.get(f"{url}/sessions/c", headers=auth).status_code == 200


def test_idle_sessions_expire(machinery):
    from tito_audit.gateway.gateway import Gateway, GatewayConfig
    from tito_audit.gateway.server import running

    gateway = Gateway(GatewayConfig(MODEL, parser="template", session_idle=0.3), machinery=machinery)
    with running(gateway) as url:
        client(url).chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "hi"}], user="idle")
        assert httpx.get(f"{url}/sessions/idle").status_code == 200
        time.sleep(0.5)
        assert httpx.get(f"{url}/sessions/idle").status_code == 404
        assert httpx.get(f"{url}/healthz").json()["expired"] == 1


def test_serve_refuses_to_start_in_one_line():
    from tito_audit.parse import sglang

    if sglang.available():
        pytest.skip("SGLang's parsers are installed here: --parser auto finds one and serve starts")
    command = [sys.executable, "-m", "tito_audit", "serve", MODEL, "--mirror", str(SHARED_TOKENIZERS), "--no-hub"]
    done = subprocess.run([*command, "--engine", "http://127.0.0.1:9"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "llm-router-utils" in lines[0] and "--parser" in lines[0], done.stderr


def test_the_engines_parser_reads_the_sampled_ids(machinery):
    """With SGLang's parsers installed, the gateway parses the ids itself (no help from the fake engine's message)."""
    from tito_audit.gateway.gateway import Gateway, GatewayConfig
    from tito_audit.parse import sglang

    if not sglang.available():
        pytest.skip(f"SGLang's parsers are not installed ({sglang.INSTALL})")
    gateway = Gateway(GatewayConfig(MODEL, parser="sglang", seed=3), machinery=machinery)
    assert gateway.parser_name.startswith("sglang")
    parsed_turns_give_the_engines_calls(gateway, machinery)


def parsed_turns_give_the_engines_calls(gateway, machinery) -> list:
    """Three turns through ``gateway`` (its parser on the fake engine's sampled ids): each answer's calls are the ones
    the fake engine rendered its turn from. Returns the answers' messages."""
    from tito_audit.gateway.fake import FakeEngine
    from tito_audit.gateway.sampling_engines import EngineRequest
    from tito_audit.gateway.server import running

    fake = FakeEngine(machinery, seed=3, clock=gateway.engine.clock)
    answers = []
    with running(gateway) as url:
        api = client(url)
        messages: list[dict] = [{"role": "user", "content": "Weather in Paris?"}]
        for turn in range(3):
            # what the session holds when the engine is asked: its messages, then the ones this request appends
            kept = httpx.get(f"{url}/sessions/parsed").json()["messages"] if turn else []
            history = kept + messages[len(kept) :]
            sampled = fake.sample(EngineRequest([], {}, [], MODEL, history, TOOLS, "auto", "parsed", turn))
            response = api.chat.completions.create(model=MODEL, messages=messages, tools=TOOLS, user="parsed")
            message = response.choices[0].message
            assert response.model_extra["tito"]["parser"] == gateway.parser_name
            got = [(c.function.name, json.loads(c.function.arguments)) for c in message.tool_calls or []]
            assert got == [
                (c["function"]["name"], c["function"]["arguments"]) for c in sampled.message.get("tool_calls", [])
            ]
            answers.append(message)
            messages.append(echo(message))
            messages += tool_results(message) or [{"role": "user", "content": "And tomorrow?"}]
        stream = api.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "Hi"}], tools=TOOLS, user="streamed", stream=True
        )
        chunks = list(stream)
        assert chunks and chunks[-1].choices[0].finish_reason in ("stop", "tool_calls")
    return answers


def test_a_fork_changes_nothing_in_the_session_it_came_from(machinery):
    from tito_audit.session import TitoSession

    session = TitoSession(machinery, tools=TOOLS)
    session.start([{"role": "user", "content": "Weather?"}])
    codec = machinery.codec
    answer = {"role": "assistant", "content": "Let me check."}
    completion = codec.encode("Let me check.<|im_end|>")
    session.extend(completion, answer, [{"role": "user", "content": "Go on."}])
    buffer, mask, turns, messages = session.buffer, session.loss_mask, session.turns, session.messages
    twin = session.fork()
    twin.extend(completion, answer, [{"role": "user", "content": "Again."}])
    twin.finish(completion, answer)
    assert (session.buffer, session.loss_mask, session.turns, session.messages) == (buffer, mask, turns, messages)
    assert twin.buffer[: len(buffer)] == buffer and len(twin.turns) == len(turns) + 2
    session.finish(completion, answer)  # the original goes on as if the fork never happened
    assert session.buffer == buffer + completion


@pytest.mark.parametrize("policy", ["raise", "warn"])
def test_a_template_break_follows_on_break_and_is_reported(policy):
    """Qwen3-4B rewrites an earlier turn once a user speaks again: it drops its reasoning (reasoning-pruned) or the
    empty block a model that closed it at once wrote (empty-think-dropped)."""
    from tito_audit.gateway.gateway import Gateway, GatewayConfig
    from tito_audit.gateway.server import running
    from tito_audit.session import TitoBreakWarning

    config = GatewayConfig(
        "Qwen/Qwen3-4B", parser="template", on_break=policy, mirrors=[SHARED_TOKENIZERS], allow_hub=False
    )
    with running(Gateway(config)) as url, warnings.catch_warnings():
        warnings.simplefilter("ignore", TitoBreakWarning)  # the server thread warns; the response says it
        messages: list[dict] = [{"role": "user", "content": "Hi there"}]
        for turn in range(8):
            before = httpx.get(f"{url}/sessions/brk").json() if turn else None
            answer = httpx.post(
                f"{url}/v1/chat/completions", json={"messages": messages}, headers={"X-Session-Id": "brk"}
            )
            if policy == "raise" and answer.status_code == 422:
                error = answer.json()["error"]
                assert error["code"] == "tito_break"
                assert "[reasoning-pruned]" in error["message"] or "[empty-think-dropped]" in error["message"]
                assert httpx.get(f"{url}/sessions/brk").json() == before
                return
            assert answer.status_code == 200, answer.text
            breaks = answer.json()["tito"]["breaks"]
            if breaks:
                assert policy == "warn" and breaks[0]["causes"] and breaks[0]["handled"].startswith("warned")
                record = httpx.get(f"{url}/sessions/brk").json()
                assert record["breaks"] and any(t["broke"] for t in record["turns"])
                spans = sum(end - start for start, end in (t["completion"] for t in record["turns"]))
                assert sum(record["loss_mask"]) == spans
                return
            messages += [answer.json()["choices"][0]["message"], {"role": "user", "content": f"More, please ({turn})."}]
    pytest.fail("no break in 8 turns")


def test_ctrl_c_stops_the_server_within_seconds():
    from tito_audit.gateway.server import free_port

    port = free_port()
    command = [sys.executable, "-m", "tito_audit", "serve", MODEL, "--mirror", str(SHARED_TOKENIZERS), "--no-hub"]
    command += ["--parser", "template", "--port", str(port)]
    # Ctrl-C's default action, as from a terminal (a background shell would have SIGINT ignored)
    server = subprocess.Popen(command, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.2)
        started = time.monotonic()
        server.send_signal(signal.SIGINT)
        assert server.wait(timeout=15) == 130
        assert time.monotonic() - started < 5
    finally:
        if server.poll() is None:
            server.kill()
