"""Check 5, mask (SPEC "The checks"): does the template's assistant mask train exactly what the model sampled?

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

from tito_audit.audit.checks.context import RolloutContext
from tito_audit.audit.checks.mask_compare import (
    INJECTED_TRAINED,
    LABELS,
    SAMPLED_UNTRAINED,
    STOP_TOKEN_UNTRAINED,
    TurnMask,
    TurnSpan,
    compare,
    first_run,
)
from tito_audit.audit.checks.outcome import FAILED, PASSED, REFUSED, Outcome
from tito_audit.audit.checks.trace import Completion, trace_of
from tito_audit.audit.diff import WINDOW_TOKENS
from tito_audit.audit.realize import ALIGNED, HISTORY_REWRITE
from tito_audit.audit.results import Failure, TokenWindow
from tito_audit.model.assistant_mask import (
    MaskedRender,
    assistant_mask,
    generation_blocks,
    has_generation_blocks,
    lines_phrase,
)
from tito_audit.model.loaded import JINJA, LoadedModel
from tito_audit.model.render import RenderError

NAME = "mask"
ANSWER, TOOL_CALL = "answer", "tool call"
NOT_AS_SAMPLED = "not written as sampled"
NOT_APPLICABLE = "not applicable: the template has no {% generation %} blocks"
OPEN, CLOSE = "⟦", "⟧"
"""Brackets around the sampled text and the marked text in the failures' text windows."""


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
            outcome.fail((1, j, 3, number), _failure(context, completion, category, label, masked, span, judged))


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
    prompt = (
        start - len(prompt_text) if prompt_text and text.startswith(prompt_text, start - len(prompt_text)) else start
    )
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


def _failure(
    context: RolloutContext,
    completion: Completion,
    category: str,
    label: str,
    masked: MaskedRender,
    span: TurnSpan,
    judged: TurnMask,
) -> Failure:
    """One label of one turn, with its evidence: both sides over ``F``'s tokens (``-1`` and an empty text where a
    token is not on that side), the text with the sampled and the marked characters bracketed, and the count."""
    j = completion.turn
    text = context.renders[(j + 1, False)].text
    model = context.setup.renderer.model
    assert model.template_source is not None
    lines = lines_phrase(generation_blocks(model.template_source))
    if label == STOP_TOKEN_UNTRAINED:
        at = judged.stop if judged.stop is not None else (judged.sampled[-1] if judged.sampled else 0)
        stop_text = context.setup.decode_one(completion.ids[-1])
        if judged.stop is None:  # the template writes it as the next message's first token
            detail = f"the stop token {stop_text!r} opens the next message, outside the mask in render(M[:{j + 2}])"
        else:
            detail = f"the stop token {stop_text!r} the model sampled is outside the mask"
    elif label == SAMPLED_UNTRAINED:
        run = first_run(judged.untrained)
        at = run[0]
        detail = (
            f"{_amount(context, masked, judged.untrained)} of what the model sampled outside the mask, the first "
            f"{_quoted(text, masked, run)}"
        )
    else:
        run = first_run(judged.injected)
        at = run[0]
        detail = (
            f"{_amount(context, masked, judged.injected)} the model never sampled inside the mask, the first "
            f"{_quoted(text, masked, run)} ({_where(masked.offsets[at][0], span)})"
        )
    char = masked.offsets[at][0] if masked.offsets else 0
    detail += f"; token {at} of render(M[:{j + 1}]); {lines}"
    trained = set(judged.sampled)
    marked = set(judged.marked)
    expected = actual = None
    if not context.setup.text_only:
        expected = _window(context, masked, at, trained)
        actual = _window(context, masked, at, marked)
    low = max(span.region, char - 80)
    return Failure(
        check=NAME,
        aspect=NAME,
        category=category,
        conversation_id=context.conversation.id,
        turn=j,
        roles=[str(context.conversation.messages[j].get("role"))],
        causes=[label],
        token_index=at,
        expected=expected,
        actual=actual,
        expected_text=_bracketed(text, low, char + 100, [(span.start, span.end)]),
        actual_text=_bracketed(text, low, char + 100, _runs(masked, sorted(marked))),
        detail=detail,
    )


def _window(context: RolloutContext, masked: MaskedRender, at: int, side: set[int]) -> TokenWindow:
    start = max(0, at - WINDOW_TOKENS)
    positions = range(start, min(len(masked.ids), at + WINDOW_TOKENS))
    ids = [masked.ids[i] if i in side else -1 for i in positions]
    return TokenWindow(start, ids, [context.setup.decode_one(i) if i >= 0 else "" for i in ids])


def _amount(context: RolloutContext, masked: MaskedRender, positions: list[int]) -> str:
    """``3 tokens`` (``14 characters`` at text level, where tokens are the stand-in's bytes)."""
    if context.setup.text_only:
        count = sum(masked.offsets[i][1] - masked.offsets[i][0] for i in positions)
        return f"{count} character{'s' if count != 1 else ''}"
    return f"{len(positions)} token{'s' if len(positions) != 1 else ''}"


def _quoted(text: str, masked: MaskedRender, run: list[int]) -> str:
    written = text[masked.offsets[run[0]][0] : masked.offsets[run[-1]][1]]
    return repr(written if len(written) <= 48 else written[:47] + "…")


def _where(char: int, span: TurnSpan) -> str:
    if span.prompt <= char < span.start:
        return "the generation prompt"
    if char >= span.end:
        return "after the stop token"
    return "before the generation prompt"


def _runs(masked: MaskedRender, positions: list[int]) -> list[tuple[int, int]]:
    """The character spans of runs of consecutive positions."""
    spans: list[tuple[int, int]] = []
    for position in positions:
        a, b = masked.offsets[position]
        if spans and a <= spans[-1][1]:
            spans[-1] = (spans[-1][0], max(b, spans[-1][1]))
        else:
            spans.append((a, b))
    return spans


def _bracketed(text: str, low: int, high: int, spans: list[tuple[int, int]]) -> str:
    """``text[low:high]`` with :data:`OPEN` and :data:`CLOSE` around the parts of ``spans`` inside it."""
    out, position = [], low
    high = min(high, len(text))
    for a, b in spans:
        a, b = max(a, low), min(b, high)
        if a >= b or a < position:
            continue
        out += [text[position:a], OPEN, text[a:b], CLOSE]
        position = b
    out.append(text[position:high])
    return "".join(out)


__all__ = ["INJECTED_TRAINED", "LABELS", "NAME", "SAMPLED_UNTRAINED", "STOP_TOKEN_UNTRAINED", "check"]
