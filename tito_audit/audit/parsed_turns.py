"""One completion through the engine's parser, as a loop does it: what the engine hands the parser, the parsed
message, the tool results answering the parser's call ids, and the next prompt rendered from that history.

Shared by the rollout with a parser (:mod:`tito_audit.audit.parsed_rollout`) and the written-values draw
(:mod:`tito_audit.audit.written_values`).
"""

from __future__ import annotations

from tito_audit.audit.checks.context import RolloutContext
from tito_audit.audit.checks.trace import Completion
from tito_audit.conversations.conversation import ASSISTANT, TOOL, Message
from tito_audit.conversations.reasoning_forms import OPEN
from tito_audit.errors import BadInputError
from tito_audit.model.render import RenderedPrefix, one_line
from tito_audit.parse.handover import hand_over
from tito_audit.parse.parser import CompletionParser, ParseInput


def parser_input(
    context: RolloutContext,
    parser: CompletionParser,
    prompt: str,
    j: int,
    text: str,
    completion: Completion,
    earlier_calls: int,
) -> ParseInput:
    """What the engine hands its parser for turn ``j`` written as ``text``: the stop token it ended on trimmed
    (kept where the engine keeps it for this parser), and, for a request without tools, without special tokens
    where the engine skips them."""
    stop = context.setup.decode_one(completion.ids[-1]) if completion.stopped and completion.ids else None
    ids = completion.ids if text == completion.text else context.setup.codec.encode(text)
    return handed_input(context, parser, prompt, j, (text, ids), stop, earlier_calls)


def handed_input(
    context: RolloutContext,
    parser: CompletionParser,
    prompt: str,
    j: int,
    written: tuple[str, list[int]],
    stop: str | None,
    calls: int,
) -> ParseInput:
    """What the engine hands its parser for turn ``j`` written as ``written`` (text and ids), ended on ``stop``
    (None: cut at the token limit), after ``calls`` earlier tool calls; with the request's template settings (the
    variant's) and the prompt's ids, which some engines hand their parsers too."""
    text, ids = written
    tools = context.conversation.tools
    return ParseInput(
        text=hand_over(parser, text, stop, bool(tools), context.setup.codec.written_control_pattern),
        tools=openai_tools(tools),
        prompt=prompt,
        reasoning_open=context.alignments[j].prompt_state == OPEN,
        earlier_calls=calls,
        call_id_seed=f"{context.conversation.id}:{j}",
        template_kwargs=dict(context.setup.renderer.kwargs),
        ids=tuple(ids),
        prompt_ids=tuple(context.renders[(j, True)].ids),
    )


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
        raise BadInputError(f"--parser {parser.name}: the parser raised on a completion: {one_line(exc)}") from None


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
