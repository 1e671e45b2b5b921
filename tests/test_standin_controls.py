"""A template-only model (no vocabulary) knows the control tokens its config names, whatever they look like.

Gemma 4 writes turns as ``<|turn>model ... <turn|>`` and calls as ``<|tool_call> ... <tool_call|>``; none of these
look like ``<|x|>``, but its tokenizer config names them (``sot_token``, ``eot_token``, ``stc_token``...). A
template that merges consecutive assistant messages into one turn replaces the ``<turn|>`` the engine stopped on
with the next message's ``<|tool_call>``: that is ``stop-token-swap``, and the classifier can only say so when it
knows both texts are control tokens.
"""

from __future__ import annotations

import json
from pathlib import Path

from tests.helpers import run_audit
from tito_audit.model.load_folder import codec_for, load_model
from tito_audit.model.resolve import resolve_model
from tito_audit.model.standin import special_tokens_of

MERGING_TEMPLATE = """{{- bos_token -}}
{%- for message in messages -%}
  {%- set previous = messages[loop.index0 - 1].role if not loop.first else none -%}
  {%- set following = messages[loop.index0 + 1].role if not loop.last else none -%}
  {%- if message.role == 'assistant' -%}
    {%- if previous != 'assistant' -%}<|turn>model
{% endif -%}
    {{- message.content or '' -}}
    {%- for call in message.tool_calls or [] -%}
      <|tool_call>call:{{ call.function.name }}{{ call.function.arguments | tojson }}<tool_call|>
    {%- endfor -%}
    {%- if following != 'assistant' and not message.tool_calls -%}<turn|>
{% endif -%}
  {%- elif message.role == 'tool' -%}
    <|tool_response>{{ message.content }}<tool_response|>
  {%- else -%}
    <|turn>{{ message.role }}
{{ message.content }}<turn|>
{% endif -%}
{%- endfor -%}
{%- if add_generation_prompt and messages[-1].role != 'tool' -%}<|turn>model
{% endif -%}
"""

CONFIG = {
    "bos_token": "<bos>",
    "eos_token": "<eos>",
    "sot_token": "<|turn>",
    "eot_token": "<turn|>",
    "stc_token": "<|tool_call>",
    "etc_token": "<tool_call|>",
    "str_token": "<|tool_response>",
    "etr_token": "<tool_response|>",
    "add_bos_token": True,
    "extra_special_tokens": ["<|video|>"],
}


def _template_only_folder(root: Path) -> Path:
    folder = root / "tiny-org--turn-model"
    folder.mkdir()
    (folder / "tokenizer_config.json").write_text(json.dumps(CONFIG), encoding="utf-8")
    (folder / "chat_template.jinja").write_text(MERGING_TEMPLATE, encoding="utf-8")
    (folder / "generation_config.json").write_text(json.dumps({"eos_token_id": [1]}), encoding="utf-8")
    return folder


def test_config_named_tokens_are_controls(tmp_path):
    folder = _template_only_folder(tmp_path)
    facts = special_tokens_of(folder, {"default": MERGING_TEMPLATE}, {})
    for text in ("<|turn>", "<turn|>", "<|tool_call>", "<tool_call|>", "<|video|>"):
        assert text in facts["controls"]
    assert "True" not in facts["controls"] and "true" not in facts["controls"]  # add_bos_token: true is a setting


def test_merged_assistant_turns_are_a_stop_token_swap(tmp_path):
    folder = _template_only_folder(tmp_path)
    model = load_model(resolve_model(str(folder), allow_hub=False))
    assert model.text_level_only
    assert {"<turn|>", "<|tool_call>"} <= set(codec_for(model).written_controls)
    report = run_audit(folder, count=48, extra_stop_tokens=["<turn|>"])
    labels = {label for v in report.variants for f in v.failures for label in f.causes}
    # where the buffer has the <turn|> the engine stopped on, the next prompt has the next message's <|tool_call>
    merged = [
        f
        for v in report.variants
        for f in v.failures
        if any(a == "<turn|>" and b == "<|tool_call>" for a, b in zip(f.expected.texts, f.actual.texts, strict=False))
    ]
    assert {f.check for f in merged} == {"append", "rollout"}, "the merge must be seen by both checks"
    assert all("stop-token-swap" in f.causes for f in merged)
    assert "tool-call-reformatted" not in labels  # no argument is re-serialized by this template


def test_half_open_markers_are_controls_without_a_config(tmp_path):
    """A template alone (no tokenizer config): Gemma 4's half-open markers are read from the template as control
    tokens, as ``<|im_end|>`` is."""
    folder = tmp_path / "bare"
    folder.mkdir()
    facts = special_tokens_of(folder, {"default": MERGING_TEMPLATE}, {})
    assert {"<|turn>", "<turn|>", "<|tool_call>", "<tool_call|>", "<|tool_response>"} <= set(facts["controls"])
    assert "<|video|>" not in facts["controls"]  # only the config names it


def test_a_stop_token_replaced_by_a_separator_is_a_stop_token_swap():
    """Devstral 2's template joins consecutive assistant messages with a blank line: the end token the engine
    stopped on after the first one is gone from history, and the next message's call follows the separator. The
    call's arguments are untouched, so this is not ``tool-call-reformatted``."""
    from tito_audit.audit.core.causes import TextContext, classify_text_divergence

    messages = [
        {"role": "user", "content": "Push the box."},
        {"role": "assistant", "content": "Let me look that up."},
        {"role": "assistant", "content": "", "tool_calls": [{"function": {"name": "move", "arguments": {"d": "up"}}}]},
    ]
    prefix = "[INST]Push the box.[/INST]Let me look that up."
    buffer = prefix + '</s>\n\n[TOOL_CALLS]move[ARGS]{"d": "up"}</s>'
    history = prefix + '\n\n[TOOL_CALLS]move[ARGS]{"d": "up"}</s>[TOOL_RESULTS]up[/TOOL_RESULTS]'
    context = TextContext(messages, ["[INST]", "[/INST]", "</s>", "[TOOL_CALLS]", "[ARGS]", "[TOOL_RESULTS]"], ["</s>"])
    assert classify_text_divergence(buffer, history, len(prefix), context) == ["stop-token-swap"]
    # a newline inserted before an end token still written there is not a swap
    pushed = prefix + "\n</s>"
    assert "stop-token-swap" not in classify_text_divergence(prefix + "</s>", pushed, len(prefix), context)


def test_an_end_of_text_written_after_the_last_message_only_is_its_tail_not_a_swap():
    """Phi-4-mini's template ends a render without a generation prompt with ``<|end|><|endoftext|>`` and the next
    render goes on ``<|end|><|user|>`` (the role token built from pieces, so not known as one it writes): the renders
    part inside ``<|``, after the stop the engine stopped on. What differs is the tail after that stop."""
    import re

    from tito_audit.audit.core.causes import TextContext, classify_text_divergence
    from tito_audit.audit.core.diff import first_difference

    messages = [
        {"role": "user", "content": "Push the box."},
        {"role": "assistant", "content": "Let me look that up."},
        {"role": "user", "content": "Fix the failing test."},
    ]
    prefix = "<|user|>Push the box.<|end|><|assistant|>Let me look that up.<|end|>"
    controls = ["<|assistant|>", "<|end|>", "<|endoftext|>"]
    pattern = re.compile("|".join(re.escape(c) for c in sorted(controls, key=len, reverse=True)))
    context = TextContext(messages, controls, ["<|end|>", "<|endoftext|>"], pattern)
    history = prefix + "<|endoftext|>"
    followed = prefix + "<|user|>Fix the failing test.<|end|><|endoftext|>"
    parted = first_difference(history, followed)
    assert parted == len(prefix) + 2
    assert classify_text_divergence(history, followed, parted, context) == ["tail-after-stop"]
    # where the engine stopped on the end-of-text itself, history writing another control token there is a swap
    swapped = "<|user|>Push the box.<|end|><|assistant|>Let me look that up."
    earlier, later = swapped + "<|endoftext|>", swapped + "<|end|>\n"
    parted = first_difference(earlier, later)
    assert classify_text_divergence(earlier, later, parted, context) == ["stop-token-swap"]  # the stop, not a tail
