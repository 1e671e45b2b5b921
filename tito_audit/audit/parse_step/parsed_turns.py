"""One completion through the engine's parser, as a loop does it: what the engine hands the parser, the parsed
message, the tool results answering the parser's call ids, and the next prompt rendered from that history; and the
completion as the family's model writes it (:func:`as_the_model_writes`), where a turn is one no engine's model writes
(:func:`quoted_arguments`).

Shared by the rollout with a parser (:mod:`tito_audit.audit.parse_step.parsed_rollout`) and the written-values draw
(:mod:`tito_audit.audit.parse_step.written_values`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import replace

from tito_audit.audit.checks.rollout_context import RolloutContext
from tito_audit.audit.checks.trace import Completion
from tito_audit.conversations.conversation import ASSISTANT, TOOL, Message
from tito_audit.conversations.reasoning_forms import OPEN
from tito_audit.errors import BadInputError
from tito_audit.model.render import RenderedPrefix
from tito_audit.model.template_errors import error_line
from tito_audit.parse.handover import Sampled, hand_over
from tito_audit.parse.output_layouts import OutputLayout
from tito_audit.parse.parser import CompletionParser, ParseInput


def parser_input(
    context: RolloutContext,
    parser: CompletionParser,
    prompt: RenderedPrefix | tuple[str, Sequence[int]],
    j: int,
    text: str,
    completion: Completion,
    earlier_calls: int,
) -> ParseInput:
    """What the parser's engine hands it for turn ``j`` written as ``text`` after ``prompt`` (its text and ids):
    :func:`tito_audit.parse.handover.hand_over` of the completion as the engine has it (SGLang's: the stop token
    trimmed or kept, special tokens skipped without tools; vLLM's: its own detokenizer and request adjustments)."""
    setup = context.setup
    stop = setup.decode_one(completion.ids[-1]) if completion.stopped and completion.ids else None
    ids = completion.ids if text == completion.text else _sampled_ids(context, text)
    return handed_input(context, parser, prompt, j, (text, ids), stop, earlier_calls)


def handed_input(
    context: RolloutContext,
    parser: CompletionParser,
    prompt: RenderedPrefix | tuple[str, Sequence[int]],
    j: int,
    written: tuple[str, Sequence[int]],
    stop: str | None,
    earlier_calls: int,
) -> ParseInput:
    """:func:`parser_input` for a turn written as ``written`` (its text and sampled ids) that ended on ``stop``
    (None: cut at the token limit): also for texts no rollout sampled (the layouts of
    :mod:`tito_audit.audit.parse_step.call_layouts`)."""
    prompt_text, prompt_ids = (prompt.text, prompt.ids) if isinstance(prompt, RenderedPrefix) else prompt
    text, ids = written
    setup = context.setup
    pattern = setup.codec.written_control_pattern
    sampled = Sampled(
        text=text,
        ids=tuple(ids),
        stop=stop,
        tools=openai_tools(context.conversation.tools),
        prompt=prompt_text,
        prompt_ids=tuple(prompt_ids),
        reasoning_open=context.alignments[j].prompt_state == OPEN,
        earlier_calls=earlier_calls,
        call_id_seed=f"{context.conversation.id}:{j}",
        template_kwargs=dict(setup.renderer.kwargs),
        without_special=(lambda written: pattern.sub("", written)) if pattern is not None else None,
    )
    return hand_over(parser, sampled)


def _sampled_ids(context: RolloutContext, text: str) -> list[int]:
    """The ids a model that wrote ``text`` sampled: its encoding, cut after the first stop token (as the rollout's
    own completions are, :func:`tito_audit.audit.checks.trace.completion_for`)."""
    ids = context.setup.codec.encode(text)
    cut = next((n + 1 for n, token_id in enumerate(ids) if token_id in context.setup.stop_ids), None)
    return ids[:cut] if cut is not None else ids


def openai_tools(tools: list[dict] | None) -> list[dict] | None:
    """``tools`` in the OpenAI request shape the engine's parser reads (a conversation reshaped for a template that
    wants them without their ``function`` wrapper still came from a request in that shape)."""
    if not tools:
        return tools
    return [tool if "function" in tool else {"type": "function", "function": tool} for tool in tools]


def parse_with(parser: CompletionParser, given: ParseInput) -> Message:
    """The parser's message; a parser that raises is a bad ``--parser`` (one line naming it)."""
    try:
        return parser.parse(given)
    except BadInputError:
        raise
    except Exception as exc:
        raise BadInputError(f"--parser {parser.name}: the parser raised on a completion: {error_line(exc)}") from None


def answer_with_ids(history: list[Message], j: int, original: Message, parsed: Message) -> None:
    """The tool results after turn ``j`` answer the parser's call ids (matched by position)."""
    renamed = {
        before.get("id"): after.get("id")
        for before, after in zip(original.get("tool_calls") or [], parsed.get("tool_calls") or [], strict=False)
        if before.get("id") is not None
    }
    for k in range(j + 1, len(history)):
        message = history[k]
        if message.get("role") == ASSISTANT:
            break
        if message.get("role") == TOOL and message.get("tool_call_id") in renamed:
            history[k] = {**message, "tool_call_id": renamed[message["tool_call_id"]]}


def render_next(context: RolloutContext, history: list[Message], k: int) -> RenderedPrefix:
    """``R'``: the next prompt of ``history`` before message ``k`` (the renderer prepares each message by the message
    itself, so every render sees the history as it is then)."""
    key = (k, True)
    return context.setup.renderer.prefixes(history, context.conversation.tools, [key])[key]


def turn_text(context: RolloutContext, j: int) -> tuple[str, int]:
    """The full render of the history through turn ``j`` and where turn ``j``'s model text begins in it."""
    return context.renders[(j + 1, False)].text, context.alignments[j].completion_start


def as_the_model_writes(context: RolloutContext, completion: Completion, layout: OutputLayout | None) -> Completion:
    """``completion`` in the layout the family's model writes (the same object when the layouts agree)."""
    if layout is None:
        return completion
    text = layout.rewrite(completion.text)
    if text == completion.text:
        return completion
    return replace(completion, text=text, ids=context.setup.codec.encode(text), noncanonical=None)


def quoted_arguments(message: Message, written: str) -> bool:
    """Whether the template wrote a call's arguments given as a JSON string as a quoted JSON string
    (``"{\\"city\\": ...}"``). Engines turn the OpenAI string back into an object before rendering, so a model
    behind one has only ever seen, and writes, the object; such a turn is not one it writes."""
    for call in message.get("tool_calls") or []:
        arguments = (call.get("function") or {}).get("arguments")
        if not isinstance(arguments, str):
            continue
        quoted = json.dumps(arguments, ensure_ascii=False)[1:-1] in written
        if quoted and arguments not in written:
            return True
    return False
