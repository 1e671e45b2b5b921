"""Long conversations audited over a window of their turns.

Every assistant turn of a conversation needs renders of its prefixes, so the cost of one conversation grows with
the square of its length (100 messages take seconds, 10,000 would take hours). A conversation longer than
:data:`DEFAULT_MAX_MESSAGES` messages is audited over its first turns: the longest prefix of at most that many
messages that ends right before an assistant turn, so the last step it holds is whole (the tool results of the
last call, as a rollout cut at its turn limit has them) and is audited as its final appended step. The report
says how many conversations were cut and where; ``max_messages=None`` (``--max-messages 0``) audits them whole.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from tito_audit.conversations.conversation import ASSISTANT, Conversation

DEFAULT_MAX_MESSAGES = 400
"""Messages of a conversation audited at most (a window of its first turns beyond that)."""


def window(conversation: Conversation, max_messages: int | None) -> Conversation:
    """``conversation`` itself, or its longest prefix of at most ``max_messages`` messages that ends right before
    an assistant turn and holds one at least (up to its first assistant turn when even that lies further).

    >>> roles = ["user", "assistant", "tool", "tool", "assistant", "tool", "assistant"]
    >>> [m["role"] for m in window(Conversation("c", [{"role": r} for r in roles]), 5).messages]
    ['user', 'assistant', 'tool', 'tool']
    """
    messages = conversation.messages
    if not max_messages or len(messages) <= max_messages:
        return conversation
    turns = [i for i, m in enumerate(messages) if isinstance(m, dict) and m.get("role") == ASSISTANT]
    if not turns:
        return replace(conversation, messages=messages[:max_messages])
    cuts = [i for i in turns[1:] if i <= max_messages]
    end = cuts[-1] if cuts else turns[0] + 1
    return replace(conversation, messages=messages[:end])


def windowed(conversations: Sequence[Conversation], max_messages: int | None) -> list[Conversation]:
    """Each conversation through :func:`window`."""
    return [window(c, max_messages) for c in conversations]


def window_note(conversations: Sequence[Conversation], max_messages: int | None) -> str | None:
    """The report's note on the conversations :func:`window` cuts, or None when it cuts none."""
    if not max_messages:
        return None
    cut = [c for c in conversations if len(c.messages) > max_messages]
    if not cut:
        return None
    longest = max(len(c.messages) for c in cut)
    return (
        f"{len(cut)} conversation{'s' if len(cut) > 1 else ''} longer than {max_messages} messages (up to {longest}) "
        f"audited over a window of their first turns (at most {max_messages} messages, up to a whole step); "
        "--max-messages 0 audits them whole"
    )
