"""``reasoning-kept``: history renders an assistant turn's reasoning inside the block the generation prompt
opened.

QwQ-32B and the first DeepSeek-R1 distills end the generation prompt with ``<think>\\n``: the model's turn
begins with its reasoning. Their history never shows reasoning (``content.split('</think>')[-1]``), so the
prompt is not a prefix of the turn as history renders it, whatever the model wrote. The fix prefixes the
content the assistant branch computes with the reasoning, opened the way the prompt opens it:

    {%- set content = message.content.split('</think>')[-1].lstrip('\\n') %}
        -> {%- set content = "<think>\\n" ~ (message.reasoning_content if message.reasoning_content is string
                              else "") ~ "\\n</think>\\n\\n" ~ (message.content.split(...)...) %}

Every assistant turn gets the block: under a prompt that opens it, every turn the model wrote has one (empty when
it closed the block at once, however the harness sends that back).

and the branch's tests of ``message.content`` read that content. It applies only to templates that read no
reasoning field at all and strip ``</think>`` from the content.

What changes for the model: earlier turns keep their reasoning in the prompt.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence

from tito_audit.audit.core.causes import gen_prompt_mismatch, reasoning_pruned
from tito_audit.conversations.conversation import ASSISTANT, Message
from tito_audit.repair.fixes.interface import Fix
from tito_audit.repair.fixes.patterns import evaluated, find
from tito_audit.repair.fixes.source import Edit, TemplateSource, Token

NAME = "reasoning-kept"
CAUSES = frozenset({gen_prompt_mismatch.NAME, reasoning_pruned.NAME})
CHANGES = "history renders each turn's reasoning in the block the generation prompt opens"
AT_INFERENCE = "the prompt keeps earlier turns' reasoning (the template dropped it)"
SCOPE = "renders with an assistant turn"
"""Which renders the fix may change."""
REASONING_NAMES = frozenset({"reasoning_content", "reasoning", "thinking"})
_OPENING = re.compile(r"^<([\w:-]+)>\s*$")


def _in_assistant_turn(token: Token) -> bool:
    return token.in_message_loop and token.roles is not None and token.roles <= {ASSISTANT}


def edits(source: TemplateSource, opening: str | None) -> list[Edit]:
    """``opening``: what the generation prompt writes after the assistant header (``<think>\\n``), if anything."""
    match = _OPENING.match(opening or "")
    if match is None:
        return []
    tokens = source.code()
    if any(t.text.strip("'\"") in REASONING_NAMES for t in tokens if t.kind in ("name", "string")):
        return []  # the template reads reasoning already: not this fix's case
    closing_tag = f"</{match.group(1)}>"
    prefix_open, prefix_close = json.dumps(opening), json.dumps("\n" + closing_tag + "\n\n")
    evaluated_tokens = evaluated(source)
    out: list[Edit] = []
    assigned: list[tuple[int, str, str]] = []  # (offset, variable, message name)
    for first, _ in find(tokens, ["set"], _in_assistant_turn):
        tag = [t for t in tokens if t.tag == tokens[first].tag]
        texts = [t.text for t in tag]
        if "=" not in texts or not any(t.kind == "string" and closing_tag in t.text for t in tag):
            continue
        equals = texts.index("=")
        variable = texts[equals - 1]
        rhs = [t for t in tag[equals + 1 :] if t.kind != "block_end"]
        message = _message_name(rhs)
        if message is None or not rhs:
            continue
        reasoning = f"{message}.reasoning_content"
        expression = source.source[rhs[0].start : rhs[-1].end]
        text = f'{prefix_open} ~ ({reasoning} if {reasoning} is string else "") ~ {prefix_close} ~ ({expression})'
        out.append(Edit(rhs[0].start, rhs[-1].end, text, NAME))
        assigned.append((tag[0].start, variable, message))
    if not out:
        return []
    # the branch's own tests of the message's content now read the computed content
    for offset, variable, message in assigned:
        for pattern in ([message, ".", "content"], [message, "[", "'content'", "]"], [message, "[", '"content"', "]"]):
            for first, last in find(evaluated_tokens, pattern, _in_assistant_turn):
                token = evaluated_tokens[first]
                if token.start > offset and _in_if_test(source, token) and not _inside(out, token):
                    out.append(Edit(token.start, evaluated_tokens[last].end, variable, NAME))
    return sorted(set(out), key=lambda e: e.start)


def touches(messages: Sequence[Message], k: int, gp: bool) -> bool:
    """Renders with an assistant turn, the last one included: its reasoning is rendered now."""
    return any(m.get("role") == ASSISTANT for m in messages[:k])


def _message_name(rhs: Sequence[Token]) -> str | None:
    for i, token in enumerate(rhs[:-2]):
        if token.kind == "name" and rhs[i + 1].text == "." and rhs[i + 2].text == "content":
            return token.text
        if token.kind == "name" and rhs[i + 1].text == "[" and rhs[i + 2].text.strip("'\"") == "content":
            return token.text
    return None


def _in_if_test(source: TemplateSource, token: Token) -> bool:
    tag = [t for t in source.code() if t.tag == token.tag]
    inner = [t for t in tag if t.kind not in ("block_begin", "block_end", "variable_begin", "variable_end")]
    return bool(inner) and inner[0].text in ("if", "elif")


def _inside(edits: Sequence[Edit], token: Token) -> bool:
    return any(e.start <= token.start < e.end for e in edits)


FIX = Fix(
    NAME,
    CAUSES,
    CHANGES,
    AT_INFERENCE,
    SCOPE,
    find_edits=lambda source, context: edits(source, context.opening),
    touches=touches,
)
