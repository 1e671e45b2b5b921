"""Causes as data: each cause's confirmation is written from its definition, not from its detector, so it can
disagree with the label on a case the detector gets wrong (docs/contract.md "Cause labels")."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from tito_audit.audit.core.causes import (
    CAUSES,
    Case,
    ReasoningTags,
    TextContext,
    classify_text_divergence,
    confirm,
    content_rewritten,
    empty_think_dropped,
    stop_token_swap,
    tool_call_reformatted,
)
from tito_audit.audit.core.causes.divergence import Divergence
from tito_audit.audit.core.diff import first_difference
from tito_audit.audit.results import Failure

USER = {"role": "user", "content": "What is the weather in Paris today?"}
THINK = ReasoningTags("<think>", "</think>")


def _case(messages: list[dict], earlier: str, later: str, *, turn: int, stop_texts=("<|im_end|>",), **failure: Any):
    index = first_difference(earlier, later)
    assert index is not None
    keys = ((turn, False), (turn + 1, True))
    checked = Failure("rollout", "text", "tool-only", "c0", turn, ["tool"], [], char_index=index, **failure)
    texts = {keys[0]: earlier, keys[1]: later}
    return Case(checked, messages, None, None, None, keys, texts, tuple(stop_texts), THINK)  # type: ignore[arg-type]


def _detected(messages: list[dict], earlier: str, later: str) -> list[str]:
    index = first_difference(earlier, later)
    context = TextContext(messages, ["<|im_end|>", "<|im_start|>"], ["<|im_end|>"])
    return classify_text_divergence(earlier, later, index, context)


def test_every_cause_has_a_confirmation_of_its_own():
    assert len({cause.confirm for cause in CAUSES.values()}) == len(CAUSES)


def test_empty_think_dropped_is_not_confirmed_for_a_turn_that_carries_reasoning():
    """The detector sees an empty block vanish at the divergence; the definition says the model closed its block at
    once, which a turn with reasoning did not do: the confirmation says no."""
    reasoning = {"role": "assistant", "content": "Sunny.", "reasoning_content": "Look it up."}
    earlier = "<|im_start|>user\nWeather?<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\nSunny.<|im_end|>"
    later = "<|im_start|>user\nWeather?<|im_end|>\n<|im_start|>assistant\nSunny.<|im_end|>\n<|im_start|>user\n"
    index = first_difference(earlier, later)
    assert empty_think_dropped.detect(Divergence(earlier, later, index, TextContext([USER, reasoning], [], [])))
    case = _case([USER, reasoning], earlier, later, turn=1, message_index=1, message_role="assistant")
    assert not confirm(empty_think_dropped.NAME, case).confirmed
    without = {**reasoning, "reasoning_content": ""}
    assert confirm(
        empty_think_dropped.NAME,
        _case([USER, without], earlier, later, turn=1, message_index=1, message_role="assistant"),
    ).confirmed


def test_stop_token_swap_needs_a_stop_token_where_the_renders_part():
    messages = [USER, {"role": "assistant", "content": "Sunny."}]
    swapped = _case(messages, "assistant\nSunny.<|im_end|>", "assistant\nSunny.<|eot_id|>\n", turn=1)
    assert confirm(stop_token_swap.NAME, swapped).confirmed
    elsewhere = _case(messages, "assistant\nSunny. It is warm.", "assistant\nSunny. It is cold.", turn=1)
    assert not confirm(stop_token_swap.NAME, elsewhere).confirmed


def test_tool_call_reformatted_needs_the_same_arguments_in_other_text():
    call = {"id": "call_1", "type": "function", "function": {"name": "weather", "arguments": {"city": "Paris"}}}
    messages = [USER, {"role": "assistant", "content": "", "tool_calls": [call]}]
    earlier = '<tool_call>{"name": "weather", "arguments": {"city": "Paris"}}</tool_call>'
    spaced = '<tool_call>{"name": "weather", "arguments": {"city":"Paris"}}</tool_call>'
    assert _detected(messages, earlier, spaced) == [tool_call_reformatted.NAME]
    assert confirm(tool_call_reformatted.NAME, _case(messages, earlier, spaced, turn=1)).confirmed
    other_value = '<tool_call>{"name": "weather", "arguments": {"city": "Lyon"}}</tool_call>'
    assert not confirm(tool_call_reformatted.NAME, _case(messages, earlier, other_value, turn=1)).confirmed


def test_content_rewritten_needs_a_message_text_where_the_renders_part():
    messages = [{"role": "user", "content": "  What is the weather in Paris today?  "}]
    earlier = "<|im_start|>user\n  What is the weather in Paris today?  <|im_end|>"
    stripped = "<|im_start|>user\nWhat is the weather in Paris today?<|im_end|>"
    assert confirm(content_rewritten.NAME, _case(messages, earlier, stripped, turn=0)).confirmed
    system = "<|im_start|>system\n{}<|im_end|>\n"
    header = _case(messages, system.format("a" * 80) + earlier, system.format("b" * 80) + earlier, turn=0)
    assert not confirm(content_rewritten.NAME, header).confirmed


def test_a_label_with_no_definition_is_not_confirmed():
    messages = [USER]
    assert not confirm("made-up-cause", _case(messages, "ab", "ac", turn=0)).confirmed


def test_empty_think_dropped_where_the_renders_part_in_the_markup_that_opens_the_block():
    """Harmony (gpt-oss) opens its empty analysis message with a channel name before ``<|message|>``: the renders part
    there, a few characters before the empty block, and the block is still what they part on."""
    turn = {"role": "assistant", "content": "Done."}
    head = "<|start|>user<|message|>Go.<|end|><|start|>assistant<|channel|>"
    earlier = head + "analysis<|message|><|end|><|start|>assistant<|channel|>final<|message|>Done.<|return|>"
    later = head + "final<|message|>Done.<|end|><|start|>user<|message|>"
    harmony = ReasoningTags("<|message|>", "<|end|>")
    case = _case([USER, turn], earlier, later, turn=1, message_index=1, message_role="assistant")
    assert confirm(empty_think_dropped.NAME, replace(case, reasoning=harmony)).confirmed
    assert not confirm(empty_think_dropped.NAME, replace(case, reasoning=THINK)).confirmed
