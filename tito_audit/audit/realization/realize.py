"""Realizable turns (docs/contract.md, "Realizable turns" and "Attribution"): audit an assistant turn only in a form a
model could have produced after its generation prompt, and find where the model's text begins.

For an assistant message at index ``j``: ``P = render(M[:j], gp=True)`` and ``F = render(M[:j+1], gp=False)``.
``P`` is the rendered history followed by the generation prompt; the generation prompt starts where
``render(M[:j], gp=False)`` and ``P`` part ways.

Which reasoning forms are realizable is decided from the generation prompt alone
(:mod:`tito_audit.audit.realization.reasoning_block`): a prompt that closed the block admits no reasoning, one that ends
inside an open block admits reasoning and empty reasoning, one without a block admits every form. A message whose form
is not realizable is audited in the nearest realizable form instead and reported as *not realizable under this
variant*; a realizable form is never swapped for another, whether or not the template renders it back. Turns are
replaced in order, each tried in the conversation as realized so far (:mod:`.turn_renders`).

Each turn then ends up in one of four states:

- **aligned**: ``F`` starts with ``P``; the model's text is ``F[len(P):]``.
- **history rewrite**: ``F`` departs from ``P`` inside the rendered history (an earlier message renders
  differently once this turn follows it, e.g. a tool result closed one way when last and another way when
  not). The model's text starts after the generation prompt, found again in ``F`` after the divergence. The
  rewrite belongs to the earlier message, and the rollout reports it there.
- **empty block dropped**: the prompt opened a reasoning block, the model closed it at once, and the template
  does not render that turn as written (it drops the empty block, or its newline). The model's text is what the
  template writes around reasoning with nothing between (the closer, then the answer); the rollout finds the
  break at the next step (``empty-think-dropped``).
- **gen-prompt mismatch**: otherwise. The model's text is taken as ``F`` after its longest common prefix with
  ``P`` and the rollout labels the divergence ``gen-prompt-mismatch``.

Example: under Qwen3's ``enable_thinking=false`` the prompt ends with ``<think>\\n\\n</think>\\n\\n``; an
assistant message carrying reasoning is not realizable there, so it is audited without it. Under MiniMax-M2's
prompt (``]~b]ai\\n<think>\\n``) a turn with empty reasoning is realizable, and history renders it without
its block: the turn is audited as the model wrote it, and the next step breaks.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from tito_audit.audit.core.causes import MessageRef, gen_prompt_mismatch
from tito_audit.audit.core.diff import common_prefix_length
from tito_audit.audit.realization.reasoning_block import MARKER, ReasoningBlock, closed_at_once, prompt_state
from tito_audit.audit.realization.turn_renders import Key, LaterRefusal, RenderPrefixes, TurnRenders
from tito_audit.audit.results import Failure, Walked
from tito_audit.conversations.conversation import ASSISTANT, Conversation, Message
from tito_audit.conversations.reasoning_forms import (
    NEAREST,
    OPEN,
    REALIZABLE,
    REASONING_ABSENT,
    REASONING_EMPTY,
    REASONING_FORMS,
    REASONING_PRESENT,
    REASONING_SENT_BACK_WITHOUT,
    UNKNOWN,
    reasoning_form,
    with_reasoning_form,
)

ALIGNED = "aligned"
HISTORY_REWRITE = "history-rewrite"
EMPTY_BLOCK_DROPPED = "empty-block-dropped"
GEN_PROMPT_MISMATCH = gen_prompt_mismatch.NAME

__all__ = [
    "ALIGNED",
    "EMPTY_BLOCK_DROPPED",
    "GEN_PROMPT_MISMATCH",
    "HISTORY_REWRITE",
    "REASONING_ABSENT",
    "REASONING_EMPTY",
    "REASONING_FORMS",
    "REASONING_PRESENT",
    "MessageRef",
    "RealizedConversation",
    "TurnAlignment",
    "UnrealizedTurn",
    "locate_completion",
    "owner_of",
    "realize",
    "reasoning_form",
    "turn_keys",
    "was_last_in_rollout",
    "with_reasoning_form",
]


@dataclass(frozen=True)
class TurnAlignment:
    turn: int
    status: str
    completion_start: int
    """Index in ``F`` where the model's text begins."""
    prompt_start: int
    """Index in ``P`` where the generation prompt begins (the rendered history ends)."""
    divergence: int | None = None
    """First index where ``F`` departs from ``P`` (None when aligned)."""
    rewritten: MessageRef | None = None
    """For a history rewrite: the earlier message whose rendering changed."""
    form: str | None = None
    """When the message's own form was not realizable: the form it is audited in instead."""
    audited_form: str = REASONING_ABSENT
    """The reasoning form the turn is audited in."""
    prompt_state: str = UNKNOWN
    """What the generation prompt leaves open (see :mod:`tito_audit.audit.realization.reasoning_block`)."""
    model_text: str | None = None
    """The model's text when ``F`` does not hold it (an empty block the template drops)."""


@dataclass(frozen=True)
class UnrealizedTurn:
    """An assistant message whose original form no model could produce after this variant's prompt."""

    conversation_id: str
    turn: int
    original: str
    audited_as: str
    prompt: str
    """The generation prompt's text (evidence)."""
    shape: str
    state: str = UNKNOWN
    """What the generation prompt leaves open (see :mod:`tito_audit.audit.realization.reasoning_block`)."""


@dataclass
class RealizedConversation:
    conversation: Conversation
    renders: dict
    alignments: dict[int, TurnAlignment] = field(default_factory=dict)
    unrealized: list[UnrealizedTurn] = field(default_factory=list)


RenderTexts = Callable[[Sequence[Message], "list[dict] | None", Sequence[Key]], Mapping[Key, "str | None"]]
"""Text-only renders (None where the template refuses)."""


def was_last_in_rollout(messages: Sequence[Message], index: int) -> bool:
    """Whether message ``index`` was the last message of the render that first brought it into a TITO buffer.

    The buffer receives the first prompt (messages before the first assistant turn), then each sampled turn,
    then each bridge (the messages up to the next assistant turn): a message is last there when it is an
    assistant turn or the next message is one.

    >>> was_last_in_rollout([{"role": "user"}, {"role": "assistant"}, {"role": "tool"}, {"role": "tool"}], 2)
    False
    """
    if messages[index].get("role") == ASSISTANT:
        return True
    return index + 1 < len(messages) and messages[index + 1].get("role") == ASSISTANT


def owner_of(
    text: str,
    index: int,
    prefix_text: Callable[[int], str | None],
    upto: int,
    was_last: Callable[[int], bool],
    messages: Sequence[Message],
    later: str | None = None,
) -> MessageRef | None:
    """The message whose rendering changed at ``text[index]`` (``later`` is the text it is compared with).

    The smallest ``k <= upto`` whose ``render(M[:k])`` agrees with ``text`` beyond ``index`` is the render that
    first contains that character, so message ``k-1`` wrote it. When a render ends exactly at ``index`` and
    ``later`` holds text inserted there (what followed in ``text`` comes a little further on), the message that
    ended there grew: it is the one rewritten. None when no prefix render reaches ``index`` (the character
    belongs to a generation prompt or to what follows every message).

    ``prefix_text(k)`` gives ``render(M[:k], gp=False)`` (None when unavailable).

    The first :data:`SCANNED` prefixes are tried one by one; past them (a step of hundreds of tool results, in a
    session) the renders are searched by halves for the first that reaches ``index`` (a prefix's render grows with its
    messages), and that one and the next are tried: a diagnosis costs a few renders, not one per message (2,000
    parallel calls took 221 s and 2 GB, one render and tokenization per appended message).
    """

    def written_by(k: int) -> MessageRef | None:
        rendered = prefix_text(k)
        if rendered is None:
            return None
        agreed = common_prefix_length(rendered, text)
        grew = agreed == len(rendered) == index and later is not None and _inserted_at(text, later, index)
        if agreed > index or grew:
            return MessageRef(
                k - 1, str(messages[k - 1].get("role")), was_last(k - 1), _content_end(messages[k - 1], rendered)
            )
        return None

    for k in range(1, min(upto, SCANNED) + 1):
        owner = written_by(k)
        if owner is not None:
            return owner
    if upto <= SCANNED:
        return None
    low, high = SCANNED + 1, upto
    while low < high:
        middle = (low + high) // 2
        rendered = prefix_text(middle)
        if rendered is not None and len(rendered) >= index:
            high = middle
        else:
            low = middle + 1
    return written_by(low) or (written_by(low + 1) if low < upto else None)


SCANNED = 64
"""Prefixes :func:`owner_of` tries one by one before it searches by halves (more than any audited conversation of
the published matrix holds, so their diagnoses are found as they always were)."""


def _inserted_at(text: str, later: str, index: int, probe: int = 24, reach: int = 4000) -> bool:
    """Whether ``later`` inserts text at ``index``: what ``text`` continues with there follows a little later."""
    following = text[index : index + probe]
    return bool(following) and later.find(following, index + 1, index + reach + len(following)) > index


def _content_end(message: Message, rendered: str) -> int | None:
    """Where ``message``'s own text ends in ``rendered`` (a render whose last message it is), if it is found: its
    whole text when the template wrote it so (trailing whitespace is the message's own), else its stripped text."""
    content = message.get("content")
    if not isinstance(content, str) or not content.strip():
        return None
    for text in (content, content.strip()):
        found = rendered.rfind(text)
        if found >= 0:
            return found + len(text)
    return None


def locate_completion(prompt: str, full: str, prompt_start: int) -> tuple[int | None, int | None]:
    """(where the model's text starts in ``full``, where ``full`` departs from ``prompt``).

    Aligned: ``full`` starts with ``prompt``. History rewrite: they part inside the history
    (before ``prompt_start``) and the generation prompt is found again in ``full`` after that point. Otherwise
    the start is None.
    """
    if full.startswith(prompt):
        return len(prompt), None
    divergence = common_prefix_length(prompt, full)
    generation_prompt = prompt[prompt_start:]
    if divergence < prompt_start and generation_prompt:
        # the texts may part inside a control token's text ("<|im_" of "<|im_end|>" and "<|im_start|>"), so the
        # prompt may begin a little before the divergence, never wholly inside the common history
        found = full.find(generation_prompt, max(0, divergence - len(generation_prompt) + 1))
        if found >= 0:
            return found + len(generation_prompt), divergence
    return None, divergence


def turn_keys(messages: Sequence[Message]) -> list[Key]:
    """The renders the alignment of every assistant turn needs (``P``, ``F`` and the history without a prompt),
    and the next prompt after the last turn when messages follow it (the final appended step)."""
    keys: list[Key] = []
    for j, message in enumerate(messages):
        if message.get("role") == ASSISTANT:
            keys += [(j, True), (j + 1, False), (j, False)]
    if keys and messages[-1].get("role") != ASSISTANT:
        keys.append((len(messages), True))
    return keys


def realize(
    conversation: Conversation,
    renders: dict,
    render_prefixes: RenderPrefixes,
    render_texts: RenderTexts | None = None,
    block: ReasoningBlock | None = None,
) -> RealizedConversation:
    """Align every assistant turn of ``conversation``, auditing a turn whose reasoning form its prompt does not
    admit in the nearest form it does (see the module docstring). ``renders`` holds :func:`turn_keys` for
    ``conversation``; renders of prefixes from a replaced turn on are redone through ``render_prefixes``, each once
    (:mod:`tito_audit.audit.realization.turn_renders`).
    ``block`` is the template's reasoning block (None: unknown, every form is realizable).
    """
    try:
        return _walk(conversation, renders, render_prefixes, render_texts, block, thorough=False)
    except LaterRefusal:
        return _walk(conversation, renders, render_prefixes, render_texts, block, thorough=True)


def _walk(
    conversation: Conversation,
    renders: dict,
    render_prefixes: RenderPrefixes,
    render_texts: RenderTexts | None,
    block: ReasoningBlock | None,
    thorough: bool,
) -> RealizedConversation:
    result = RealizedConversation(conversation, dict(renders))
    original = conversation.messages  # forms change reasoning only, never roles or order
    turns = conversation.assistant_indices()
    current = TurnRenders(result.renders, render_prefixes, turns, thorough)

    def was_last(index: int) -> bool:
        return was_last_in_rollout(original, index)

    def history(k: int) -> str | None:
        rendered = result.renders.get((k, False))
        return rendered.text if rendered is not None else None

    for j in turns:
        current.ensure([(j, True), (j, False)], result.conversation.messages, conversation.tools)
        prompt = result.renders[(j, True)].text
        prompt_start = common_prefix_length(result.renders[(j, False)].text, prompt)
        state = prompt_state(block, prompt[prompt_start:])
        sent_back_without = _sent_back_without(result.conversation, j, state)
        swapped = None
        if not sent_back_without:
            swapped = _realizable_form(result, j, prompt[prompt_start:], state, current)
        message = result.conversation.messages[j]
        form = REASONING_SENT_BACK_WITHOUT if sent_back_without else reasoning_form(message)
        current.ensure([(j + 1, False)], result.conversation.messages, conversation.tools)
        full = result.renders[(j + 1, False)].text
        start, divergence = locate_completion(prompt, full, prompt_start)
        written = None
        if sent_back_without:  # what the model wrote: the block closed at once, whatever history makes of it
            written = _closed_at_once_text(result, j, prompt, prompt_start, render_prefixes, render_texts)
        if written is not None and not (start is not None and divergence is None and full[start:].startswith(written)):
            at = start if start is not None else common_prefix_length(prompt, full)
            found = TurnAlignment(j, EMPTY_BLOCK_DROPPED, at, prompt_start, divergence, model_text=written)
        elif start is not None and divergence is None:
            found = TurnAlignment(j, ALIGNED, start, prompt_start)
        elif start is not None:
            rewritten = owner_of(prompt, divergence, history, j, was_last, original, full)  # type: ignore[arg-type]
            found = TurnAlignment(j, HISTORY_REWRITE, start, prompt_start, divergence, rewritten)
        else:
            divergence = common_prefix_length(prompt, full)
            model_text = None
            if state == OPEN and form in (REASONING_EMPTY, REASONING_SENT_BACK_WITHOUT):
                model_text = _closed_at_once_text(result, j, prompt, prompt_start, render_prefixes, render_texts)
            status = GEN_PROMPT_MISMATCH if model_text is None else EMPTY_BLOCK_DROPPED
            found = TurnAlignment(j, status, divergence, prompt_start, divergence, model_text=model_text)
        result.alignments[j] = replace(found, form=swapped, audited_form=form, prompt_state=state)
    current.finish(result.conversation.messages, conversation.tools)
    return result


def _sent_back_without(conversation: Conversation, j: int, state: str) -> bool:
    """Whether turn ``j`` is one whose model closed the prompt's open reasoning block at once and whose harness sent
    it back without the reasoning field (a generated shape, :attr:`Conversation.reasoning_dropped_by_harness`)."""
    message = conversation.messages[j]
    return state == OPEN and conversation.reasoning_dropped_by_harness and reasoning_form(message) == REASONING_ABSENT


def _realizable_form(
    result: RealizedConversation,
    j: int,
    generation_prompt: str,
    state: str,
    current: TurnRenders,
) -> str | None:
    """When message ``j``'s reasoning form is not realizable, replace it by the nearest realizable form the
    template renders and record the original as not realizable; the form audited instead (None: unchanged)."""
    conversation = result.conversation
    message = conversation.messages[j]
    original_form = reasoning_form(message)
    realizable = REALIZABLE[state]
    if original_form in realizable:
        return None
    for form in [f for f in NEAREST[original_form] if f in realizable]:
        # the other messages are shared, never changed: their rendering inputs are prepared once
        candidate = replace(
            conversation,
            messages=[*conversation.messages[:j], with_reasoning_form(message, form), *conversation.messages[j + 1 :]],
        )
        if not current.try_form(j, candidate.messages, candidate.tools):
            continue  # the template refuses this form: try the next one
        result.conversation = candidate
        shape = ", ".join(f"{k}={v}" for k, v in sorted(conversation.shape.items())) or "unspecified"
        result.unrealized.append(
            UnrealizedTurn(conversation.id, j, original_form, form, generation_prompt, shape, state)
        )
        return form
    return None


def _closed_at_once_text(
    result: RealizedConversation,
    j: int,
    prompt: str,
    prompt_start: int,
    render_prefixes: RenderPrefixes,
    render_texts: RenderTexts | None,
) -> str | None:
    """What the model wrote when it closed the prompt's reasoning block at once: turn ``j`` rendered with a
    marker as its reasoning, the marker taken out (None when that render does not follow the prompt either)."""
    conversation = result.conversation
    marked = with_reasoning_form(conversation.messages[j], REASONING_PRESENT)
    marked["reasoning_content"] = MARKER
    messages = [*conversation.messages[:j], marked]
    key = (j + 1, False)
    try:
        if render_texts is not None:
            text = render_texts(messages, conversation.tools, [key])[key]
        else:
            text = render_prefixes(messages, conversation.tools, [key])[key].text  # type: ignore[attr-defined]
    except Exception:  # the template refuses the marked turn
        return None
    if text is None:
        return None
    start, _ = locate_completion(prompt, text, prompt_start)
    return closed_at_once(text, start) if start is not None else None


def keep_walked(failures: Sequence[Failure], realized: RealizedConversation) -> None:
    """Keep on each failure what its explanation reads (:class:`~tito_audit.audit.results.Walked`): the conversation as
    audited, shared by all its failures (no copy: the failures kept after the audit bound what stays in memory), and
    for a rollout step, what the model wrote in the turn before it where history does not render that turn."""
    conversation = realized.conversation
    turns = conversation.assistant_indices()
    for failure in failures:
        model_text = None
        if failure.check == "rollout":
            before = max((j for j in turns if j < failure.turn), default=None)
            alignment = realized.alignments.get(before) if before is not None else None
            model_text = alignment.model_text if alignment is not None else None
        failure.walked = Walked(conversation, model_text)
