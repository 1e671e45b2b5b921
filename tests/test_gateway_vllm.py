"""``serve --parser vllm``: the gateway parses the sampled ids with vLLM's own parsers (its worker process), through
the official ``openai`` client, whole and streamed (a stream with vLLM's parsers is answered once the completion is
whole, and says why)."""

from __future__ import annotations

import json
import os

import pytest

from tests.conftest import requires_shared
from tests.test_gateway import MODEL, TOOLS, client, echo, machinery, tool_results  # noqa: F401 (the fixture)
from tito_audit.parse import vllm

if not vllm.available() and os.environ.get("CI") == "true":
    raise RuntimeError(f"vLLM is not installed on CI, so its tests cannot run; install it with: {vllm.INSTALL}")
httpx = pytest.importorskip("httpx")
pytestmark = [
    requires_shared,
    pytest.mark.shared,
    pytest.mark.skipif(not vllm.available(), reason=f"vLLM's parsers are not installed ({vllm.INSTALL})"),
]


def test_the_gateway_parses_the_sampled_ids_with_vllms_parser(machinery):  # noqa: F811
    from tito_audit.gateway.engines import EngineRequest
    from tito_audit.gateway.fake import FakeEngine
    from tito_audit.gateway.server import running
    from tito_audit.gateway.service import Gateway, GatewayConfig

    gateway = Gateway(GatewayConfig(MODEL, parser="vllm", seed=3), machinery=machinery)
    assert gateway.parser_name == "vllm hermes"
    fake = FakeEngine(machinery, seed=3, clock=gateway.engine.clock)
    with running(gateway) as url:
        api = client(url)
        messages: list[dict] = [{"role": "user", "content": "Weather in Paris?"}]
        calls = 0
        for turn in range(3):
            kept = httpx.get(f"{url}/sessions/parsed").json()["messages"] if turn else []
            history = kept + messages[len(kept) :]
            sampled = fake.sample(EngineRequest([], {}, [], MODEL, history, TOOLS, "auto", "parsed", turn))
            response = api.chat.completions.create(model=MODEL, messages=messages, tools=TOOLS, user="parsed")
            message = response.choices[0].message
            assert response.model_extra["tito"]["parser"] == "vllm hermes"
            got = [(c.function.name, json.loads(c.function.arguments)) for c in message.tool_calls or []]
            assert got == [
                (c["function"]["name"], c["function"]["arguments"]) for c in sampled.message.get("tool_calls", [])
            ]
            assert all(c.id.startswith("chatcmpl-tool-") for c in message.tool_calls or [])
            calls += len(got)
            messages.append(echo(message))
            messages += tool_results(message) or [{"role": "user", "content": "And tomorrow?"}]
        assert calls
        stream = api.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "Hi"}], tools=TOOLS, user="streamed", stream=True
        )
        chunks = list(stream)
        assert chunks and chunks[-1].choices[0].finish_reason in ("stop", "tool_calls")
