"""Check 3, rollout (docs/contract.md "The simulated rollout"): can one append-only token buffer follow the template?

At every appended step (the messages between two assistant turns, classified as tool-only, with user, with
system, or none) three things are measured on the rollout trace (:mod:`tito_audit.audit.checks.trace`):

- **text stability**: the buffer's text is a prefix of the next prompt ``R``; when not, the template rewrote
  what was already rendered or sampled, and the divergence is labelled and attributed to the message whose
  rendering changed;
- **seam stability**: ``encode(decode(buffer))`` is a token prefix of ``ids(R)`` (else ``bpe-seam``);
- **re-render drift**, beside the verdict: the buffer as sampled (canonical and non-canonical) is a prefix of
  ``ids(R)``, and at the end, how many positions a re-rendering trainer would train on that were never sampled.

Example: Qwen3's non-thinking prompt writes ``<think>\\n\\n</think>\\n\\n``, which history drops once a tool
result follows the turn::

    buffer = "...<|im_start|>assistant\\n<think>\\n\\n</think>\\n\\n<tool_call>..."
    R      = "...<|im_start|>assistant\\n<tool_call>..."          # empty-think-dropped, message j
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from tito_audit.audit.checks.interface import Check
from tito_audit.audit.checks.outcome import FAILED, PASSED, Outcome
from tito_audit.audit.checks.records import text_failure, token_failure
from tito_audit.audit.checks.rollout_context import RolloutContext
from tito_audit.audit.checks.trace import Segment, StepTrace, trace_of
from tito_audit.audit.checks.undo_reruns import WalkedStep
from tito_audit.audit.conditions.step_conditions import step_tags
from tito_audit.audit.core.causes import (
    MessageRef,
    bos_duplication,
    bpe_seam,
    classify_text_divergence,
    empty_think_dropped,
    gen_prompt_mismatch,
    noncanonical_split,
    utf8_split,
)
from tito_audit.audit.core.diff import first_difference, mismatched_positions
from tito_audit.audit.core.join import Join
from tito_audit.audit.realization.realize import owner_of, was_last_in_rollout
from tito_audit.audit.results import Failure
from tito_audit.conversations.conversation import ASSISTANT
from tito_audit.model.render import RenderedPrefix
from tito_audit.model.tokens import REPLACEMENT_CHAR

NAME = "rollout"


def check(context: RolloutContext, outcome: Outcome) -> None:
    trace = trace_of(context)
    final = len(context.conversation.messages)
    rare_form = context.setup.rare_form
    for step in trace.steps:
        outcome.count_form(step.kind, step.previous.form, step.followed)
        tags = step_tags(context.conversation, step.previous.turn, step.turn, step.previous.form, rare_form)
        outcome.walked.append(WalkedStep(step.turn, step.kind, tags, step.followed))
        outcome.final_steps += step.turn == final
        if step.text_index is not None:
            outcome.count(NAME, step.kind, FAILED)
            outcome.fail((1, step.turn, 0, 0), step_text_failure(context, step))
        elif step.seam_index is not None:
            outcome.count(NAME, step.kind, FAILED)
            failure = seam_break(context, turn=step.turn, kind=step.kind, roles=step.roles, joined=step.join)
            outcome.fail((1, step.turn, 0, 0), failure)
        else:
            outcome.count(NAME, step.kind, PASSED)
            if not context.setup.text_only:
                _drift(context, step, outcome)
    for completion in trace.completions:
        outcome.turn_status[completion.turn] = context.alignments[completion.turn].status
        outcome.completions += 1
        outcome.gen_prompt_mismatches += completion.gen_prompt_mismatch
        outcome.completions_without_stop += not completion.stopped
    if not context.setup.text_only:
        _final_drift(context, outcome)


def step_text_failure(context: RolloutContext, step: StepTrace) -> Failure:
    """The labelled, attributed text divergence of a step of the simulated rollout."""
    previous = step.previous
    dropped = None
    if previous.dropped_from is not None:
        dropped = DroppedBlock(previous.turn, previous.dropped_from)
    return text_break(
        context,
        turn=step.turn,
        kind=step.kind,
        roles=step.roles,
        joined=step.join,
        buffer=step.buffer,
        buffer_text=step.buffer_text,
        mismatch_from=previous.mismatch_from if previous.gen_prompt_mismatch else None,
        dropped=dropped,
    )


@dataclass(frozen=True)
class DroppedBlock:
    """An assistant turn whose model closed the prompt's reasoning block at once, in a form the template does not
    render back: a divergence from ``start`` on (its generation prompt, in the buffer's text) is that turn."""

    turn: int
    start: int


def text_break(
    context: RolloutContext,
    *,
    turn: int,
    kind: str,
    roles: list[str],
    joined: Join,
    buffer: list[int],
    buffer_text: str,
    mismatch_from: int | None,
    dropped: DroppedBlock | None = None,
) -> Failure:
    """The text divergence of a join, labelled and attributed to the message whose rendering changed;
    ``gen-prompt-mismatch`` only when it lies in the generation prompt of the previous turn (``mismatch_from``:
    where that prompt and the rendered turn part, None when they agree); ``empty-think-dropped`` of the previous
    turn when it lies where that turn's empty block was (``dropped``). The session guard uses it too."""
    assert joined.text_index is not None
    messages = context.conversation.messages
    owner = owner_of(
        joined.normalized_buffer,
        joined.text_index,
        context.normalized_history,
        turn,
        lambda m: was_last_in_rollout(messages, m),
        messages,
        joined.normalized_prompt,
    )
    # where the raw texts part (the normalizer may change lengths; mismatch_from is a raw index)
    raw_index = first_difference(buffer_text, joined.prompt.text)
    at_prompt = (
        owner is None
        and mismatch_from is not None
        and (raw_index if raw_index is not None else joined.text_index) >= mismatch_from
    )
    known = [gen_prompt_mismatch.NAME] if at_prompt else []
    divergence = raw_index if raw_index is not None else joined.text_index
    if owner is None and dropped is not None and divergence >= dropped.start:
        owner = MessageRef(dropped.turn, ASSISTANT, True)
        known = [empty_think_dropped.NAME]
    causes = classify_text_divergence(
        joined.normalized_buffer, joined.normalized_prompt, joined.text_index, context.text, known, owner=owner
    )
    token_index = first_difference(buffer, joined.prompt.ids)
    return text_failure(
        context.setup.decode_one,
        NAME,
        "text",
        kind,
        context.conversation,
        turn,
        roles,
        causes,
        RenderedPrefix(joined.normalized_buffer, buffer),
        RenderedPrefix(joined.normalized_prompt, joined.prompt.ids),
        joined.text_index,
        token_index if token_index is not None else len(buffer),
        owner,
    )


def seam_break(context: RolloutContext, *, turn: int, kind: str, roles: list[str], joined: Join) -> Failure:
    """The seam divergence of a join (``bpe-seam``): canonical buffer against ``ids(R)``."""
    assert joined.canonical is not None and joined.seam_index is not None
    return token_failure(
        context.setup.decode_one,
        NAME,
        "seam",
        kind,
        context.conversation,
        turn,
        roles,
        [bpe_seam.NAME],
        joined.canonical,
        joined.prompt.ids,
        joined.seam_index,
    )


def _drift(context: RolloutContext, step: StepTrace, outcome: Outcome) -> None:
    """Re-render drift on a step the buffer can follow: is the buffer, as sampled, a prefix of ids(R)?"""
    drift = outcome.drift
    drift.steps += 1
    for part, (aspect, candidate) in enumerate(
        (("drift", step.buffer), ("drift-noncanonical", step.buffer_noncanonical)), start=1
    ):
        index = first_difference(candidate, step.prompt.ids)
        if index is None:
            continue
        if aspect == "drift":
            drift.canonical += 1
            cause = _drift_cause(context, index, step.segments, candidate, step.prompt.ids)
        else:
            drift.noncanonical += 1
            cause = noncanonical_split.NAME
        drift.causes[cause] = drift.causes.get(cause, 0) + 1
        if aspect == "drift" or candidate != step.buffer:
            failure = token_failure(
                context.setup.decode_one,
                NAME,
                aspect,
                step.kind,
                context.conversation,
                step.turn,
                step.roles,
                [cause],
                candidate,
                step.prompt.ids,
                index,
            )
            outcome.fail((1, step.turn, 0, part), failure)


def _drift_cause(
    context: RolloutContext, index: int, segments: Sequence[Segment], buffer: list[int], reference: Sequence[int]
) -> str:
    for segment in segments:
        if segment.kind == "completion" and segment.start <= index < segment.end:
            decoded = context.setup.codec.decode(buffer[segment.start : segment.end])
            if REPLACEMENT_CHAR in decoded:
                return utf8_split.NAME
            return bpe_seam.NAME
    if index > 0 or buffer[:1] == list(reference[:1]):
        return bpe_seam.NAME
    return bos_duplication.NAME


def _final_drift(context: RolloutContext, outcome: Outcome) -> None:
    """At the end of the rollout: buffer positions that differ from ``encode(render(M))``."""
    messages, trace = context.conversation.messages, trace_of(context)
    turns = context.conversation.assistant_indices()
    final = context.renders.get((len(messages), False))
    if final is None or not trace.completions or turns[-1] != len(messages) - 1:
        return
    reference = list(final.ids)
    last = trace.completions[-1]
    tail_ids = context.setup.codec.encode(last.tail) if last.tail else []
    if tail_ids and reference[-len(tail_ids) :] == tail_ids:
        reference = reference[: -len(tail_ids)]  # never sampled, never trained on
    outcome.drift.total_tokens += len(reference)
    outcome.drift.mismatched_tokens += mismatched_positions(trace.buffer, reference)
    outcome.drift.mismatched_tokens_noncanonical += mismatched_positions(trace.buffer_noncanonical, reference)


CHECK = Check(NAME, check)
