"""``serve --parser vllm``: the gateway parses the sampled ids with vLLM's own parsers (its worker process), through
the official ``openai`` client, whole and streamed (a stream with vLLM's parsers is answered once the completion is
whole, and says why)."""

from __future__ import annotations

import os

import pytest

from tests.conftest import requires_shared
from tests.test_gateway import MODEL, machinery, parsed_turns_give_the_engines_calls  # noqa: F401 (the fixture)
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
    from tito_audit.gateway.gateway import Gateway, GatewayConfig

    gateway = Gateway(GatewayConfig(MODEL, parser="vllm", seed=3), machinery=machinery)
    assert gateway.parser_name == "vllm hermes"
    answers = parsed_turns_give_the_engines_calls(gateway, machinery)
    calls = [call for message in answers for call in message.tool_calls or []]
    assert calls and all(call.id.startswith("chatcmpl-tool-") for call in calls)
