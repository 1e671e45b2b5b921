"""The gateway in front of a token-in engine that fails: a stub speaking vLLM's and SGLang's shapes that can answer,
fail with 5xx, stall, answer ids outside the vocabulary, no ids at all, nonsense or JSON nested 100,000 deep, or die
mid-request. The client gets an OpenAI-style error naming the cause (502/504), the session stays as it was, and the
server stays up."""

from __future__ import annotations

import json
import time

import pytest

from tests.conftest import SHARED_TOKENIZERS, requires_shared
from tests.gateway_stub import StubEngine

pytest.importorskip("starlette", reason="the gateway extra is not installed (pip install -e '.[gateway]')")
httpx = pytest.importorskip("httpx")

pytestmark = [requires_shared, pytest.mark.shared]

MODEL = "Qwen/Qwen2.5-7B-Instruct"


class PlainParser:
    """A parser object (the library accepts any): the completion's text is the content."""

    name = "plain"

    def parse(self, given):
        return {"role": "assistant", "content": given.text}


@pytest.fixture(scope="module")
def machinery():
    from tito_audit.session.machinery import ModelSourceSettings, machinery_for

    source = ModelSourceSettings.of([SHARED_TOKENIZERS], None, None, False, False, None, None)
    return machinery_for(MODEL, source, None, ())


@pytest.fixture(scope="module", params=["vllm", "sglang"])
def setup(request, machinery):
    from tito_audit.gateway.gateway import Gateway, GatewayConfig
    from tito_audit.gateway.server import running

    codec = machinery.codec
    stub = StubEngine(codec.encode("It is sunny.<|im_end|>"))
    config = GatewayConfig(MODEL, engine=stub.url, engine_api=request.param, parser=PlainParser(), engine_timeout=0.5)
    with running(Gateway(config, machinery=machinery)) as url:
        yield stub, url, request.param
    stub.close()


def chat(url: str, messages: list[dict], session: str) -> httpx.Response:
    body = {"messages": messages, "max_tokens": 64}
    return httpx.post(f"{url}/v1/chat/completions", json=body, headers={"X-Session-Id": session}, timeout=20)


def test_engine_faults_leave_the_session_as_it_was(setup):
    stub, url, api = setup
    stub.mode = "ok"
    first = [{"role": "user", "content": "Weather?"}]
    answer = chat(url, first, f"f-{api}")
    assert answer.status_code == 200, answer.text
    assert answer.json()["choices"][0]["message"]["content"] == "It is sunny."
    sent = stub.bodies[-1]
    if api == "vllm":
        assert sent["path"] == "/v1/completions" and sent["return_token_ids"] is True and sent["max_tokens"] == 64
        assert sent["model"] == MODEL and sent["stop_token_ids"] and sent["skip_special_tokens"] is False
        prompt = sent["prompt"]
    else:  # the stop token left out of output_ids comes back from meta_info's matched id
        assert sent["path"] == "/generate" and sent["sampling_params"]["max_new_tokens"] == 64
        prompt = sent["input_ids"]
    before = httpx.get(f"{url}/sessions/f-{api}").json()
    assert before["buffer"][: len(prompt)] == prompt and before["turns"][0]["stopped"] is True
    follow = [*first, answer.json()["choices"][0]["message"], {"role": "user", "content": "And tomorrow?"}]
    for mode, status, code in (
        ("5xx", 502, "engine_error"),
        ("slow", 504, "engine_timeout"),
        ("bad_ids", 502, "engine_bad_ids"),
        ("garbage", 502, "engine_bad_response"),
        ("deep", 502, "engine_bad_response"),
        ("empty", 502, "engine_empty"),
        ("kill", 502, "engine_unreachable"),
    ):
        stub.mode = mode
        failed = chat(url, follow, f"f-{api}")
        assert failed.status_code == status, (mode, failed.text)
        error = failed.json()["error"]
        assert error["code"] == code and "\n" not in error["message"]
        assert httpx.get(f"{url}/sessions/f-{api}").json() == before, mode
    stub.mode = "ok"
    time.sleep(1.2)  # the stalled answer is over
    resumed = chat(url, follow, f"f-{api}")
    assert resumed.status_code == 200
    after = httpx.get(f"{url}/sessions/f-{api}").json()
    assert after["buffer"][: len(before["buffer"])] == before["buffer"] and len(after["turns"]) == 2


def test_a_failed_first_turn_opens_no_session_and_an_engine_that_is_down(setup, machinery):
    from tito_audit.gateway.gateway import Gateway, GatewayConfig
    from tito_audit.gateway.server import free_port, running

    stub, url, api = setup
    stub.mode = "5xx"
    assert chat(url, [{"role": "user", "content": "hi"}], f"new-{api}").status_code == 502
    assert httpx.get(f"{url}/sessions/new-{api}").status_code == 404
    stub.mode = "ok"
    if api == "sglang":
        return
    down = GatewayConfig(MODEL, engine=f"http://127.0.0.1:{free_port()}", parser=PlainParser(), engine_timeout=2)
    with running(Gateway(down, machinery=machinery)) as other:
        failed = chat(other, [{"role": "user", "content": "hi"}], "down")
        assert failed.status_code == 502 and failed.json()["error"]["code"] == "engine_unreachable"
        assert httpx.get(f"{other}/healthz").status_code == 200


def test_a_real_engine_without_a_parser_refuses_to_start(machinery):
    from tito_audit.errors import BadInputError
    from tito_audit.gateway.gateway import Gateway, GatewayConfig
    from tito_audit.parse import sglang

    if sglang.available():
        pytest.skip("SGLang's parsers are installed here: auto finds a real parser")
    with pytest.raises(BadInputError, match=r"install SGLang's parsers"):
        Gateway(GatewayConfig(MODEL, engine="http://127.0.0.1:1", parser="auto"), machinery=machinery)
    with pytest.raises(BadInputError, match="--engine must be"):
        Gateway(GatewayConfig(MODEL, engine="ftp://x", parser="template"), machinery=machinery)


# -- the dialects, the streaming path and branches, through the same faults -----------------------------------------
def dialect_body(dialect: str, messages: list[dict], stream: bool) -> tuple[str, dict]:
    """A request of ``dialect`` carrying ``messages`` (user and assistant text only)."""
    if dialect == "chat":
        return "/v1/chat/completions", {"messages": messages, "max_tokens": 64, "stream": stream}
    if dialect == "responses":
        items = [{"role": m["role"], "content": m["content"]} for m in messages]
        return "/v1/responses", {"input": items, "max_output_tokens": 64, "stream": stream}
    return "/v1/messages", {"messages": messages, "max_tokens": 64, "stream": stream}


def answered_text(dialect: str, body: dict) -> str:
    if dialect == "chat":
        return body["choices"][0]["message"]["content"]
    if dialect == "responses":
        return "".join(part["text"] for item in body["output"] if item["type"] == "message" for part in item["content"])
    return "".join(block["text"] for block in body["content"] if block["type"] == "text")


def send(url: str, dialect: str, messages: list[dict], session: str, stream: bool) -> tuple[int, str, str]:
    """(status, what the answer said or the error's code, the text answered)."""
    path, body = dialect_body(dialect, messages, stream)
    response = httpx.post(f"{url}{path}", json=body, headers={"X-Session-Id": session}, timeout=20)
    if response.status_code != 200:
        error = response.json()["error"]
        assert "\n" not in error["message"]
        return response.status_code, error["code"], ""
    if not stream:
        return 200, "ok", answered_text(dialect, response.json())
    events = [line[5:].strip() for line in response.text.splitlines() if line.startswith("data:")]
    decoded = [json.loads(e) for e in events if e != "[DONE]"]
    errors = [e for e in decoded if "error" in e or e.get("type") in ("error", "response.failed")]
    if errors:
        error = errors[0].get("error") or errors[0]
        assert "\n" not in error["message"]
        return 200, "error event: " + str(error.get("code")), ""
    text = ""
    for event in decoded:
        if dialect == "chat":
            text += "".join(choice["delta"].get("content") or "" for choice in event["choices"])
        elif event.get("type") == "response.output_text.delta":
            text += event["delta"]
        elif event.get("type") == "content_block_delta" and event["delta"]["type"] == "text_delta":
            text += event["delta"]["text"]
    return 200, "ok", text


def test_each_dialect_streamed_or_not_through_the_faults(setup, machinery):
    """Every dialect, whole and streamed, through the faults: vLLM's shapes with --on-rewrite refuse, SGLang's (its
    streamed ids cumulative, and only the new ones for the Messages API) with --on-rewrite branch."""
    from tito_audit.gateway.gateway import Gateway, GatewayConfig
    from tito_audit.gateway.server import running

    stub, _, api = setup
    on_rewrite = "branch" if api == "sglang" else "refuse"
    # a margin of seconds between the time-out and a stalled answer: a loaded machine still answers the rest in time
    config = GatewayConfig(
        MODEL, engine=stub.url, engine_api=api, parser=PlainParser(), engine_timeout=1.0, on_rewrite=on_rewrite
    )
    stub.slow_seconds = 4.0
    first = [{"role": "user", "content": "Weather?"}]
    with running(Gateway(config, machinery=machinery)) as url:
        for dialect in ("chat", "responses", "messages"):
            for stream in (False, True):
                stub.mode, stub.sglang_incremental = "ok", stream and dialect == "messages"  # both of SGLang's forms
                session = f"{dialect}-{stream}-{api}-{on_rewrite}"
                assert send(url, dialect, first, session, stream) == (200, "ok", "It is sunny."), (dialect, stream)
                before = httpx.get(f"{url}/sessions/{session}").json()
                follow = [*first, {"role": "assistant", "content": "It is sunny."}, {"role": "user", "content": "?"}]
                faults = [("5xx", 502, "engine_error"), ("slow", 504, "engine_timeout"), ("kill", 502, None)]
                faults += [("garbage", 502, "engine_bad_response")] if not stream else []
                faults += (
                    [(m, 200, None) for m in ("kill_mid", "garbage_mid", "error_mid", "slow_mid")] if stream else []
                )
                for mode, status, code in faults:
                    stub.mode = mode
                    got_status, said, _ = send(url, dialect, follow, session, stream)
                    assert got_status == status, (dialect, stream, mode, said)
                    assert said.startswith("error event") if status == 200 else (code is None or said == code)
                    assert httpx.get(f"{url}/sessions/{session}").json() == before, (dialect, stream, mode)
                stub.mode = "ok"  # a stalled answer still under way in the stub does not hold the next one
                assert send(url, dialect, follow, session, stream) == (200, "ok", "It is sunny.")
                after = httpx.get(f"{url}/sessions/{session}").json()
                assert after["buffer"][: len(before["buffer"])] == before["buffer"] and len(after["turns"]) == 2
                assert len(after.get("branches", [after])) == 1  # no fault opened a branch
    stub.slow_seconds = 1.5
