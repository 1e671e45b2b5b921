"""The rollout with the engine's parser (docs/contract.md "The parse step"): the next prompt is rendered from what the
parser made of each completion, not from the message the template rendered.

The sampled completions are the rollout's own (:mod:`tito_audit.audit.checks.trace`): the model wrote the
template's rendering of its turn, cut at the stop token — or, where the registry records that the family's model
writes another layout than its template's history (gpt-oss's harmony, :mod:`tito_audit.parse.output_layouts`), that
layout. The engine hands the parser that text as it would (:mod:`tito_audit.audit.parse_step.parsed_turns`: stop token
trimmed or kept, special tokens skipped without tools); the parsed message replaces the turn in history, and the tool
results that answer its calls carry the parser's call ids (a loop sends them back under the ids it was given). Before
each later turn the buffer is joined with ``R' = render(parsed history, gp=True)``
(:func:`tito_audit.audit.core.join.join`, as the rollout does with ``R``).

The control is the same step in the rollout without a parser: a step that fails with ``R'`` while the control holds
is caused by the parse (``parse-lossy``, with the fields the parse changed), or by the model's own layout re-rendered
in the template's (``tool-call-reformatted``); a step the control fails too keeps the control's causes, so template
causes and parser causes are never confused. A call the parser loses in a conversation that declared tools fails
the step after it (``parse-lossy``, ``call lost``) even when the next prompt still continues the buffer: the harness
never got its call. After a failing step the buffer starts again from ``R'``, as a loop that re-renders would.

A conversation that carries tool calls without declaring tools is not walked: an engine parses calls only when the
request declares tools, so no loop behind one produces it (it is counted).

Beside the verdict, tool-call turns are also written in another layout (:mod:`tito_audit.parse.written`), one layout
drawn per turn: does the prompt rendered from the parsed rewritten turn still continue the rewritten buffer? And
turns with reasoning are also written with their calls inside the reasoning
(:mod:`tito_audit.audit.parse_step.reasoning_calls`): does the parser still find them?

Example (a parser that strips content; the template writes it as sampled)::

    buffer = "...<|im_start|>assistant\\n  Let me check.\\n<tool_call>..."
    R'     = "...<|im_start|>assistant\\nLet me check.\\n<tool_call>..."     # parse-lossy: content whitespace
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from tito_audit.audit.checks.outcome import FAILED, PASSED, Tally, count_steps
from tito_audit.audit.checks.records import text_failure, token_failure
from tito_audit.audit.checks.rollout_context import RolloutContext
from tito_audit.audit.checks.trace import Completion, StepTrace, trace_of
from tito_audit.audit.checks.undo_reruns import WalkedStep
from tito_audit.audit.conditions.step_conditions import rare_call, step_tags
from tito_audit.audit.core.causes import MessageRef, parse_lossy, tool_call_reformatted
from tito_audit.audit.core.diff import first_difference
from tito_audit.audit.core.join import Join, join, join_text_only
from tito_audit.audit.parse_step.parse_memo import ParseMemo
from tito_audit.audit.parse_step.parsed_turns import (
    answer_with_ids,
    as_the_model_writes,
    parse_with,
    parser_input,
    quoted_arguments,
    render_next,
)
from tito_audit.audit.parse_step.reasoning_calls import calls_in_reasoning
from tito_audit.audit.parse_step.value_rewrites import Rewrite, RewriteTotals, rewrites
from tito_audit.audit.results import Failure
from tito_audit.conversations.conversation import ASSISTANT, TOOL, Message, steps_of
from tito_audit.model.render import RenderedPrefix, RenderError
from tito_audit.parse.fields import (
    ARGUMENTS_AS_OBJECT,
    CALL_ADDED,
    CALL_LOST,
    ID_CHANGED,
    ID_REFUSED,
    OBJECT_REFUSED,
    changed_fields,
)
from tito_audit.parse.output_layouts import OutputLayout
from tito_audit.parse.parser import CompletionParser
from tito_audit.parse.written import LAYOUTS

NAME = "parse"
LOSSY = parse_lossy.NAME
REFORMATTED = tool_call_reformatted.NAME


@dataclass
class ParsedOutcome:
    """What one conversation contributed to the rollout with a parser."""

    tallies: list[Tally] = field(default_factory=list)
    failures: list[Failure] = field(default_factory=list)
    fields: dict[str, int] = field(default_factory=dict)
    turns_parsed: int = 0
    turns_changed: int = 0
    turns_in_model_layout: int = 0
    """Turns the model wrote in its own layout (which differs from the template's history layout)."""
    written: dict[str, list[int]] = field(default_factory=dict)
    """Layout -> [tool steps, steps whose next prompt no longer continues the buffer]."""
    skipped: int = 0
    """1 when the template wrote tool-call arguments given as JSON strings as quoted strings: a model behind an
    engine never writes that (see :func:`.parsed_turns.quoted_arguments`)."""
    without_tools: int = 0
    """1 when the conversation carries tool calls but declares no tools: no engine parses calls then."""
    calls_in_reasoning: list[int] = field(default_factory=lambda: [0, 0])
    """[tool-call turns with reasoning written with their calls inside the reasoning, of them: calls lost]."""
    conditions: dict[tuple, list[int]] = field(default_factory=dict)
    """(step kind, its conditions, what it holds without, whether the plain loop holds) -> [steps, failed steps]."""
    call_turns: list[int] = field(default_factory=lambda: [0, 0, 0, 0])
    """[call turns parsed, of them: those whose calls the parser lost, those written in the rare form of the
    family's habit (a call with no text before it), of those: lost]."""
    walked: list[WalkedStep] = field(default_factory=list)
    """Each step as walked (settled by the undo re-runs, then counted by :meth:`close`)."""
    step_fields: dict[int, list[str]] = field(default_factory=dict)
    """Of each failing step (by its turn): the fields the parse changed, and its failure."""
    step_failures: dict[int, Failure] = field(default_factory=dict)
    rewrites: dict[int, list[Rewrite]] = field(default_factory=dict)
    """Assistant turn -> the argument values the parser read back as other values."""
    previous_turn: dict[int, int] = field(default_factory=dict)
    """Step (by its turn) -> the assistant turn before it."""
    rewritten: RewriteTotals = field(default_factory=RewriteTotals)

    @property
    def statuses(self) -> dict[int, bool]:
        """Step (by its turn) -> whether the buffer followed."""
        return {step.turn: step.followed for step in self.walked}

    def close(self, held_as_read: dict[int, set[str]] | None = None) -> None:
        """Count the settled steps: tallies, fields, failures, conditions. A step in ``held_as_read`` failed only for
        the values the parser rewrote (it holds with them written as read back; the value types whose rewrite broke
        it): it holds in the verdict, and counts as broken by a written value beside it."""
        held_as_read = held_as_read or {}
        for step in self.walked:
            failure = self.step_failures.get(step.turn)
            found = self.rewrites.get(self.previous_turn.get(step.turn, -1), [])
            if found:
                self.rewritten.add_step(found, held_as_read.get(step.turn, set()), failure)
            if step.turn in held_as_read:
                step.tried, step.held_without, step.plain_holds = [], [], False
                continue
            self.tallies.append(Tally(NAME, step.kind, PASSED if step.followed else FAILED))
            for name in self.step_fields.get(step.turn, []):
                self.fields[name] = self.fields.get(name, 0) + 1
            if failure is not None:
                self.failures.append(failure)
        count_steps(self.conditions, self.walked)


@dataclass
class _Walk:
    """The parsed history and the buffer as the walk goes."""

    history: list[Message]
    ids: list[int]
    text: str
    fields_by_turn: dict[int, list[str]] = field(default_factory=dict)
    model_layout_turns: set[int] = field(default_factory=set)
    calls: int = 0
    layout: str | None = None
    """The name of the layout the family's model writes (where it differs from the template's)."""
    memo: ParseMemo | None = None
    """Where the parser is a conversation's :class:`ParseMemo`: its next prompts, kept."""


def parsed_rollout(
    context: RolloutContext,
    control_causes: dict[int, list[str]],
    parser: CompletionParser,
    seed: int,
    layout: OutputLayout | None = None,
    side_walks: bool = True,
) -> ParsedOutcome:
    """Walk ``context``'s rollout with ``parser`` between each completion and the next prompt.

    ``control_causes`` maps each step (by the turn it leads to) that fails without a parser to that failure's
    causes; ``layout`` is the layout the family's model writes its turns in, when it differs from the template's.
    ``side_walks``: also the other written layouts and the calls inside the reasoning (not for an undo re-run, which
    reads the steps alone). The steps are counted by :meth:`ParsedOutcome.close`, once the undo re-runs settled them.
    """
    outcome = ParsedOutcome()
    trace = trace_of(context)
    messages = context.conversation.messages
    turns = context.conversation.assistant_indices()
    if not trace.completions:
        return outcome
    if not context.conversation.tools and any(m.get("tool_calls") for m in messages):
        outcome.without_tools = 1
        return outcome
    if any(quoted_arguments(messages[c.turn], c.text) for c in trace.completions):
        outcome.skipped = 1
        return outcome
    rng = random.Random(f"written:{seed}:{context.conversation.id}")
    first = context.renders[(turns[0], True)]
    walk = _Walk(list(messages), list(first.ids), first.text, layout=layout.name if layout is not None else None)
    walk.memo = parser if isinstance(parser, ParseMemo) else None
    control = {step.turn: step for step in trace.steps}
    steps = {step.after: step for step in steps_of(messages)}
    completions = {completion.turn: completion for completion in trace.completions}
    ends = [*turns[1:], len(messages)]
    for j, end in zip(turns, ends, strict=True):
        if j != turns[0] and not _step(context, walk, control[j], control_causes, outcome):
            return outcome
        completion = as_the_model_writes(context, completions[j], layout)
        if completion is not completions[j]:
            walk.model_layout_turns.add(j)
            outcome.turns_in_model_layout += 1
        before, calls_before = (walk.text, list(walk.ids)), walk.calls
        lost_inside = calls_in_reasoning(context, parser, j, completion, calls_before) if side_walks else None
        if lost_inside is not None:
            outcome.calls_in_reasoning[0] += 1
            outcome.calls_in_reasoning[1] += lost_inside
        _parse_turn(context, walk, j, completion, parser, outcome)
        walk.ids += completion.ids
        walk.text += completion.text
        wrote_calls = end in steps and steps[end].kind == TOOL and messages[j].get("tool_calls")
        if side_walks and wrote_calls:
            _written(context, walk, (j, end, calls_before), completion, before, parser, rng, outcome)
    final = control.get(len(messages))
    if final is not None:
        _step(context, walk, final, control_causes, outcome)
    return outcome


def _parse_turn(
    context: RolloutContext,
    walk: _Walk,
    j: int,
    completion: Completion,
    parser: CompletionParser,
    outcome: ParsedOutcome,
) -> None:
    """Parse turn ``j``'s completion into the history, with the parser's call ids in the answering tool results."""
    original = context.conversation.messages[j]
    prompt = (walk.text, walk.ids)
    parsed = parse_with(parser, parser_input(context, parser, prompt, j, completion.text, completion, walk.calls))
    walk.calls += len(parsed.get("tool_calls") or [])
    fields = changed_fields(original, parsed, completion.text)
    outcome.turns_parsed += 1
    outcome.turns_changed += bool(set(fields) - {ID_CHANGED})
    walk.fields_by_turn[j] = fields
    found = rewrites(original, parsed)
    if found:
        outcome.rewrites[j] = found
    if original.get("tool_calls"):
        lost, rare = CALL_LOST in fields, rare_call(original, context.setup.rare_form)
        for index, counted in enumerate((True, lost, rare, lost and rare)):
            outcome.call_turns[index] += counted
    if not fields:
        return  # the parse gave the message back: history keeps the very same message
    walk.history[j] = parsed
    answer_with_ids(walk.history, j, original, parsed)


def _join(context: RolloutContext, walk: _Walk, prompt: RenderedPrefix) -> Join:
    codec = context.setup.codec
    if context.setup.text_only:
        return join_text_only(codec, walk.text, walk.ids, prompt)
    return join(codec, walk.text, prompt, (lambda: list(walk.ids)) if codec.piecewise else None)


def _step(
    context: RolloutContext,
    walk: _Walk,
    step: StepTrace,
    control_causes: dict[int, list[str]],
    outcome: ParsedOutcome,
) -> bool:
    """Join the buffer with the prompt rendered from the parsed history before ``step.turn``; False when the
    template refuses that history (the rollout cannot go on)."""
    k = step.turn
    previous = step.previous.turn
    outcome.previous_turn[k] = previous
    own_layout = walk.layout if previous in walk.model_layout_turns else None
    tags = step_tags(context.conversation, previous, k, step.previous.form, context.setup.rare_form, own_layout)
    changed = [j for j, fields in sorted(walk.fields_by_turn.items()) if fields and j < k]
    try:
        prompt = _next_prompt(context, walk, k) if changed else context.renders[(k, True)]
    except RenderError as exc:
        refused_fields = {f for j in changed for f in walk.fields_by_turn[j]}
        field_name = next((f for f in (CALL_LOST, CALL_ADDED) if f in refused_fields), None) or (
            ID_REFUSED
            if refused_fields == {ID_CHANGED}
            else OBJECT_REFUSED
            if ARGUMENTS_AS_OBJECT in refused_fields
            else "template refused the parsed message"
        )
        failure = Failure(NAME, "refused", step.kind, context.conversation.id, k, step.roles, [LOSSY])
        failure.detail = f"{field_name}: {exc}"
        _count(outcome, WalkedStep(k, step.kind, tags, False), [field_name], failure)
        return False
    joined = _join(context, walk, prompt)
    lost = CALL_LOST in walk.fields_by_turn.get(previous, []) and bool(context.conversation.tools)
    if joined.followed and not lost:
        bridge = joined.bridge or []
        walk.ids += bridge
        walk.text = prompt.text
        _count(outcome, WalkedStep(k, step.kind, tags, True), [], None)
        return True
    if joined.followed:  # the lost call re-rendered as content keeps the prefix; the harness never got its call
        failure = Failure(NAME, "call", step.kind, context.conversation.id, k, step.roles, [LOSSY])
        failure.detail = f"the parse changed: {', '.join(walk.fields_by_turn[previous])} (the prefix holds)"
        failure.message_index, failure.message_role, failure.message_was_last = previous, ASSISTANT, True
        _count(outcome, WalkedStep(k, step.kind, tags, False), [CALL_LOST], failure)
        walk.ids += joined.bridge or []
        walk.text = prompt.text
        return True
    if k in control_causes:  # the template's own message fails here too: the template's causes
        causes, fields = list(control_causes[k]), []
    else:
        last = max(changed) if changed else None
        fields = walk.fields_by_turn.get(last, []) if last is not None else []
        reformatted = any(j < k for j in walk.model_layout_turns)
        # the parse is a cause when it changed what the template writes; the model's own layout when it wrote one
        rerendered = prompt.text != context.renders[(k, True)].text
        causes = ([REFORMATTED] if reformatted else []) + ([LOSSY] if rerendered or not reformatted else [])
        if not rerendered and reformatted:
            fields = []
    _count(
        outcome,
        WalkedStep(k, step.kind, tags, False),
        fields,
        _failure(context, walk, step, joined, causes, fields, changed),
    )
    walk.ids, walk.text = list(prompt.ids), prompt.text
    return True


def _next_prompt(context: RolloutContext, walk: _Walk, k: int) -> RenderedPrefix:
    """``R'``: the next prompt of the parsed history (kept by the conversation's memo, when the walk has one)."""
    if walk.memo is None:
        return render_next(context, walk.history, k)
    return walk.memo.prompt(walk.history, k, lambda: render_next(context, walk.history, k))


def _count(outcome: ParsedOutcome, step: WalkedStep, fields: list[str], failure: Failure | None) -> None:
    """One step as walked (counted by :meth:`ParsedOutcome.close`)."""
    outcome.walked.append(step)
    if failure is not None:
        outcome.step_fields[step.turn], outcome.step_failures[step.turn] = fields, failure


def _failure(
    context: RolloutContext,
    walk: _Walk,
    step: StepTrace,
    joined: Join,
    causes: list[str],
    fields: list[str],
    changed: list[int],
) -> Failure:
    conversation, decode_one = context.conversation, context.setup.decode_one
    if joined.text_index is not None:
        owner = MessageRef(changed[-1], ASSISTANT, True) if changed and LOSSY in causes else None
        token_index = first_difference(walk.ids, joined.prompt.ids)
        failure = text_failure(
            decode_one,
            NAME,
            "text",
            step.kind,
            conversation,
            step.turn,
            step.roles,
            causes,
            RenderedPrefix(joined.normalized_buffer, walk.ids),
            RenderedPrefix(joined.normalized_prompt, joined.prompt.ids),
            joined.text_index,
            token_index if token_index is not None else len(walk.ids),
            owner,
        )
    else:
        assert joined.canonical is not None and joined.seam_index is not None
        failure = token_failure(
            decode_one,
            NAME,
            "seam",
            step.kind,
            conversation,
            step.turn,
            step.roles,
            causes,
            joined.canonical,
            joined.prompt.ids,
            joined.seam_index,
        )
    if fields:
        failure.detail = "the parse changed: " + ", ".join(fields)
    elif any(j < step.turn for j in walk.model_layout_turns) and REFORMATTED in causes:
        failure.detail = "the model's own layout, re-rendered in the template's history layout"
    return failure


def _written(
    context: RolloutContext,
    walk: _Walk,
    where: tuple[int, int, int],
    completion: Completion,
    before: tuple[str, list[int]],
    parser: CompletionParser,
    rng: random.Random,
    outcome: ParsedOutcome,
) -> None:
    """Turn ``j`` written in one other layout (drawn among those that apply): does the prompt rendered from its
    parse still continue the buffer holding what the model wrote? ``where``: the turn, the end of the step after it
    and the calls before the turn."""
    j, end, calls_before = where
    original = context.conversation.messages[j]
    rewritten = [(layout, layout.rewrite(completion.text, original)) for layout in LAYOUTS]
    applicable = [(layout, found) for layout, found in rewritten if found is not None]
    if not applicable:
        return
    layout, (text, _) = applicable[rng.randrange(len(applicable))]
    history = list(walk.history)
    before_text = before[0]
    parsed = parse_with(parser, parser_input(context, parser, before, j, text, completion, calls_before))
    tally = outcome.written.setdefault(layout.name, [0, 0])
    tally[0] += 1
    history[j] = parsed
    answer_with_ids(history, j, walk.history[j], parsed)
    try:
        prompt = render_next(context, history, end)
    except RenderError:
        tally[1] += 1
        return
    codec = context.setup.codec
    buffer = codec.normalize(before_text + text)
    tally[1] += not codec.normalize(prompt.text).startswith(buffer)
