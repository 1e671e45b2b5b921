"""Written values (docs/contract.md "The parse step", "Written values"): argument values a model writes in the
template's own literal or in the JSON literal, through the engine's parser, into the next prompt.

For every tool-call turn followed by tool results, in a conversation that declares tools:

- **the template's own literal**: the turn as the template writes it, parsed; each non-string value the parser gives
  back as another value (``None`` read back as the string ``"None"``) is counted, although the tokens hold — the tool
  received another value;
- **the JSON literal**: one non-string value, drawn, rewritten in a JSON literal where the template writes another
  (``false`` where it writes ``False``, ``1e-7`` where it writes ``1e-07``): does the prompt rendered from the parsed
  turn still continue the buffer holding what the model wrote (else ``value-rewritten``: the template re-renders the
  value in its own literal), and is the parsed value the value written?

Both are reported per value type, beside the verdict as rates (never in it). With the perfect inverse (``template``)
the parsed message is the message the template rendered: the value comes back as meant, and the next prompt is the
template's own.

Example (Qwen3.5's template writes ``args_value | string``)::

    the model writes  <parameter=urgent>\\nfalse\\n</parameter>     (JSON)
    next prompt       <parameter=urgent>\\nFalse\\n</parameter>     value-rewritten
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

from tito_audit.audit.checks.records import text_failure
from tito_audit.audit.checks.rollout_context import RolloutContext
from tito_audit.audit.checks.trace import Completion, trace_of
from tito_audit.audit.core.causes import value_rewritten
from tito_audit.audit.core.diff import common_prefix_length, first_difference
from tito_audit.audit.parse_step.parsed_turns import answer_with_ids, parse_with, parser_input, render_next
from tito_audit.audit.parse_step.value_literals import (
    VALUE_TYPES,
    arguments_of,
    json_literals,
    locate_literal,
    non_string_values,
    same_value,
    value_type,
)
from tito_audit.audit.results import Failure, WrittenValue
from tito_audit.conversations.conversation import TOOL, Message, steps_of
from tito_audit.model.render import RenderedPrefix, RenderError
from tito_audit.parse.output_layouts import OutputLayout
from tito_audit.parse.parser import CompletionParser

NAME = "values"
CAUSE = value_rewritten.NAME


@dataclass
class _Tally:
    values: int = 0
    values_changed: int = 0
    steps: int = 0
    differing: int = 0
    steps_changed: int = 0
    template_literal: str = ""
    json_literal: str = ""


@dataclass
class ValueOutcome:
    """What one conversation contributed, per value type."""

    tallies: dict[str, _Tally] = field(default_factory=dict)
    failures: list[Failure] = field(default_factory=list)

    def tally(self, kind: str) -> _Tally:
        return self.tallies.setdefault(kind, _Tally())


@dataclass
class ValueTotals:
    """A variant's written values, summed over its conversations."""

    tallies: dict[str, _Tally] = field(default_factory=dict)
    failures: list[Failure] = field(default_factory=list)

    def add(self, outcome: ValueOutcome) -> None:
        for kind, tally in outcome.tallies.items():
            total = self.tallies.setdefault(kind, _Tally())
            total.values += tally.values
            total.values_changed += tally.values_changed
            total.steps += tally.steps
            total.differing += tally.differing
            total.steps_changed += tally.steps_changed
            total.template_literal = total.template_literal or tally.template_literal
            total.json_literal = total.json_literal or tally.json_literal
        self.failures.extend(outcome.failures)

    def result(self) -> list[WrittenValue]:
        return [
            WrittenValue(
                value_type=kind,
                template_literal=tally.template_literal,
                json_literal=tally.json_literal,
                values=tally.values,
                values_changed=tally.values_changed,
                steps=tally.steps,
                differing=tally.differing,
                steps_changed=tally.steps_changed,
            )
            for kind in VALUE_TYPES
            if (tally := self.tallies.get(kind)) is not None and (tally.values or tally.steps)
        ]


class LiteralCache:
    """The template's own literal per (value type, JSON literal), learnt once per variant: a value whose literal is
    known to be its JSON literal needs no render to say that no model writes it differently."""

    def __init__(self) -> None:
        self.own: dict[tuple[str, str], str] = {}


def written_values(
    context: RolloutContext,
    parser: CompletionParser | None,
    seed: int,
    cache: LiteralCache,
    layout: OutputLayout | None = None,
) -> ValueOutcome:
    """The written values of ``context``'s conversation (see the module docstring); ``layout`` is the layout the
    family's model writes its turns in (used with a parser: the perfect inverse is the template's own layout)."""
    outcome = ValueOutcome()
    conversation = context.conversation
    if not conversation.tools:
        return outcome
    messages = conversation.messages
    trace = trace_of(context)
    completions = {completion.turn: completion for completion in trace.completions}
    rng = random.Random(f"values:{seed}:{conversation.id}")
    walk = _Values(context, parser, layout if parser is not None else None, cache, outcome)
    calls_before = 0
    for step in steps_of(messages):
        j = step.before
        message = messages[j]
        if step.kind == TOOL and j in completions and message.get("tool_calls"):
            values = non_string_values(message)
            if values:
                walk.step((j, step.after, calls_before), completions[j], values, rng)
        calls_before += len(message.get("tool_calls") or [])
    return outcome


class _Values:
    """The written-values steps of one conversation."""

    def __init__(
        self,
        context: RolloutContext,
        parser: CompletionParser | None,
        layout: OutputLayout | None,
        cache: LiteralCache,
        outcome: ValueOutcome,
    ) -> None:
        self.context, self.parser, self.layout, self.cache, self.outcome = context, parser, layout, cache, outcome

    def step(
        self,
        where: tuple[int, int, int],
        completion: Completion,
        values: list[tuple[int, str, Any]],
        rng: random.Random,
    ) -> None:
        """Turn ``j`` as the template writes its values, then one value drawn and written in a JSON literal."""
        j, end, calls_before = where
        own_text = self._as_written(completion.text)
        own_parsed = self._parse(j, own_text, completion, calls_before)
        for call_index, name, value in values:
            tally = self.outcome.tally(str(value_type(value)))
            tally.values += 1
            if own_parsed is not None:  # a lost call is reported as such (call lost), not as a changed value
                found, back = _parsed_value(own_parsed, call_index, name)
                tally.values_changed += found and not same_value(back, value)
        call_index, name, value = values[rng.randrange(len(values))]
        kind = str(value_type(value))
        literals = json_literals(value)
        known = self.cache.own.get((kind, literals[0]))
        if known is not None and all(literal == known for literal in literals):
            return  # the template writes this value as JSON: a model writing JSON writes what the template does
        span = _span_in_completion(self.context, j, (call_index, name), completion)
        if span is None:
            return
        own = completion.text[span[0] : span[1]]
        self.cache.own[(kind, literals[0])] = own
        others = [literal for literal in literals if literal != own]
        if not others:
            return
        written = others[rng.randrange(len(others))]
        text = self._as_written(completion.text[: span[0]] + written + completion.text[span[1] :])
        before = self.context.renders[(j, True)]
        control, _ = self._next_prompt(where, own_text, own_parsed, completion, (call_index, name, value))
        if not self._continues(before.text + own_text, control):
            return  # the step fails with the template's own literal too: not a value's doing
        tally = self.outcome.tally(kind)
        tally.steps += 1
        tally.template_literal, tally.json_literal = tally.template_literal or own, tally.json_literal or written
        parsed = self._parse(j, text, completion, calls_before)
        prompt, changed = self._next_prompt(where, text, parsed, completion, (call_index, name, value))
        tally.steps_changed += changed
        if self._continues(before.text + text, prompt):
            return
        tally.differing += 1
        if prompt is not None and not any(f.category == kind for f in self.outcome.failures):
            self.outcome.failures.append(self._failure(before, text, prompt, (kind, end, own, written)))

    def _as_written(self, text: str) -> str:
        return self.layout.rewrite(text) if self.layout is not None else text

    def _parse(self, j: int, text: str, completion: Completion, calls_before: int) -> Message | None:
        if self.parser is None:
            return None
        context, parser = self.context, self.parser
        prompt = context.renders[(j, True)]
        return parse_with(parser, parser_input(context, parser, prompt, j, text, completion, calls_before))

    def _next_prompt(
        self,
        where: tuple[int, int, int],
        text: str,
        parsed: Message | None,
        completion: Completion,
        value: tuple[int, str, Any],
    ) -> tuple[RenderedPrefix | None, bool]:
        """The next prompt once the model wrote turn ``j`` as ``text``, and whether the parsed value differs from the
        value written (the perfect inverse gives the message back: the template's own next prompt)."""
        j, end, _ = where
        context = self.context
        if parsed is None:
            return context.renders[(end, True)], False
        found, back = _parsed_value(parsed, value[0], value[1])
        changed = not (found and same_value(back, value[2]))
        history = list(context.conversation.messages)
        original = history[j]
        history[j] = parsed
        answer_with_ids(history, j, original, parsed)
        try:
            return render_next(context, history, end), changed
        except RenderError:
            return None, changed

    def _continues(self, buffer_text: str, prompt: RenderedPrefix | None) -> bool:
        codec = self.context.setup.codec
        return prompt is not None and codec.normalize(prompt.text).startswith(codec.normalize(buffer_text))

    def _failure(
        self, before: RenderedPrefix, text: str, prompt: RenderedPrefix, what: tuple[str, int, str, str]
    ) -> Failure:
        kind, end, own, written = what
        context = self.context
        buffer = RenderedPrefix(before.text + text, [*before.ids, *context.setup.codec.encode(text)])
        index = common_prefix_length(buffer.text, prompt.text)
        token = first_difference(buffer.ids, prompt.ids)
        failure = text_failure(
            context.setup.decode_one,
            NAME,
            "text",
            kind,
            context.conversation,
            end,
            [TOOL],
            [CAUSE],
            buffer,
            prompt,
            index,
            token if token is not None else len(buffer.ids),
        )
        failure.detail = f"the model wrote {written}, the template writes {own}"
        return failure


def _parsed_value(parsed: Message, call_index: int, name: str) -> tuple[bool, object]:
    """(found, value) of argument ``name`` of the parsed message's call ``call_index``."""
    calls = parsed.get("tool_calls") or []
    if call_index >= len(calls):
        return False, None
    arguments = arguments_of(calls[call_index])
    if arguments is None or name not in arguments:
        return False, None
    return True, arguments[name]


def _span_in_completion(
    context: RolloutContext, j: int, where: tuple[int, str], completion: Completion
) -> tuple[int, int] | None:
    """Where the value's literal is in the completion's text (None when it is not found there)."""
    messages = context.conversation.messages
    tools = context.conversation.tools
    key = (j + 1, False)
    full, start = context.renders[key].text, context.alignments[j].completion_start

    def render(marked: list[Message]) -> str | None:
        return context.setup.renderer.texts(marked, tools, [key]).get(key)

    try:
        span = locate_literal(full, messages, j, where, render)
    except RenderError:
        return None
    if span is None or not (start <= span[0] and span[1] <= start + len(completion.text)):
        return None
    return span[0] - start, span[1] - start
