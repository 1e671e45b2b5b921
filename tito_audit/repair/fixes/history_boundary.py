"""``no-history-boundary``: turns before the last user message (or the last final answer) render like the ones
after it.

Many templates find a boundary by scanning the messages backwards (the last user query, the last final
answer) and render reasoning only after it: Kimi K2 Thinking renders ``messages[:boundary + 1]`` with empty
think blocks and the rest with reasoning. Every new user message or final answer moves the boundary, so turns
already in the buffer lose their reasoning. The fix reads the boundary as ``-1`` (before the first message)
wherever the template uses it outside the scan:

    {%- set hist_msgs = messages[:ns.last_non_tool_call_assistant_msg+1] -%}   ->   messages[:-1+1]

What changes for the model: earlier turns keep their reasoning in the prompt.
"""

from __future__ import annotations

from collections.abc import Sequence

from jinja2 import nodes

from tito_audit.audit.core.causes import empty_think_dropped, reasoning_pruned
from tito_audit.conversations.conversation import ASSISTANT, Message
from tito_audit.model.variants import jinja_environment
from tito_audit.repair.fixes.interface import Fix
from tito_audit.repair.fixes.patterns import evaluated, find, replace_run
from tito_audit.repair.fixes.source import Edit, TemplateSource

NAME = "no-history-boundary"
CAUSES = frozenset({reasoning_pruned.NAME, empty_think_dropped.NAME})
CHANGES = "turns before the last user message or final answer render like the ones after it"
AT_INFERENCE = "the prompt keeps reasoning of turns before the last user message"
SCOPE = "renders with an assistant turn"


def edits(source: TemplateSource) -> list[Edit]:
    boundaries = _boundaries(source.source)
    if not boundaries:
        return []
    tokens = evaluated(source)
    out: list[Edit] = []
    for (namespace, attribute), scan in boundaries.items():
        for first, last in find(tokens, [namespace, ".", attribute], lambda token: True):
            if tokens[first].loop_over != scan:
                out.append(replace_run(tokens, first, last, "-1", NAME))
    return out


def touches(messages: Sequence[Message], k: int, gp: bool) -> bool:
    """Renders with an assistant turn, the last one included (it may sit before the boundary)."""
    return any(m.get("role") == ASSISTANT for m in messages[:k])


def _boundaries(source: str) -> dict[tuple[str, str], str]:
    """Namespace attributes a backward scan of the messages sets to a position, with the scan's iterable."""
    try:
        ast = jinja_environment().parse(source)
    except Exception:
        return {}
    found: dict[tuple[str, str], str] = {}
    for loop in ast.find_all(nodes.For):
        if not _backwards(loop.iter):
            continue
        over = _text_of(source, loop)
        for assign in loop.find_all(nodes.Assign):
            target = assign.target
            if isinstance(target, nodes.NSRef) and not isinstance(assign.node, nodes.Const):
                found[(target.name, target.attr)] = over
    return found


def _backwards(iterable: nodes.Node) -> bool:
    """``messages[::-1]``, ``messages|reverse``, ``range(n - 1, -1, -1)``."""
    if isinstance(iterable, nodes.Getitem) and isinstance(iterable.arg, nodes.Slice):
        step = iterable.arg.step
        return isinstance(step, nodes.Neg) or (isinstance(step, nodes.Const) and step.value == -1)
    if isinstance(iterable, nodes.Filter):
        return iterable.name == "reverse"
    if not isinstance(iterable, nodes.Call) or not isinstance(iterable.node, nodes.Name):
        return False
    if iterable.node.name == "range" and len(iterable.args) == 3:
        step = iterable.args[2]
        return isinstance(step, nodes.Neg) or (isinstance(step, nodes.Const) and step.value == -1)
    return False


def _text_of(source: str, loop: nodes.For) -> str:
    """What the scan iterates, as :class:`~tito_audit.repair.fixes.source.Token` records it (tokens joined)."""
    parsed = TemplateSource.parse(source)
    for token in parsed.code():
        if parsed.line_of(token.start) == loop.lineno and token.text == "for":
            tag = [t for t in parsed.code() if t.tag == token.tag]
            words = [t.text for t in tag if t.kind not in ("block_begin", "block_end")]
            if "in" in words:
                return "".join(words[words.index("in") + 1 :])
    return ""


FIX = Fix(
    NAME,
    CAUSES,
    CHANGES,
    AT_INFERENCE,
    SCOPE,
    find_edits=lambda source, context: edits(source),
    touches=touches,
)
