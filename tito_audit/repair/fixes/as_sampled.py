"""``as-sampled``: every assistant turn renders in history the way it rendered when it was sampled.

Templates decide how to render an assistant turn from its position: ``loop.last`` (the empty think block of
Qwen3, ``<|return|>`` rather than ``<|end|>`` in gpt-oss), ``loop.index0 > ns.last_query_index`` (reasoning
kept only after the last user message), ``add_generation_prompt`` (gpt-oss renders the final turn's analysis
only when no prompt follows), or a flag set by looking at later messages (gpt-oss drops a tool call's
analysis once a final answer follows). When the turn is sampled it is the last message; later it is not, so
history rewrites what the model produced. The fix gives each such test, inside the assistant branch of the
message loop, the value it has when the turn is the last message:

    {%- if loop.index0 > ns.last_query_index %}   ->   {%- if true %}
    {%- if not (truncate_history_thinking and loop.index0 < ns.last_user_idx) %}   ->   {%- if not (... and false) %}
    {%- elif loop.last and not add_generation_prompt %}   ->   {%- elif true and true %}

What changes for the model: earlier turns keep their reasoning, empty think blocks and end tokens in the
prompt, exactly as sampled (at inference too).
"""

from __future__ import annotations

from collections.abc import Sequence

from jinja2 import nodes

from tito_audit.audit.core.causes import (
    content_rewritten,
    empty_think_dropped,
    reasoning_pruned,
    stop_token_swap,
    tail_after_stop,
)
from tito_audit.conversations.conversation import ASSISTANT, Message
from tito_audit.model.variants import jinja_environment
from tito_audit.repair.fixes.interface import Fix
from tito_audit.repair.fixes.patterns import Edits, evaluated, find, operand_end
from tito_audit.repair.fixes.source import Edit, TemplateSource, Token

NAME = "as-sampled"
CAUSES = frozenset(
    {
        reasoning_pruned.NAME,
        empty_think_dropped.NAME,
        stop_token_swap.NAME,
        tail_after_stop.NAME,
        content_rewritten.NAME,
    }
)
CHANGES = "earlier assistant turns render as they did when sampled"
AT_INFERENCE = "the prompt keeps earlier turns' reasoning, empty think blocks and end tokens as the model wrote them"
SCOPE = "renders with an assistant turn in history"
"""Which renders the fix may change."""


def _in_assistant_turn(token: Token) -> bool:
    """Inside the message loop, in a branch that assistant turns take (alone or with other roles: the audit
    and the no-change proof show whether the edit changes anything else)."""
    return token.in_message_loop and token.roles is not None and ASSISTANT in token.roles


def edits(source: TemplateSource) -> list[Edit]:
    tokens = evaluated(source)
    collected = Edits(tokens, NAME)
    take = collected.take

    collected.pin_loop_last(_in_assistant_turn, True)
    # loop.index0 compared with an earlier position (the last user query): the last message comes after it
    after = {">": "true", ">=": "true", "<": "false", "<=": "false"}
    mirrored = {"<": "true", "<=": "true", ">": "false", ">=": "false"}
    for index in ("index0", "index"):
        for first, last in find(tokens, ["loop", ".", index], _in_assistant_turn):
            if last + 2 < len(tokens) and tokens[last + 1].text in after:
                end = operand_end(tokens, last + 2)
                if end is not None:
                    take(first, end, after[tokens[last + 1].text])
            elif first >= 2 and tokens[first - 1].text in mirrored:
                start = _operand_start(tokens, first - 2)
                if start is not None:
                    take(start, last, mirrored[tokens[first - 1].text])
    for first, last in find(tokens, ["not", "add_generation_prompt"], _in_assistant_turn):
        take(first, last, "true")
    for first, last in find(tokens, ["add_generation_prompt"], _in_assistant_turn):
        take(first, last, "false")
    for (namespace, attribute), initial in _lookahead_flags(source).items():
        for first, last in find(tokens, [namespace, ".", attribute], _in_assistant_turn):
            if not _inside_lookahead(tokens[first]):
                take(first, last, initial)
    return collected.edits


def touches(messages: Sequence[Message], k: int, gp: bool) -> bool:
    """Renders with an assistant turn in history (before the last message, or any when a prompt follows)."""
    history = messages[:k] if gp else messages[: k - 1]
    return any(m.get("role") == ASSISTANT for m in history)


def _operand_start(tokens: Sequence[Token], end: int) -> int | None:
    """First index of a simple operand ending at ``end`` (``ns.last_query_index``)."""
    start = end
    while start >= 2 and tokens[start - 1].text == "." and tokens[start - 2].kind == "name":
        start -= 2
    return start if tokens[start].kind in ("name", "integer") else None


def _inside_lookahead(token: Token) -> bool:
    return token.loop_over is not None and "[loop.index" in token.loop_over


def _lookahead_flags(source: TemplateSource) -> dict[tuple[str, str], str]:
    """Namespace attributes set only inside a loop over the messages after this one (``loop_messages[
    loop.index:]``), with their initial value: what they hold when the message is the last one."""
    try:
        ast = jinja_environment().parse(source.source)
    except Exception:
        return {}
    initial: dict[tuple[str, str], str] = {}
    for assign in ast.find_all(nodes.Assign):
        value = assign.node
        if (
            isinstance(assign.target, nodes.Name)
            and isinstance(value, nodes.Call)
            and isinstance(value.node, nodes.Name)
            and value.node.name == "namespace"
        ):
            for keyword in value.kwargs:
                if isinstance(keyword.value, nodes.Const):
                    initial[(assign.target.name, keyword.key)] = _literal(keyword.value.value)
    flags: dict[tuple[str, str], str] = {}
    for loop in ast.find_all(nodes.For):
        iterable = loop.iter
        if not (isinstance(iterable, nodes.Getitem) and isinstance(iterable.arg, nodes.Slice)):
            continue
        start = iterable.arg.start
        reads_loop = start is not None and any(
            isinstance(n, nodes.Name) and n.name == "loop" for n in [start, *start.find_all(nodes.Name)]
        )
        if not reads_loop:
            continue
        for assign in loop.find_all(nodes.Assign):
            target = assign.target
            if isinstance(target, nodes.NSRef) and (target.name, target.attr) in initial:
                flags[(target.name, target.attr)] = initial[(target.name, target.attr)]
    return flags


def _literal(value: object) -> str:
    if value is True:
        return "true"
    if value is False:
        return "false"
    if value is None:
        return "none"
    return repr(value)


FIX = Fix(
    NAME,
    CAUSES,
    CHANGES,
    AT_INFERENCE,
    SCOPE,
    find_edits=lambda source, context: edits(source),
    touches=touches,
)
