"""The simulated rollout of one conversation (docs/contract.md, "The simulated rollout"): one token buffer that only
grows.

For every assistant turn ``j`` the model's text is ``F`` after its generation prompt (where
:mod:`tito_audit.audit.realization.realize` found it), and the sampled completion is its canonical encoding cut right
after the first stop token. The buffer starts at ``ids(M[:j1], gp=True)``; before each later turn it is compared with
the template's next prompt ``R``: when the text holds (compared after the tokenizer's normalizer) and the
canonical tokens hold at the join, the bridge ``R`` after the buffer is appended; otherwise the buffer cannot
follow and starts again from ``R``. The checks read the trace; they do not walk the rollout themselves.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field, replace

from tito_audit.audit.checks.rollout_context import RolloutContext
from tito_audit.audit.core.causes import token_boundary
from tito_audit.audit.core.join import Join, join, join_text_only
from tito_audit.audit.realization.realize import EMPTY_BLOCK_DROPPED, GEN_PROMPT_MISMATCH
from tito_audit.conversations.conversation import steps_of
from tito_audit.model.render import RenderedPrefix


@dataclass
class Completion:
    turn: int
    text: str
    """What the engine returns as text: the model's text cut after the first stop token."""
    ids: list[int]
    noncanonical: list[int] | None
    tail: str
    """Text the template writes after the stop token; it belongs to the bridge."""
    stopped: bool
    gen_prompt_mismatch: bool
    mismatch_from: int = 0
    """Where (in the prompt's text) the generation prompt and the rendered turn part ways."""
    dropped_from: int | None = None
    """For a turn whose empty reasoning block the template does not render as written: where its generation
    prompt begins in the buffer's text (a divergence from there on is that block being dropped)."""
    form: str = ""
    """The reasoning form the turn was audited in."""


@dataclass
class Segment:
    kind: str
    turn: int
    start: int
    end: int


@dataclass
class StepTrace:
    """The appended step before assistant turn ``turn``: the buffer as it was, the next prompt, the verdicts."""

    turn: int
    kind: str
    roles: list[str]
    buffer: list[int]
    buffer_noncanonical: list[int]
    buffer_text: str
    prompt: RenderedPrefix
    previous: Completion
    segments: list[Segment]
    join: Join
    """Text and seam stability of the buffer against ``R`` (:func:`tito_audit.audit.core.join.join`)."""

    @property
    def text_index(self) -> int | None:
        return self.join.text_index

    @property
    def seam_index(self) -> int | None:
        return self.join.seam_index

    @property
    def canonical(self) -> list[int] | None:
        return self.join.canonical

    @property
    def normalized_buffer(self) -> str:
        return self.join.normalized_buffer

    @property
    def normalized_prompt(self) -> str:
        return self.join.normalized_prompt

    @property
    def followed(self) -> bool:
        return self.join.followed

    @property
    def bridge(self) -> list[int] | None:
        """The ids a TITO loop appends for this step, when the buffer can follow the template."""
        return self.join.bridge


@dataclass
class RolloutTrace:
    completions: list[Completion] = field(default_factory=list)
    steps: list[StepTrace] = field(default_factory=list)
    buffer: list[int] = field(default_factory=list)
    buffer_noncanonical: list[int] = field(default_factory=list)
    buffer_text: str = ""
    segments: list[Segment] = field(default_factory=list)


def trace_of(context: RolloutContext) -> RolloutTrace:
    """The simulated rollout of ``context``'s conversation, walked once and kept on the context."""
    if context.traced is None:
        context.traced = build_trace(context)
    assert isinstance(context.traced, RolloutTrace)
    return context.traced


def completion_for(context: RolloutContext, j: int, rng: random.Random) -> Completion:
    """What the engine returns for turn ``j``: the model's text, encoded, cut after the first stop token."""
    setup, alignment = context.setup, context.alignments[j]
    full = context.renders[(j + 1, False)].text
    mismatch = alignment.status == GEN_PROMPT_MISMATCH
    start = alignment.completion_start
    if mismatch:  # the model's text begins where the two renders part, at a whole token
        start = token_boundary(full, start, setup.codec.written_added_pattern)
    generated = alignment.model_text if alignment.model_text is not None else full[start:]
    ids = setup.codec.encode(generated)
    cut = next((n + 1 for n, token_id in enumerate(ids) if token_id in setup.stop_ids), None)
    if cut is None and setup.end_id is not None:
        generated, ids, cut = _ended_by_the_model(setup, generated, ids)
    sampled = ids[:cut] if cut is not None else ids
    end = len(generated)
    if cut is not None:
        stop_text = setup.codec.decode([sampled[-1]])
        position = generated.find(stop_text)
        end = position + len(stop_text) if position >= 0 else len(generated)
    return Completion(
        turn=j,
        text=generated[:end],
        ids=sampled,
        noncanonical=setup.codec.noncanonical(sampled, rng),
        tail=generated[end:],
        stopped=cut is not None,
        gen_prompt_mismatch=mismatch,
        mismatch_from=start if mismatch else 0,
        dropped_from=alignment.prompt_start if alignment.status == EMPTY_BLOCK_DROPPED else None,
        form=alignment.audited_form,
    )


def _ended_by_the_model(setup, generated: str, ids: list[int]) -> tuple[str, list[int], int | None]:
    """A turn whose rendering holds no stop token but ends with a run of control tokens (GigaChat3 closes every part
    of a turn with ``<|message_sep|>``, which it also writes before a call, so it is no stop token): the model ended
    it by sampling its end token where the template writes that run. The completion is the text before the run and
    the end token; the run is what history writes instead (the next step then finds a ``stop-token-swap``). Unchanged
    when the text does not end with control tokens (the next message may open with a stop token:
    :func:`_stop_opening_next`)."""
    start = _closing_run_start(generated, setup.codec.written_control_pattern)
    if start is None or setup.end_id is None:
        return generated, ids, None
    sampled = [*setup.codec.encode(generated[:start]), setup.end_id]
    text = generated[:start] + setup.decode_one(setup.end_id) + generated[start:]
    return text, sampled + setup.codec.encode(generated[start:]), len(sampled)


def _closing_run_start(text: str, pattern) -> int | None:
    """Where the run of control tokens (whitespace between and after them allowed) that ends ``text`` begins; None
    when ``text`` does not end with a control token."""
    if pattern is None:
        return None
    starts = {match.end(): match.start() for match in pattern.finditer(text)}
    at, found = len(text.rstrip()), None
    while at in starts:
        found = starts[at]
        at = len(text[:found].rstrip())
    return found if found else None


def _step(context: RolloutContext, step, trace: RolloutTrace, prompt: RenderedPrefix, previous) -> StepTrace:
    codec, setup = context.setup.codec, context.setup
    if setup.text_only:
        joined = join_text_only(codec, trace.buffer_text, trace.buffer, prompt)
    else:
        # Backends that tokenize message by message (mistral-common) have no single-string encoding: their
        # canonical buffer is the pieces they produced, which is the buffer itself.
        joined = join(codec, trace.buffer_text, prompt, (lambda: list(trace.buffer)) if codec.piecewise else None)
    return StepTrace(
        turn=step.after,
        kind=step.kind,
        roles=list(step.roles),
        buffer=list(trace.buffer),
        buffer_noncanonical=list(trace.buffer_noncanonical),
        buffer_text=trace.buffer_text,
        prompt=prompt,
        previous=previous,
        segments=list(trace.segments),
        join=joined,
    )


def build_trace(context: RolloutContext) -> RolloutTrace:
    """Walk the rollout of ``context.conversation`` (see the module docstring)."""
    messages = context.conversation.messages
    turns = context.conversation.assistant_indices()
    trace = RolloutTrace()
    if not turns:
        return trace
    rng = random.Random(f"noncanonical:{context.setup.seed}:{context.conversation.id}")
    steps = {step.after: step for step in steps_of(messages)}
    first = context.renders[(turns[0], True)]
    trace.buffer, trace.buffer_noncanonical, trace.buffer_text = list(first.ids), list(first.ids), first.text
    trace.segments = [Segment("prompt", turns[0], 0, len(trace.buffer))]
    previous: Completion | None = None
    for j in turns:
        if previous is not None:
            prompt = context.renders[(j, True)]
            _stop_opening_next(context, trace, previous, prompt)
            record = _step(context, steps[j], trace, prompt, previous)
            trace.steps.append(record)
            bridge = record.bridge
            if bridge is None:  # the buffer cannot follow: start again from the template's prompt
                trace.buffer, trace.buffer_noncanonical = list(prompt.ids), list(prompt.ids)
                trace.buffer_text = prompt.text
                trace.segments.append(Segment("resync", j, 0, len(trace.buffer)))
            else:
                size = len(trace.buffer)
                trace.segments.append(Segment("bridge", j, size, size + len(bridge)))
                trace.buffer += bridge
                trace.buffer_noncanonical += bridge
                trace.buffer_text = prompt.text
        completion = completion_for(context, j, rng)
        trace.completions.append(completion)
        previous = completion
        size = len(trace.buffer)
        trace.segments.append(Segment("completion", j, size, size + len(completion.ids)))
        trace.buffer += completion.ids
        trace.buffer_noncanonical += completion.noncanonical or completion.ids
        trace.buffer_text += completion.text
    final = steps.get(len(messages))
    if final is not None and previous is not None:  # messages after the last turn: the next prompt is R = P(M)
        prompt = context.renders[(len(messages), True)]
        _stop_opening_next(context, trace, previous, prompt)
        trace.steps.append(_step(context, final, trace, prompt, previous))
    return trace


def _stop_opening_next(
    context: RolloutContext, trace: RolloutTrace, previous: Completion, prompt: RenderedPrefix
) -> None:
    """A completion the template closes with no stop token, followed in the next prompt by one (GLM writes no end
    of turn: its engine stops on ``<|observation|>`` or ``<|user|>``, the first token of the next message): the
    model sampled that token, so it belongs to the completion, and the bridge starts after it."""
    if previous.stopped:
        return
    if prompt.text.startswith(trace.buffer_text):
        following = prompt.text[len(trace.buffer_text) :]
    else:  # the template rewrote the buffer: what history writes after the turn shows how the next message opens
        turn, after = context.history_text(previous.turn + 1), context.history_text(previous.turn + 2)
        if turn is None or after is None or not after.startswith(turn):
            return
        following = after[len(turn) :]
    setup = context.setup
    for token_id in sorted(setup.stop_ids):
        text = setup.decode_one(token_id)
        if text and following.startswith(text):
            previous.ids.append(token_id)
            if previous.noncanonical is not None:
                previous.noncanonical.append(token_id)
            previous.text += text
            previous.stopped = True
            trace.buffer.append(token_id)
            trace.buffer_noncanonical.append(token_id)
            trace.buffer_text += text
            trace.segments[-1] = replace(trace.segments[-1], end=trace.segments[-1].end + 1)
            return
