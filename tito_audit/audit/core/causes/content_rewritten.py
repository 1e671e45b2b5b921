"""``content-rewritten``: a message's text is rewritten in history (trimmed, stripped, escaped), or moved elsewhere
(later system messages merged into the system prompt, a system prompt moved to the last user turn).

Detected on a text divergence: for a tool, user or system message whose rendering changed, when another message's
text moved in at the divergence (:func:`moved_in`) or the divergence lies in the message's text or before it; for
the others, as the last resort when no other rule explains it (:mod:`.classify`: the divergence lies in a message's
text, or only whitespace differs, and it is not a tool call's arguments). Confirmed from the definition: a message's
text (as given, or stripped) is written in one render where the two part, and the other render does not write it at
the same place.
"""

from __future__ import annotations

from tito_audit.audit.core.causes.case import Case, Confirmation
from tito_audit.audit.core.causes.divergence import Divergence, message_text, message_texts
from tito_audit.audit.core.causes.interface import Cause

NAME = "content-rewritten"
LINE = "A message's text is rewritten in history: trimmed, stripped, escaped or moved elsewhere."
FIXED = "render message text as sampled"
UNFIXED = "the template rewrites or moves message text in a way no fix here undoes"

NEARBY = 48
"""How far after a divergence a message's text may begin (past the markup that opens it, gpt-oss's
``<|channel|>analysis<|message|>``) and still be the text the divergence is about."""


def moved_in(divergence: Divergence, next_message: int) -> bool:
    """Whether the later text has, right at the divergence, the text of a message that the earlier text does not
    have there (a later system message merged into the system prompt, a system prompt moved to the last user turn).

    The text of the message right after the rewritten one (``next_message``) does not count, nor any text inside it:
    it comes next in any render, so finding it there means the rewritten message was closed differently once it was
    followed (Hermes 3 joins consecutive tool results in one block), not that text moved in.
    """
    earlier, later, index, context = divergence.earlier, divergence.later, divergence.index, divergence.context
    messages = context.messages
    following = message_text(messages[next_message]) if next_message < len(messages) else None
    followings = set(context.forms([following])) if following else set()
    for text in context.forms(message_texts(messages)):
        if text in followings:
            continue
        window = index + len(text) + 40
        region = later[index : window + max((len(f) for f in followings), default=0)]
        for follower in followings:
            region = region.replace(follower, "\0")
        if text in region[: len(text) + 40] and earlier.find(text, index, window) < 0:
            return True
        # or a message's text that spans the divergence in ``later`` and is not in ``earlier`` there (a later system
        # message that replaced the system prompt begins like the one it replaced)
        spanning = later.rfind(text, max(0, index - len(text)), index + len(text))
        if 0 <= spanning <= index < spanning + len(text) and not earlier.startswith(text, spanning):
            return True
    return False


def in_message_text(divergence: Divergence) -> bool:
    """Whether the divergence lies in a message's text (changed, moved or dropped), or a message's text that begins
    just after it is gone from there."""
    earlier, later, index = divergence.earlier, divergence.later, divergence.index
    for text in divergence.context.forms(message_texts(divergence.context.messages)):
        found = earlier.find(text, max(0, index - len(text)))
        if 0 <= found <= index + 2:
            return True
        if 0 <= found <= index + NEARBY and later.find(text, max(0, index - NEARBY), found + NEARBY) < 0:
            return True
    return False


def confirm(case: Case) -> Confirmation:
    """Some message's text, as given or stripped, is written where the renders part in one of them, and the other
    does not write it at the same place."""
    earlier, later, index = case.earlier, case.later, case.index
    upto = case.keys[1][0] if case.keys else len(case.messages)
    for number, message in enumerate(case.messages[:upto]):
        content = message.get("content")
        if not isinstance(content, str) or not content.strip():
            continue
        for text in dict.fromkeys((content, content.strip())):
            for side, other in ((earlier, later), (later, earlier)):
                at = side.rfind(text, 0, index + len(text))  # the last one that starts by the divergence
                if at < 0 or at + len(text) < index:
                    at = side.find(text, index, index + NEARBY + len(text))  # or one that begins just after it
                if at >= 0 and other[at : at + len(text)] != text:
                    moved = "earlier" if side is earlier else "later"
                    return Confirmation(
                        NAME,
                        True,
                        f"message {number}'s text {text[:60]!r} is written at character {at} of the {moved} render "
                        "only",
                    )
    return Confirmation(NAME, False, f"no message text where the renders part (character {index})")


CAUSE = Cause(NAME, LINE, confirm, fixed=FIXED, unfixed=UNFIXED)
