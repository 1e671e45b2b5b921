"""One assistant turn's mask against what the model sampled (docs/contract.md "The checks", 5): which tokens are wrong.

The turn is judged in ``F = render(M[:j+1], gp=False)`` tokenized with its assistant mask
(:class:`~tito_audit.model.assistant_mask.MaskedRender`), over a **region** of ``F``: from where the previous turn's
render ends (``F`` continues it) or, when the template rewrote something before the turn, from where the turn's
generation prompt begins; to the end of ``F``. Inside the region the sampled completion must be marked, its stop token
included, and nothing else: not the appended messages, not the generation prompt, not the text after the stop token.

Tokens are placed by the characters they cover (the tokenizer's offsets): the sampled tokens are the run from the
first token ending after the completion's first character to the last token starting before its end (a token whose
offsets are trimmed or empty inside that run is sampled too); tokens before the region belong to earlier turns.

Example: ``F = "<|im_start|>user\\nHi<|im_end|>\\n<|im_start|>assistant\\nHello<|im_end|>\\n"`` with the completion
``Hello<|im_end|>`` and a block around ``<|im_start|>assistant\\nHello`` gives ``stop-token-untrained`` (``<|im_end|>``
unmarked) and ``injected-trained`` (the header marked).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tito_audit.model.assistant_mask import MaskedRender

STOP_TOKEN_UNTRAINED = "stop-token-untrained"
SAMPLED_UNTRAINED = "sampled-untrained"
INJECTED_TRAINED = "injected-trained"
LABEL_LINES = {
    STOP_TOKEN_UNTRAINED: "The template's training mask (its generation blocks) leaves out the stop token the model "
    "sampled: a model trained on it is never trained to stop.",
    SAMPLED_UNTRAINED: "The template's training mask leaves out tokens the model sampled (a tool call written "
    "outside the generation block).",
    INJECTED_TRAINED: "The template's training mask holds tokens the model never sampled: the role header, the "
    "generation prompt, an empty reasoning block the template writes, the text after the stop token.",
}
"""The mask check's labels with their contract lines (docs/contract.md, "Mask labels"; the pages' glossary), in the
order reports list them. They say what a training mask gets wrong, not why a rollout step diverged: never among the
cause labels."""
LABELS = tuple(LABEL_LINES)


@dataclass(frozen=True)
class TurnSpan:
    """Where one turn's text lies in ``F`` (character offsets)."""

    region: int
    """Where the judged region begins."""
    prompt: int
    """Where the turn's generation prompt begins (``start`` when it cannot be found in ``F``)."""
    start: int
    """Where the sampled completion begins."""
    end: int
    """Where it ends (after its stop token, when ``F`` holds one)."""
    stop: int | None
    """Where its stop token begins in ``F`` (None: no stop token in ``F``)."""


@dataclass
class TurnMask:
    """The comparison of one turn: token positions of ``F`` (indices into ``MaskedRender.ids``)."""

    sampled: list[int]
    """The sampled tokens (what must be trained), the stop token included."""
    marked: list[int]
    """The tokens of the region the mask trains."""
    stop: int | None
    untrained: list[int] = field(default_factory=list)
    """Sampled tokens, not the stop token, that the mask leaves out."""
    injected: list[int] = field(default_factory=list)
    """Tokens the mask trains that the model never sampled."""
    stop_untrained: bool = False

    @property
    def labels(self) -> list[str]:
        found = {STOP_TOKEN_UNTRAINED: self.stop_untrained, SAMPLED_UNTRAINED: bool(self.untrained)}
        found[INJECTED_TRAINED] = bool(self.injected)
        return [label for label in LABELS if found[label]]


def compare(masked: MaskedRender, span: TurnSpan) -> TurnMask:
    """The tokens the mask gets wrong in ``span``'s region (see the module docstring).

    >>> masked = MaskedRender([1, 2, 3, 4], [0, 1, 1, 0], [(0, 2), (2, 4), (4, 6), (6, 8)])
    >>> compare(masked, TurnSpan(region=2, prompt=2, start=4, end=8, stop=6)).labels
    ['stop-token-untrained', 'injected-trained']
    """
    offsets, bits = masked.offsets, masked.mask
    first = next((i for i, (a, _) in enumerate(offsets) if a >= span.region), len(offsets))
    region = range(first, len(offsets))
    begin = next((i for i in region if offsets[i][1] > span.start), None)
    last = next((i for i in reversed(region) if offsets[i][0] < span.end), None)
    sampled = list(range(begin, last + 1)) if begin is not None and last is not None and begin <= last else []
    stop = None
    if span.stop is not None:
        stop = next((i for i in sampled if offsets[i][1] > span.stop), None)
    chosen = set(sampled)
    result = TurnMask(sampled, [i for i in region if bits[i]], stop)
    result.untrained = [i for i in sampled if not bits[i] and i != stop]
    result.injected = [i for i in result.marked if i not in chosen]
    result.stop_untrained = stop is not None and not bits[stop]
    return result


def first_run(positions: list[int]) -> list[int]:
    """The first run of consecutive positions.

    >>> first_run([4, 5, 6, 9, 10])
    [4, 5, 6]
    """
    run = positions[:1]
    for position in positions[1:]:
        if position != run[-1] + 1:
            break
        run.append(position)
    return run
