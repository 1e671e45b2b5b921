"""Where two engines' parsers part ways on one model (docs/contract.md "Engines differ"): the same completions handed to
each engine's parser, each through its own engine's hand-over, and, where the parsed messages differ, what each does to
the next prompt.

The completions are the audit's own drawn turns (the generated conversations of every variant, as the simulated rollout
samples them, in the layout the family's model writes) and the layouts of :mod:`.parse_step.call_layouts`, built from
the template's rendering of one drawn turn with content and a call. Two parsed messages are compared on what the next
render reads (content, reasoning, each call's name and argument values; call ids differ by design and a null content
renders as an empty one). Where they differ, each message goes into the history in place of the turn, the tool results
answer its calls, and the next prompt is joined with the buffer as the rollout does
(:func:`tito_audit.audit.core.join.join`): does the buffer, holding what the model wrote, stay a prefix?
"""

from __future__ import annotations

import contextlib
import functools
import json
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from tito_audit.audit.audit_options import AuditOptions, ConversationSource, conversation_source
from tito_audit.audit.checks.rollout_context import RolloutContext
from tito_audit.audit.checks.trace import trace_of
from tito_audit.audit.core.join import Join, join, join_text_only
from tito_audit.audit.parse_step.call_layouts import LAYOUTS, CallTurn, WrittenTurn
from tito_audit.audit.parse_step.parsed_turns import (
    answer_with_ids,
    as_the_model_writes,
    handed_input,
    parse_with,
    quoted_arguments,
)
from tito_audit.audit.variant import VariantAudit
from tito_audit.conversations.conversation import ASSISTANT, TOOL, USER, Message
from tito_audit.errors import BadInputError
from tito_audit.model.load_folder import LoadedModel, codec_for
from tito_audit.model.render import RenderedPrefix, RenderError, frozen_clock
from tito_audit.model.variants import template_inputs, variants_for
from tito_audit.parse.fields import CALL_LOST, changed_fields
from tito_audit.parse.parser import ParserChoice

DRAWN = "drawn"
"""The source of a case that is one of the audit's drawn completions (the others name their layout)."""
KEPT_PER_KIND = 3
"""Differing drawn completions shown per kind of difference (the others are counted)."""
WINDOW = 90
"""Characters of text shown on each side of where a buffer and a next prompt part."""


@dataclass
class ParsedSide:
    """What one engine's parser made of a completion, and what that does to the next prompt."""

    engine: str
    parser: str
    message: dict[str, Any]
    """The parsed message as the next render reads it."""
    changed: list[str] = field(default_factory=list)
    """What the parse changed against the message the model meant (:mod:`tito_audit.parse.fields`)."""
    keeps_prefix: bool | None = None
    """Whether the next prompt, rendered from this message, still continues the buffer (None: not rendered)."""
    buffer: str = ""
    """The buffer around where it and the next prompt part (or its end, when the prefix holds)."""
    next_prompt: str = ""
    """The next prompt at the same place."""
    parts_at: int = -1
    """Where, in both windows, the buffer and the next prompt part (-1: they do not)."""
    detail: str = ""


@dataclass
class EngineCase:
    """One completion handed to every engine's parser."""

    source: str
    """``drawn`` (one of the audit's completions) or the layout's name (``compact JSON``, …)."""
    variant: str
    conversation_id: str
    turn: int
    text: str
    """The completion as the model wrote it (before each engine's hand-over)."""
    stopped: bool
    """False: cut at the token limit (no stop token)."""
    agree: bool
    sides: list[ParsedSide] = field(default_factory=list)
    """Each engine's side, where they disagree."""
    control: ParsedSide | None = None
    """Where they disagree: the message the model meant (the perfect inverse) in the same place, so that what the
    template does to any message is told apart from what a parser did."""


@dataclass
class EngineComparison:
    """Every engine's parsers on one model's completions."""

    engines: list[str]
    parsers: list[str]
    drawn: int = 0
    """Drawn completions handed to every parser."""
    drawn_differing: int = 0
    """Of those, the completions whose parsed messages differ."""
    differing_kinds: dict[str, int] = field(default_factory=dict)
    """Differing drawn completions by what differs (``content``, ``calls``, ``reasoning``; joined with ``+``)."""
    cases: list[EngineCase] = field(default_factory=list)
    """Every layout case (agreeing or not), then the first differing drawn completions of each kind."""


def compare_engines(loaded: LoadedModel, choices: Sequence[ParserChoice], options: AuditOptions) -> EngineComparison:
    """Hand the drawn completions of every variant of ``loaded`` (``options.count`` generated conversations each)
    and the layouts to each of ``choices``' parsers."""
    parsers = [choice for choice in choices if choice.parser is not None]
    comparison = EngineComparison([c.engine for c in parsers], [c.name for c in parsers])
    codec = codec_for(loaded)
    inputs = (
        template_inputs(loaded.template_source, codec.tokenizer.special_tokens_map.keys(), options.limits)
        if (loaded.template_source is not None)
        else []
    )
    conversations_for = conversation_source(options)
    drawn: list[EngineCase] = []
    for variant in variants_for(inputs, options.pinned_kwargs):
        variant_audit = VariantAudit(loaded, codec, variant, options)
        with frozen_clock(loaded.template_source, options.clock):
            base = None
            for context in _contexts(variant_audit, conversations_for):
                for case in _drawn_cases(context, variant.name, parsers, variant_audit, comparison):
                    drawn.append(case)
                base = base or _call_turn(context, variant_audit)
            if base is not None:
                comparison.cases += _layout_cases(*base, variant.name, parsers)
    comparison.cases += drawn
    return comparison


def _contexts(variant_audit: VariantAudit, conversations_for: ConversationSource) -> Iterator[RolloutContext]:
    _, setup = variant_audit.check_setup()
    for conversation in conversations_for(variant_audit.profile):
        if not conversation.tools and any(m.get("tool_calls") for m in conversation.messages):
            continue  # an engine parses calls only when the request declares tools: no loop has this conversation
        audited, renders, _ = variant_audit.accept(conversation)
        if audited is None or renders is None:
            continue
        realized = variant_audit.realize(audited, renders)
        context = RolloutContext(setup, realized.conversation, realized.renders, realized.alignments)
        messages = context.conversation.messages
        if any(quoted_arguments(messages[c.turn], c.text) for c in trace_of(context).completions):
            continue  # arguments quoted as a JSON string: no model behind an engine writes them (see parsed_rollout)
        yield context


def _drawn_cases(
    context: RolloutContext,
    variant: str,
    parsers: list[ParserChoice],
    variant_audit: VariantAudit,
    comparison: EngineComparison,
) -> Iterator[EngineCase]:
    messages = context.conversation.messages
    for completion in trace_of(context).completions:
        completion = as_the_model_writes(context, completion, variant_audit.layout)
        j = completion.turn
        stop = context.setup.decode_one(completion.ids[-1]) if completion.stopped and completion.ids else None
        written = WrittenTurn(DRAWN, completion.text, stop, messages[j])
        parsed = _parse_all(context, j, written, completion.ids, parsers)
        comparison.drawn += 1
        kind = _difference(parsed)
        if kind is None:
            continue
        comparison.drawn_differing += 1
        seen = comparison.differing_kinds.get(kind, 0)
        comparison.differing_kinds[kind] = seen + 1
        if seen < KEPT_PER_KIND:
            yield _case(context, j, written, parsers, parsed, variant, completion.ids, appended=None)


def _layout_cases(
    context: RolloutContext, turn: CallTurn, j: int, variant: str, parsers: list[ParserChoice]
) -> list[EngineCase]:
    cases = []
    for layout in LAYOUTS:
        written = layout(turn)
        if written is None:
            continue
        ids = context.setup.codec.encode(written.text)
        parsed = _parse_all(context, j, written, ids, parsers)
        if _difference(parsed) is None:
            cases.append(
                EngineCase(
                    written.layout, variant, context.conversation.id, j, written.text, written.stop is not None, True
                )
            )
            continue
        cases.append(_case(context, j, written, parsers, parsed, variant, ids, appended=_answers))
    return cases


def _call_turn(context: RolloutContext, variant_audit: VariantAudit) -> tuple[RolloutContext, CallTurn, int] | None:
    """The first turn of ``context`` with content and one call, followed by its tool result and a step the template
    itself keeps a prefix (so that what the layouts show is the parsers' doing), as the layouts' base."""
    messages = context.conversation.messages
    trace = trace_of(context)
    held = {step.previous.turn for step in trace.steps if step.followed}
    for completion in trace.completions:
        if completion.turn not in held:
            continue
        j = completion.turn
        message = messages[j]
        calls = message.get("tool_calls") or []
        content = message.get("content")
        follows = j + 1 < len(messages) and messages[j + 1].get("role") == TOOL
        arguments = calls[0].get("function", {}).get("arguments") if len(calls) == 1 else None
        if not isinstance(arguments, dict) or not arguments or not isinstance(content, str) or not content.strip():
            continue
        if not follows:
            continue
        if not completion.stopped or variant_audit.layout is not None:
            continue  # the layouts rewrite the template's own layout
        stop = context.setup.decode_one(completion.ids[-1])
        turn = CallTurn(
            completion.text,
            stop,
            message,
            functools.partial(_rerender, context, j),
            context.setup.codec.written_added_pattern,
        )
        return context, turn, j
    return None


def _rerender(context: RolloutContext, j: int, message: Message) -> tuple[str, str | None] | None:
    """What a model writes at turn ``j`` for ``message``: the template's rendering of it after the prompt, cut after
    its first stop token."""
    history = [*context.conversation.messages[:j], message]
    keys = [(j, True), (j + 1, False)]
    try:
        renders = context.setup.renderer.prefixes(history, context.conversation.tools, keys)
    except RenderError:
        return None
    prompt, full = renders[keys[0]].text, renders[keys[1]].text
    if not full.startswith(prompt):
        return None
    generated = full[len(prompt) :]
    stops = [(generated.find(text), text) for text in context.setup.stop_texts if text and text in generated]
    if not stops:
        return generated, None
    at, text = min(stops)
    return generated[: at + len(text)], text


def _parse_all(
    context: RolloutContext, j: int, written: WrittenTurn, ids: list[int], parsers: list[ParserChoice]
) -> list[Message | str]:
    """Each parser's message for ``written`` (handed over by its engine), or what it raised."""
    prompt = context.renders[(j, True)]
    calls = sum(len(m.get("tool_calls") or []) for m in context.conversation.messages[:j])
    parsed: list[Message | str] = []
    for choice in parsers:
        assert choice.parser is not None
        given = handed_input(context, choice.parser, prompt, j, (written.text, ids), written.stop, calls)
        try:
            parsed.append(parse_with(choice.parser, given))
        except BadInputError as exc:
            parsed.append(str(exc))
    return parsed


def comparable(message: Message | str) -> Any:
    """What the next render reads of a parsed message: content (null as empty), reasoning, each call's name and
    argument values (call ids left out)."""
    if isinstance(message, str):
        return ("raised", message)
    calls = []
    for call in message.get("tool_calls") or []:
        function = call.get("function") or {}
        arguments = function.get("arguments")
        if isinstance(arguments, str):
            with contextlib.suppress(ValueError):
                arguments = json.loads(arguments)
        calls.append((function.get("name"), json.dumps(arguments, sort_keys=True, ensure_ascii=False)))
    return (message.get("content") or "", message.get("reasoning_content") or "", tuple(calls))


def _difference(parsed: list[Message | str]) -> str | None:
    """What differs between the parsed messages (``content+calls``), None when they agree."""
    views = [comparable(message) for message in parsed]
    if all(view == views[0] for view in views):
        return None
    if any(view[0] == "raised" for view in views):
        return "a parser raised"
    names = ("content", "reasoning", "calls")
    return "+".join(name for i, name in enumerate(names) if any(view[i] != views[0][i] for view in views))


AppendedTurns = Callable[[Message], list[Message]]
"""What a loop appends after a parsed turn (see :func:`_answers`)."""


def _answers(parsed: Message) -> list[Message]:
    """What a loop appends after a parsed turn: a result for each call it got, else the user's next message."""
    calls = parsed.get("tool_calls") or []
    if not calls:
        return [{"role": USER, "content": "Go on."}]
    return [
        {
            "role": TOOL,
            "tool_call_id": call.get("id"),
            "name": (call.get("function") or {}).get("name"),
            "content": "ok",
        }
        for call in calls
    ]


def _case(
    context: RolloutContext,
    j: int,
    written: WrittenTurn,
    parsers: list[ParserChoice],
    parsed: list[Message | str],
    variant: str,
    ids: list[int],
    appended: AppendedTurns | None,
) -> EngineCase:
    case = EngineCase(
        written.layout, variant, context.conversation.id, j, written.text, written.stop is not None, False
    )
    case.control = ParsedSide("", "template", written.meant)
    _next_prompt(context, j, written, written.meant, ids, appended, case.control)
    for choice, message in zip(parsers, parsed, strict=True):
        side = ParsedSide(choice.engine, choice.name, message if isinstance(message, dict) else {})
        if isinstance(message, str):
            side.detail = message
        else:
            side.changed = changed_fields(written.meant, message, written.text)
            _next_prompt(context, j, written, message, ids, appended, side)
        case.sides.append(side)
    return case


def _next_prompt(
    context: RolloutContext,
    j: int,
    written: WrittenTurn,
    parsed: Message,
    ids: list[int],
    appended: AppendedTurns | None,
    side: ParsedSide,
) -> None:
    """Join the buffer (the prompt and what the model wrote) with the next prompt rendered from ``parsed``."""
    messages = context.conversation.messages
    if appended is None:  # a drawn turn: the conversation's own next step
        history = list(messages)
        history[j] = parsed
        answer_with_ids(history, j, messages[j], parsed)
        later = [k for k in range(j + 1, len(history)) if history[k].get("role") == ASSISTANT]
        k = later[0] if later else len(history)
    else:
        history = [*messages[:j], parsed, *appended(parsed)]
        k = len(history)
    try:
        prompt = context.setup.renderer.prefixes(history, context.conversation.tools, [(k, True)])[(k, True)]
    except RenderError as exc:
        side.detail = f"the template refused the parsed message: {exc}"
        return
    before = context.renders[(j, True)]
    joined = _join(context, before.text + written.text, list(before.ids) + list(ids), prompt)
    side.keeps_prefix = joined.followed
    at = joined.text_index if joined.text_index is not None else len(joined.normalized_buffer)
    start = max(0, at - WINDOW)
    side.buffer = joined.normalized_buffer[start : at + WINDOW]
    side.next_prompt = joined.normalized_prompt[start : at + WINDOW]
    side.parts_at = at - start if joined.text_index is not None else -1
    if joined.followed and CALL_LOST in side.changed and context.conversation.tools:
        side.detail = "the next prompt continues the buffer, but the harness never got the call"
    elif joined.followed:
        side.detail = "the next prompt continues the buffer"
    elif joined.text_index is None:
        side.detail = "the text holds but the tokens merge across the join (bpe-seam)"
    else:
        side.detail = "the next prompt parts from the buffer at the marked character"


def _join(context: RolloutContext, text: str, ids: list[int], prompt: RenderedPrefix) -> Join:
    codec = context.setup.codec
    if context.setup.text_only:
        return join_text_only(codec, text, ids, prompt)
    return join(codec, text, prompt, (lambda: list(ids)) if codec.piecewise else None)
