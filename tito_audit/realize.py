"""Realizable turns (SPEC, "Realizable turns" and "Attribution"): audit an assistant turn only in a form a
model could have produced after its generation prompt, and find where the model's text begins.

For an assistant message at index ``j``: ``P = render(M[:j], gp=True)`` and ``F = render(M[:j+1], gp=False)``.
``P`` is the rendered history followed by the generation prompt; the generation prompt starts where
``render(M[:j], gp=False)`` and ``P`` part ways. Each turn ends up in one of three states:

- **aligned**: ``F`` starts with ``P``; the model's text is ``F[len(P):]``.
- **history rewrite**: ``F`` departs from ``P`` inside the rendered history (an earlier message renders
  differently once this turn follows it, e.g. a tool result closed one way when last and another way when
  not). The turn itself is realizable: the model's text starts after the generation prompt, found again in
  ``F`` after the divergence. The rewrite belongs to the earlier message, and the rollout reports it there.
- **gen-prompt mismatch**: ``F`` departs from ``P`` inside the generation prompt in every form tried. The
  model's text is taken as ``F`` after its longest common prefix with ``P`` and the rollout labels the
  divergence ``gen-prompt-mismatch``.

When the message as given is in neither of the first two states, the nearest other forms of it are tried:
reasoning dropped (the prompt already closed the reasoning block, as ``<think>\\n\\n</think>\\n\\n`` does when
thinking is off), reasoning empty, reasoning present (the prompt opened a block, so the model reasons). The
first that aligns is audited instead, and the original is reported as *not realizable under this variant*,
never as a failure or a pass.

Example: under Qwen3's ``enable_thinking=false`` the prompt ends with ``<think>\\n\\n</think>\\n\\n``; an
assistant message carrying ``reasoning_content`` renders ``<think>\\nreasoning\\n</think>`` instead, which no
model could produce after that prompt. Without its reasoning the turn aligns, so it is audited that way.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from tito_audit.conversation import ASSISTANT, TOOL, USER, Conversation, Message
from tito_audit.diff import common_prefix_length

ALIGNED = "aligned"
HISTORY_REWRITE = "history-rewrite"
GEN_PROMPT_MISMATCH = "gen-prompt-mismatch"

REASONING_ABSENT = "reasoning absent"
REASONING_EMPTY = "reasoning empty"
REASONING_PRESENT = "reasoning present"
REASONING_FORMS = (REASONING_ABSENT, REASONING_EMPTY, REASONING_PRESENT)
"""The forms of an assistant message's reasoning, in the order they are tried (nearest first)."""
STAND_IN_REASONING = "Let me work through this step by step."
"""The reasoning given to a turn whose prompt opens a reasoning block when the message carries none."""

Key = tuple[int, bool]


@dataclass(frozen=True)
class MessageRef:
    """The message whose rendering changed: its index, role, and whether it was last when first rendered."""

    index: int
    role: str
    was_last: bool
    content_end: int | None = None
    """Where its own text (content) ends in the compared text, when it could be located."""


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


@dataclass
class RealizedConversation:
    conversation: Conversation
    renders: dict
    alignments: dict[int, TurnAlignment] = field(default_factory=dict)
    unrealized: list[UnrealizedTurn] = field(default_factory=list)


RenderPrefixes = Callable[[Sequence[Message], "list[dict] | None", Sequence[Key]], Mapping[Key, object]]
RenderTexts = Callable[[Sequence[Message], "list[dict] | None", Sequence[Key]], Mapping[Key, "str | None"]]
"""Text-only renders (None where the template refuses): enough to tell whether a form aligns."""


def reasoning_form(message: Message) -> str:
    value = message.get("reasoning_content")
    if value is None:
        return REASONING_ABSENT
    return REASONING_EMPTY if isinstance(value, str) and not value.strip() else REASONING_PRESENT


def with_reasoning_form(message: Message, form: str) -> Message:
    """``message`` with its reasoning in ``form`` (present keeps its own text, or gets a stand-in)."""
    out = {k: v for k, v in message.items() if k != "reasoning_content"}
    if form == REASONING_EMPTY:
        out["reasoning_content"] = ""
    elif form == REASONING_PRESENT:
        own = message.get("reasoning_content")
        out["reasoning_content"] = own if isinstance(own, str) and own.strip() else STAND_IN_REASONING
    return out


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
    """
    for k in range(1, upto + 1):
        rendered = prefix_text(k)
        if rendered is None:
            continue
        agreed = common_prefix_length(rendered, text)
        grew = agreed == len(rendered) == index and later is not None and _inserted_at(text, later, index)
        if agreed > index or grew:
            return MessageRef(
                k - 1, str(messages[k - 1].get("role")), was_last(k - 1), _content_end(messages[k - 1], rendered)
            )
    return None


def _inserted_at(text: str, later: str, index: int, probe: int = 24, reach: int = 4000) -> bool:
    """Whether ``later`` inserts text at ``index``: what ``text`` continues with there follows a little later."""
    following = text[index : index + probe]
    return bool(following) and later.find(following, index + 1, index + reach + len(following)) > index


def _content_end(message: Message, rendered: str) -> int | None:
    """Where ``message``'s own text ends in ``rendered`` (a render whose last message it is), if it is found."""
    content = message.get("content")
    text = content.strip() if isinstance(content, str) else ""
    found = rendered.rfind(text) if text else -1
    return found + len(text) if found >= 0 else None


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
    """The renders the alignment of every assistant turn needs: ``P``, ``F`` and the history without a prompt."""
    keys: list[Key] = []
    for j, message in enumerate(messages):
        if message.get("role") == ASSISTANT:
            keys += [(j, True), (j + 1, False), (j, False)]
    return keys


def realize(
    conversation: Conversation,
    renders: dict,
    render_prefixes: RenderPrefixes,
    render_texts: RenderTexts | None = None,
) -> RealizedConversation:
    """Align every assistant turn of ``conversation``, replacing turns no model could produce by the nearest
    form that aligns (see the module docstring). ``renders`` holds :func:`turn_keys` for ``conversation``;
    renders of prefixes after a replaced turn are redone through ``render_prefixes`` (a form the template
    refuses to render is not a realizable one).
    """
    result = RealizedConversation(conversation, dict(renders))
    original = conversation.messages  # the forms tried below change reasoning only, never roles or order

    def was_last(index: int) -> bool:
        return was_last_in_rollout(original, index)

    def history(k: int) -> str | None:
        rendered = result.renders.get((k, False))
        return rendered.text if rendered is not None else None

    def alignment(j: int, prompt: str, full: str, prompt_start: int, form: str | None) -> TurnAlignment | None:
        start, divergence = locate_completion(prompt, full, prompt_start)
        if start is None:
            return None
        if divergence is None:
            return TurnAlignment(j, ALIGNED, start, prompt_start, form=form)
        rewritten = owner_of(prompt, divergence, history, j, was_last, original, full)
        return TurnAlignment(j, HISTORY_REWRITE, start, prompt_start, divergence, rewritten, form)

    for j in conversation.assistant_indices():
        prompt, full = result.renders[(j, True)].text, result.renders[(j + 1, False)].text
        prompt_start = common_prefix_length(result.renders[(j, False)].text, prompt)
        found = alignment(j, prompt, full, prompt_start, None) or _try_forms(
            result,
            j,
            prompt,
            lambda text, form, j=j, p=prompt, s=prompt_start: alignment(j, p, text, s, form),
            render_prefixes,
            render_texts,
        )
        if found is None:
            divergence = common_prefix_length(prompt, full)
            found = TurnAlignment(j, GEN_PROMPT_MISMATCH, divergence, prompt_start, divergence)
        result.alignments[j] = found
    return result


def _try_forms(
    result: RealizedConversation,
    j: int,
    prompt: str,
    align: Callable[[str, str], TurnAlignment | None],
    render_prefixes: RenderPrefixes,
    render_texts: RenderTexts | None,
) -> TurnAlignment | None:
    """Replace message ``j`` by the first other reasoning form that aligns (``align(F, form)``) and record the
    original as not realizable; None when no form aligns."""
    conversation = result.conversation
    original = conversation.messages[j]
    original_form = reasoning_form(original)
    for form in REASONING_FORMS:
        if form == original_form:
            continue
        # the other messages are shared, never changed: their rendering inputs are prepared once
        candidate = replace(
            conversation,
            messages=[*conversation.messages[:j], with_reasoning_form(original, form), *conversation.messages[j + 1 :]],
        )
        try:
            if render_texts is not None:  # most forms do not align: tokenize only the one that does
                text = render_texts(candidate.messages, candidate.tools, [(j + 1, False)])[(j + 1, False)]
                if text is None or align(text, form) is None:
                    continue
            rendered = render_prefixes(candidate.messages, candidate.tools, [(j + 1, False)])[(j + 1, False)]
        except Exception:  # the template refuses this form: not a realizable one
            continue
        found = align(rendered.text, form)
        if found is None:
            continue
        renders = {key: value for key, value in result.renders.items() if key[0] <= j}
        renders[(j + 1, False)] = rendered
        later = [key for key in result.renders if key[0] > j + 1 or key == (j + 1, True)]
        try:
            renders.update(render_prefixes(candidate.messages, candidate.tools, later) if later else {})
        except Exception:  # a later prefix refuses this form
            continue
        result.conversation, result.renders = candidate, renders
        shape = ", ".join(f"{k}={v}" for k, v in sorted(conversation.shape.items())) or "unspecified"
        result.unrealized.append(
            UnrealizedTurn(conversation.id, j, original_form, form, prompt[found.prompt_start :], shape)
        )
        return found
    return None


def realizable_reasoning(render_prefixes: RenderPrefixes, tools: list[dict] | None) -> tuple[str, ...] | None:
    """The reasoning kinds (``absent``, ``empty``, ``present``) a model can produce under this variant, probed
    on two small conversations (an answer after a user message, and one after a tool result). None when every
    kind is possible, or when the probe is inconclusive (the template refuses it, or no kind aligns, as with a
    prompt that opens a block history never shows): the generator then draws every kind.
    """
    call = {"id": "probe0002", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Oslo"}}}
    after_user: list[Message] = [{"role": USER, "content": "Hello there."}]
    after_tool: list[Message] = [
        {"role": USER, "content": "Weather in Oslo?"},
        {"role": ASSISTANT, "content": "", "tool_calls": [call]},
        {"role": TOOL, "tool_call_id": "probe0002", "name": "get_weather", "content": "Sunny, 21 C."},
    ]
    allowed: set[str] | None = None
    for history in (after_user, after_tool):
        j = len(history)
        aligned = set()
        for form in REASONING_FORMS:
            answer = with_reasoning_form({"role": ASSISTANT, "content": "It is sunny."}, form)
            messages = [*history, answer]
            try:
                texts = render_prefixes(messages, tools, [(j, True), (j + 1, False), (j, False)])
            except Exception:
                return None
            prompt = texts[(j, True)].text
            start, divergence = locate_completion(
                prompt, texts[(j + 1, False)].text, common_prefix_length(texts[(j, False)].text, prompt)
            )
            if start is not None and divergence is None:
                aligned.add(form)
        if not aligned:
            return None
        allowed = aligned if allowed is None else allowed & aligned
    if not allowed or len(allowed) == len(REASONING_FORMS):
        return None
    return tuple(form.split()[-1] for form in REASONING_FORMS if form in allowed)
