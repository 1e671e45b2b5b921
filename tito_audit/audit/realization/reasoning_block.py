"""What a generation prompt leaves a model free to write about its reasoning (docs/contract.md "Realizable turns").

Whether a reasoning form of an assistant turn is realizable is decided from the prompt alone, never from
whether the template renders the form back. The template's way of writing a reasoning block is learnt by
rendering: one assistant turn carrying a marker as its reasoning shows the text before the reasoning (the turn's
header and the block's opener, ``<|im_start|>assistant\\n<think>\\n``) and the text after it (the closer,
``\\n</think>\\n\\n``). A generation prompt then

- **opens** the block when it ends with that opener: the model's first text is its reasoning, possibly empty
  (it may write the closer at once), so reasoning present and reasoning empty are realizable;
- **closes** the block when it already holds the closer (``<think>\\n\\n</think>\\n\\n`` with thinking off): no
  reasoning is realizable, empty reasoning neither (a model cannot close a block the prompt already closed);
- has **no block** otherwise: the model writes its own block or none, so every form is realizable.

When the template never renders a turn's reasoning field the block is **unknown**: every form renders alike
and every form is audited.

Example (Nemotron 3, thinking on)::

    opener/head  = "<|im_start|>assistant\\n<think>\\n"      closer = "\\n</think>\\n"
    prompt       = "...<|im_start|>assistant\\n<think>\\n"   -> open: empty and present reasoning
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from tito_audit.audit.core.diff import common_prefix_length
from tito_audit.conversations.conversation import ASSISTANT, TOOL, USER, Message
from tito_audit.conversations.reasoning_forms import (
    CLOSED,
    NO_BLOCK,
    OPEN,
    REALIZABLE,
    REASONING_FORMS,
    UNKNOWN,
    short_kind,
)

MARKER = "qzxv reasoning marker"
"""The reasoning of the probe turn: text no template writes on its own."""
_ANSWER = "It is sunny."

TextRender = Callable[[Sequence[Message], "list[dict] | None", bool], "str | None"]
"""``render(M, gp)`` as text, None when the template refuses."""


@dataclass(frozen=True)
class ReasoningBlock:
    """How the template writes an assistant turn's reasoning."""

    head: str
    """The turn's text before its reasoning: header and opener (``<|im_start|>assistant\\n<think>\\n``)."""
    closer: str
    """The text between the reasoning and the answer (``\\n</think>\\n\\n``)."""

    def state(self, generation_prompt: str) -> str:
        """Whether ``generation_prompt`` opens, closes or leaves out the reasoning block: it closes it when it
        holds the closer's text, and opens it when it ends where the template's reasoning begins."""
        closing = self.closer.strip()
        if closing and closing in generation_prompt:
            return CLOSED
        opening, prompt = self.head.rstrip(), generation_prompt.rstrip()
        if prompt and opening and (prompt.endswith(opening) or opening.endswith(prompt)):
            return OPEN
        return NO_BLOCK


def prompt_state(block: ReasoningBlock | None, generation_prompt: str) -> str:
    return UNKNOWN if block is None else block.state(generation_prompt)


def realizable_forms(block: ReasoningBlock | None, generation_prompt: str) -> tuple[str, ...]:
    return REALIZABLE[prompt_state(block, generation_prompt)]


def probe_block(render: TextRender) -> ReasoningBlock | None:
    """The template's reasoning block, learnt from one answer whose reasoning is :data:`MARKER`; None when the
    template does not render the reasoning field (or refuses the probe)."""
    history: list[Message] = [{"role": USER, "content": "Hello there."}]
    answer: Message = {"role": ASSISTANT, "content": _ANSWER, "reasoning_content": MARKER}
    before, full = render(history, None, False), render([*history, answer], None, False)
    if before is None or full is None:
        return None
    at = full.find(MARKER)
    if at < 0:
        return None
    start = min(common_prefix_length(before, full), at)
    end = at + len(MARKER)
    answer_at = full.find(_ANSWER, end)
    return ReasoningBlock(full[start:at], full[end:answer_at] if answer_at >= 0 else "")


@dataclass(frozen=True)
class VariantReasoning:
    """What one variant's generation prompt admits, probed after a user message and after a tool result."""

    block: ReasoningBlock | None
    state: str
    """The prompt's state after a user message (``mixed`` when the two probes disagree)."""
    realizable: tuple[str, ...]

    @property
    def kinds(self) -> tuple[str, ...] | None:
        """The realizable forms as the generator names them (``absent``, ``empty``, ``present``); None when every
        form is realizable."""
        if len(self.realizable) == len(REASONING_FORMS):
            return None
        return tuple(short_kind(form) for form in self.realizable)


def variant_reasoning(render: TextRender, tools: list[dict] | None) -> VariantReasoning:
    """The reasoning block of the template and the forms its generation prompt admits."""
    block = probe_block(render)
    call = {"id": "probe0002", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Oslo"}}}
    after_user: list[Message] = [{"role": USER, "content": "Hello there."}]
    after_tool: list[Message] = [
        {"role": USER, "content": "Weather in Oslo?"},
        {"role": ASSISTANT, "content": "", "tool_calls": [call]},
        {"role": TOOL, "tool_call_id": "probe0002", "name": "get_weather", "content": "Sunny, 21 C."},
    ]
    states = []
    for history, history_tools in ((after_user, None), (after_tool, tools)):
        prompt, rendered = render(history, history_tools, True), render(history, history_tools, False)
        if prompt is None or rendered is None:
            continue
        states.append(prompt_state(block, prompt[common_prefix_length(rendered, prompt) :]))
    if not states:
        return VariantReasoning(block, UNKNOWN, REASONING_FORMS)
    if len(set(states)) > 1:
        return VariantReasoning(block, "mixed", REASONING_FORMS)
    return VariantReasoning(block, states[0], REALIZABLE[states[0]])


def closed_at_once(marked: str, completion_start: int) -> str | None:
    """The model's text when it closes the block at once: the turn rendered with :data:`MARKER` as its reasoning
    (``marked``, whose model text begins at ``completion_start``), the marker taken out. The model writes what
    the template writes around reasoning, with nothing between; None when the marker does not begin the text."""
    text = marked[completion_start:]
    at = text.find(MARKER)
    if at < 0 or text[:at].strip():
        return None
    return text[:at] + text[at + len(MARKER) :]
