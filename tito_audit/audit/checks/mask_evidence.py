"""The evidence of one label of one turn of the mask check (:mod:`tito_audit.audit.checks.mask`): both sides over
the render's tokens, the text with the sampled and the marked characters bracketed, the count, the template lines.

The two token rows are ``F``'s tokens around the first wrong one: the top row holds the tokens the model sampled (what
must be trained), the bottom row the tokens the template's mask trains; a token not on a row is ``-1`` with an empty
text (drawn ``∅``), so the first differing column is the first wrong token. The text windows bracket the sampled
characters (top) and the marked characters (bottom) with :data:`OPEN` and :data:`CLOSE`.

Example (SmolLM3): ``3 tokens the model never sampled inside the mask, the first '<|im_start|>assistant\\n' (the
generation prompt); token 428 of render(M[:2]); generation block at lines 76–82``.
"""

from __future__ import annotations

from tito_audit.audit.checks.mask_compare import SAMPLED_UNTRAINED, STOP_TOKEN_UNTRAINED, TurnMask, TurnSpan, first_run
from tito_audit.audit.checks.rollout_context import RolloutContext
from tito_audit.audit.checks.trace import Completion
from tito_audit.audit.core.diff import WINDOW_TOKENS
from tito_audit.audit.results import Failure, TokenWindow
from tito_audit.model.assistant_mask import MaskedRender, generation_blocks, lines_phrase

NAME = "mask"
OPEN, CLOSE = "⟦", "⟧"
"""Brackets around the sampled text and the marked text in the failures' text windows."""


def failure(
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
