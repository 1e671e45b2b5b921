"""Tool calls written inside the reasoning (docs/contract.md "What the parser is given": a drawn form of its own,
reported as a rate, never in the verdict).

Models sometimes write their call before closing the reasoning block (``<think>I'll look. <tool_call>…</tool_call>
</think>``). Engines split the reasoning off first and parse calls in what follows, so the call usually stays in
``reasoning_content`` and the harness never gets it. For each tool-call turn with reasoning, the call's text (what
the template writes for the calls: the turn rendered with and without them parts exactly there) is moved to the end
of the reasoning, and the turn so written is given to the parser: is the call still found?

>>> move_calls_into_reasoning("<think>\\nplan\\n</think>\\n\\n<tool_call>x</tool_call><|im_end|>", "plan", (23, 47))
'<think>\\nplan\\n<tool_call>x</tool_call>\\n</think>\\n\\n<|im_end|>'
"""

from __future__ import annotations

from dataclasses import dataclass

from tito_audit.audit.checks.rollout_context import RolloutContext
from tito_audit.audit.checks.trace import Completion
from tito_audit.audit.core.diff import common_prefix_length
from tito_audit.audit.parse_step.parsed_turns import parse_with, parser_input
from tito_audit.conversations.conversation import Message
from tito_audit.model.render import RenderError
from tito_audit.parse.parser import CompletionParser


@dataclass
class ReasoningCalls:
    turns: int = 0
    lost: int = 0


def move_calls_into_reasoning(text: str, reasoning: str, calls: tuple[int, int]) -> str | None:
    """``text`` with the span ``calls`` moved to just after ``reasoning`` (on a line of its own); None when the
    reasoning is not written before the calls."""
    at = text.find(reasoning)
    start, end = calls
    if at < 0 or at + len(reasoning) > start:
        return None
    cut = at + len(reasoning)
    return text[:cut] + "\n" + text[start:end] + text[cut:start] + text[end:]


def calls_in_reasoning(
    context: RolloutContext, parser: CompletionParser, j: int, completion: Completion, calls_before: int
) -> bool | None:
    """Whether the parser loses turn ``j``'s calls when the model writes them inside its reasoning; None when the turn
    has no reasoning before its calls (the form does not apply)."""
    message = context.conversation.messages[j]
    reasoning = message.get("reasoning_content")
    if not message.get("tool_calls") or not isinstance(reasoning, str) or not reasoning.strip():
        return None
    span = _calls_span(context, j, message, completion)
    if span is None:
        return None
    text = move_calls_into_reasoning(completion.text, reasoning.strip(), span)
    if text is None:
        return None
    prompt = context.renders[(j, True)]
    parsed = parse_with(parser, parser_input(context, parser, prompt, j, text, completion, calls_before))
    return len(parsed.get("tool_calls") or []) < len(message["tool_calls"])


def _calls_span(context: RolloutContext, j: int, message: Message, completion: Completion) -> tuple[int, int] | None:
    """Where the template writes turn ``j``'s calls in the completion's text: the turn rendered without its calls
    parts from it exactly there."""
    key = (j + 1, False)
    without = {k: v for k, v in message.items() if k != "tool_calls"}
    messages = [*context.conversation.messages[:j], without]
    try:
        other = context.setup.renderer.texts(messages, context.conversation.tools, [key]).get(key)
    except RenderError:
        return None
    if other is None:
        return None
    full, start = context.renders[key].text, context.alignments[j].completion_start
    head = common_prefix_length(full, other)
    tail = common_prefix_length(full[head:][::-1], other[head:][::-1])
    span = (head - start, len(full) - tail - start)
    if span[0] < 0 or span[1] > len(completion.text) or span[1] <= span[0]:
        return None
    return span
