"""Check 5, mask (docs/contract.md "The checks"): does the template's assistant mask train exactly what the model
sampled?

A trainer that fine-tunes on rendered conversations (SFT with assistant-only loss, RL that re-renders for the
training step) trains on the tokens the template's ``{% generation %}`` blocks mark
(:mod:`tito_audit.model.assistant_mask`). For a template with such blocks, every assistant turn ``j`` of the simulated
rollout (:mod:`tito_audit.audit.checks.trace`) is judged once, in the render that ends with it,
``F = render(M[:j+1], gp=False)``, over its region (:mod:`tito_audit.audit.checks.mask_compare`): the sampled
completion must be marked, stop token included, and nothing else. Each turn with a wrong mask is a failure per label:

- ``stop-token-untrained``: the stop token the model sampled is outside the mask (it is never trained to stop);
- ``sampled-untrained``: other sampled tokens are outside the mask (a tool call written outside the block);
- ``injected-trained``: tokens the template wrote are inside the mask (the role header, the generation prompt, an
  empty ``<think></think>`` the prompt wrote, the newline after the stop token).

**Turns not written as sampled.** A turn is judged only when ``F`` holds the sampled completion where the model's text
begins, that is when the turn is aligned with its prompt or only an earlier message was rewritten (a history rewrite):
then the mask over those characters is what a trainer trains on. A turn whose generation prompt disagrees with its
rendering, whose empty reasoning block the template drops, or whose stop token history replaces by other tokens is
counted in the row ``not written as sampled`` (as refused: not compared) and never judged; the rollout check reports
why. A stop token the model sampled as the first token of the next message (GLM writes no end of turn) is judged in
``render(M[:j+2])``, where the template writes it.

The check's rows are turns (``answer``, ``tool call``); the labels are counted per turn in the cause counts. Beside
the verdict, never in it; ``n/a`` for templates without generation blocks (a note says so).
"""

from __future__ import annotations

from tito_audit.audit.checks.interface import Check
from tito_audit.audit.checks.mask_compare import (
    INJECTED_TRAINED,
    LABELS,
    SAMPLED_UNTRAINED,
    STOP_TOKEN_UNTRAINED,
    TurnSpan,
    compare,
)
from tito_audit.audit.checks.mask_evidence import NAME, failure
from tito_audit.audit.checks.outcome import FAILED, PASSED, REFUSED, Outcome
from tito_audit.audit.checks.rollout_context import RolloutContext
from tito_audit.audit.checks.trace import Completion, trace_of
from tito_audit.audit.realization.realize import ALIGNED, HISTORY_REWRITE
from tito_audit.model.assistant_mask import (
    assistant_mask,
    generation_blocks,
    has_generation_blocks,
    lines_phrase,
)
from tito_audit.model.load_folder import JINJA, LoadedModel
from tito_audit.model.render import RenderError

ANSWER, TOOL_CALL = "answer", "tool call"
NOT_AS_SAMPLED = "not written as sampled"
NOT_APPLICABLE = "not applicable: the template has no {% generation %} blocks"


def applies_to(model: LoadedModel) -> bool:
    """Whether the check has anything to judge: a Jinja template with generation blocks."""
    return model.backend == JINJA and has_generation_blocks(model.template_source)


def variant_notes(model: LoadedModel) -> list[str]:
    """The check table's notes: ``n/a`` or where the generation blocks are."""
    if not applies_to(model):
        return [NOT_APPLICABLE]
    assert model.template_source is not None
    return [
        f"{lines_phrase(generation_blocks(model.template_source))}; each assistant turn is judged once, in "
        "render(M[:j+1]) (beside the verdict, never in it)"
    ]


def check(context: RolloutContext, outcome: Outcome) -> None:
    model = context.setup.renderer.model
    if not applies_to(model):
        return
    messages = context.conversation.messages
    previous: int | None = None
    for completion in trace_of(context).completions:
        j = completion.turn
        category = TOOL_CALL if messages[j].get("tool_calls") else ANSWER
        span, from_next = _span(context, completion, previous)
        previous = j
        if span is None:
            outcome.count(NAME, NOT_AS_SAMPLED, REFUSED)
            continue
        try:
            masked = assistant_mask(context.setup.renderer, messages[: j + 1], context.conversation.tools)
            stop_bit = _next_stop_bit(context, completion) if from_next else None
        except RenderError:
            outcome.count(NAME, category, REFUSED)
            continue
        if masked.ids != context.renders[(j + 1, False)].ids or (from_next and stop_bit is None):
            outcome.count(NAME, category, REFUSED)  # the mask render is not the render the rollout used
            continue
        judged = compare(masked, span)
        if from_next:
            judged.stop_untrained = stop_bit == 0
        labels = judged.labels
        outcome.count(NAME, category, FAILED if labels else PASSED)
        for number, label in enumerate(labels):
            outcome.fail((1, j, 3, number), failure(context, completion, category, label, masked, span, judged))


def _span(context: RolloutContext, completion: Completion, previous: int | None) -> tuple[TurnSpan | None, bool]:
    """Where turn ``completion.turn`` lies in its render, and whether its stop token opens the next message; None when
    the render does not hold the completion as sampled (see the module docstring)."""
    j = completion.turn
    alignment = context.alignments[j]
    text = context.renders[(j + 1, False)].text
    start = alignment.completion_start
    if alignment.status not in (ALIGNED, HISTORY_REWRITE):
        return None, False
    stop_text = context.setup.decode_one(completion.ids[-1]) if completion.stopped and completion.ids else ""
    from_next = False
    if not text.startswith(completion.text, start):
        held = completion.text[: len(completion.text) - len(stop_text)]
        if not stop_text or not text.startswith(held, start) or start + len(held) != len(text):
            return None, False
        from_next = True  # the engine stopped on the next message's first token: this render does not hold it
    prompt_text = context.renders[(j, True)].text[alignment.prompt_start :]
    prompt = start - len(prompt_text)
    if not prompt_text or prompt < 0 or not text.startswith(prompt_text, prompt):
        prompt = start  # the generation prompt is not written before the turn (a history rewrite changed it)
    region = prompt
    if previous is None:
        region = 0
    else:
        before = context.renders[(previous + 1, False)].text
        if text.startswith(before) and len(before) <= prompt:
            region = len(before)
    end = min(start + len(completion.text), len(text))
    stop = end - len(stop_text) if stop_text and not from_next else None
    return TurnSpan(region, prompt, start, end, stop), from_next


def _next_stop_bit(context: RolloutContext, completion: Completion) -> int | None:
    """The mask bit of the stop token the template writes as the next message's first token, in
    ``render(M[:j+2])``; None when that render does not continue the turn's with it."""
    j = completion.turn
    messages, setup = context.conversation.messages, context.setup
    following = context.history(j + 2)
    text = context.renders[(j + 1, False)].text
    stop_text = setup.decode_one(completion.ids[-1])
    if following is None or not following.text.startswith(text + stop_text):
        return None
    masked = assistant_mask(setup.renderer, messages[: j + 2], context.conversation.tools)
    if masked.ids != following.ids:
        return None
    position = next((i for i, (_, b) in enumerate(masked.offsets) if b > len(text)), None)
    return masked.mask[position] if position is not None else None


__all__ = ["INJECTED_TRAINED", "LABELS", "NAME", "SAMPLED_UNTRAINED", "STOP_TOKEN_UNTRAINED", "check"]


CHECK = Check(NAME, check)
