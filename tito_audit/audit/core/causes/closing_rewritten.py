"""``closing-rewritten``: what closes a tool, user or system message (its end token or separator) depends on what
follows it: the message is closed one way while it is last and another way once something follows it (Hermes 3's
``</tool_response>\\n<|im_end|>`` after, ``</tool_response><|im_end|>`` last; DeepSeek-R1's
``<｜tool▁outputs▁end｜>`` only after the last tool result; Qwen joining consecutive tool results in one block).

Detected on a text divergence attributed to a tool, user or system message (:func:`detect`): no text moved in, and
the divergence lies after the message's own text (or, where its text could not be located, the message was last when
first rendered). For an assistant message the same situation is ``stop-token-swap`` or ``tail-after-stop``. Confirmed
by rendering the message again as the last message and followed by the next one: the two renders part after its
text.
"""

from __future__ import annotations

from tito_audit.audit.core.causes import content_rewritten
from tito_audit.audit.core.causes.case import Case, Confirmation
from tito_audit.audit.core.causes.divergence import Divergence
from tito_audit.audit.core.causes.interface import Cause
from tito_audit.audit.core.diff import first_difference

NAME = "closing-rewritten"
LINE = (
    "A tool, user or system message is closed one way while it is the last message and another way once something "
    "follows it."
)
FIXED = "close a message the same way whether or not another follows"
UNFIXED = "the template closes a message differently once another follows, in a way no fix here undoes"


def detect(divergence: Divergence) -> bool:
    """For a divergence attributed to a tool, user or system message (``divergence.owner``)."""
    owner = divergence.owner
    if owner is None or content_rewritten.moved_in(divergence, next_message=owner.index + 1):
        return False
    if owner.content_end is not None:
        return owner.content_end <= divergence.index
    return owner.was_last


def confirm(case: Case) -> Confirmation:
    """The attributed message renders one closing when it is last and another once a message follows it."""
    index, messages, tools = case.failure.message_index, case.messages, case.tools
    if index is None or index + 1 >= len(messages):
        return Confirmation(NAME, False, "no rewritten message was attributed")
    last = case.renderer.text(messages[: index + 1], tools, False)
    followed = case.renderer.text(messages[: index + 2], tools, False)
    at = first_difference(last, followed)
    content = messages[index].get("content")
    text = content.strip() if isinstance(content, str) else ""
    ends = last.rfind(text) + len(text) if text and text in last else None
    shown = at is not None and (ends is None or ends <= at)
    role = messages[index].get("role")
    evidence = (
        f"message {index} ({role}) closes with {last[at : at + 24]!r} when last and with {followed[at : at + 24]!r} "
        f"once message {index + 1} follows"
        if at is not None
        else f"message {index} ({role}) renders the same whether or not message {index + 1} follows"
    )
    return Confirmation(NAME, shown, evidence)


CAUSE = Cause(NAME, LINE, confirm, fixed=FIXED, unfixed=UNFIXED)
