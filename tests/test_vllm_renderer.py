"""vLLM's renderer as a reference, for real: ``vllm launch render`` started (and stopped) by the test on a shared
tokenizer folder, on 127.0.0.1; the prompt ids of the audit's conversations equal ours, and the derender of the audit's
drawn completions equals what ``--parser vllm`` made of them. ``make vllm-renderer`` does every shared model."""

from __future__ import annotations

import os

import pytest

from tests.conftest import SHARED_TOKENIZERS, requires_shared
from tito_audit.audit import vllm_reference
from tito_audit.model.load_by_id import load_by_id
from tito_audit.parse import vllm

if not vllm.available() and os.environ.get("CI") == "true":
    raise RuntimeError(f"vLLM is not installed on CI, so its tests cannot run; install it with: {vllm.INSTALL}")
pytestmark = [
    requires_shared,
    pytest.mark.skipif(not vllm.available(), reason=f"vLLM is not installed ({vllm.INSTALL})"),
]


def test_vllms_renderer_gives_our_prompt_ids_and_our_parse():
    loaded = load_by_id("Qwen/Qwen2.5-7B-Instruct", mirrors=[SHARED_TOKENIZERS], allow_hub=False)
    comparison = vllm_reference.compare(loaded, count=2)
    assert not comparison.skipped, comparison.skipped
    lines = "\n".join(vllm_reference.report_lines(comparison))
    assert comparison.renders[1] >= 3 and comparison.renders[0] == comparison.renders[1], lines
    assert comparison.derenders[1] >= 1 and comparison.derenders[0] == comparison.derenders[1], lines


def test_messages_are_sent_as_an_openai_client_sends_them_to_vllm():
    message = {
        "role": "assistant",
        "content": "",
        "reasoning_content": "why",
        "tool_calls": [{"type": "function", "function": {"name": "ls", "arguments": {"path": "é"}}}],
    }
    sent = vllm_reference.vllm_message(message)
    assert sent["reasoning"] == "why" and "reasoning_content" not in sent
    assert sent["tool_calls"][0]["function"]["arguments"] == '{"path": "é"}'
    as_string = {**message, "tool_calls": [{"function": {"name": "ls", "arguments": '{"path": "."}'}}]}
    assert vllm_reference.as_vllm_renders(as_string)["tool_calls"][0]["function"]["arguments"] == {"path": "."}
