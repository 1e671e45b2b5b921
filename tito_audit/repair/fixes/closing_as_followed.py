"""``closing-as-followed``: a tool, user or system message is closed the same way whether or not a message
follows it.

Some templates close a message one way when it is the last one and another way once a message follows
(Hermes 3: ``</tool_response><|im_end|>`` when last, ``</tool_response>\\n<|im_end|>`` after; Bielik writes
``<|im_end|>`` after a tool result only when it is last). In a rollout such a message is last when it enters
the buffer (the generation prompt follows it) and is followed by the assistant's turn afterwards, so the text
already in the buffer is rewritten. The fix renders a last message as if the assistant's turn followed it,
which is what happens next in every rollout; a message that another one really follows renders as before:

    {%- if not loop.last and loop.nextitem.role != "tool" %}
        -> {%- if true and (loop.nextitem if loop.nextitem is defined else {"role": "assistant"}).role != "tool" %}
    {%- elif loop.last %}   ->   {%- elif false %}

What changes for the model: the prompt closes the last tool result (or user message) the way history closes
it once the answer follows.
"""

from __future__ import annotations

from collections.abc import Sequence

from tito_audit.audit.core.causes import closing_rewritten, tail_after_stop
from tito_audit.conversations.conversation import ASSISTANT, SYSTEM, TOOL, USER, Message
from tito_audit.repair.fixes.interface import Fix
from tito_audit.repair.fixes.patterns import Edits, evaluated, find
from tito_audit.repair.fixes.source import Edit, TemplateSource, Token

NAME = "closing-as-followed"
CAUSES = frozenset({closing_rewritten.NAME, tail_after_stop.NAME})
CHANGES = "a last tool result or user message is closed as it is once the answer follows"
AT_INFERENCE = "the prompt closes the last tool result or user message the way history closes it later"
SCOPE = "renders that end with a tool, user or system message"
"""Which renders the fix may change."""
NEXT_ASSISTANT = '{"role": "assistant", "content": ""}'


def _in_other_turn(token: Token) -> bool:
    return (
        token.in_message_loop and token.roles is not None and bool(token.roles) and token.roles <= {TOOL, USER, SYSTEM}
    )


def edits(source: TemplateSource) -> list[Edit]:
    tokens = evaluated(source)
    collected = Edits(tokens, NAME)
    take = collected.take

    collected.pin_loop_last(_in_other_turn, False)
    for first, last in find(tokens, ["loop", ".", "nextitem"], _in_other_turn):
        take(first, last, f"(loop.nextitem if loop.nextitem is defined else {NEXT_ASSISTANT})")
    # messages[loop.index0 + 1]: the message after this one, when there is one
    for first, last in find(tokens, ["loop", ".", "index0", "+", "1", "]"], _in_other_turn):
        if first >= 2 and tokens[first - 1].text == "[" and tokens[first - 2].kind == "name":
            name = tokens[first - 2].text
            if first < 3 or tokens[first - 3].text != ".":  # a plain name, not an attribute of something
                take(
                    first - 2,
                    last,
                    f"({name}[loop.index0 + 1] if loop.index0 + 1 < {name}|length else {NEXT_ASSISTANT})",
                )
    return collected.edits


def touches(messages: Sequence[Message], k: int, gp: bool) -> bool:
    """Renders that end with a message other than an assistant turn."""
    return k > 0 and messages[k - 1].get("role") != ASSISTANT


FIX = Fix(
    NAME,
    CAUSES,
    CHANGES,
    AT_INFERENCE,
    SCOPE,
    find_edits=lambda source, context: edits(source),
    touches=touches,
)
