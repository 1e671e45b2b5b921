"""Failure records with their evidence: both sides' token windows (and text windows for text divergences)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from tito_audit.audit.core.causes import MessageRef
from tito_audit.audit.core.diff import text_window, token_window
from tito_audit.audit.results import Failure
from tito_audit.conversations.conversation import Conversation
from tito_audit.model.render import RenderedPrefix

DecodeOne = Callable[[int], str]


def _where(
    check: str, aspect: str, category: str, conversation: Conversation, turn: int, roles: list[str], causes: list[str]
) -> dict:
    """The fields every failure record shares: which check, step and conversation, and the causes."""
    return {
        "check": check,
        "aspect": aspect,
        "category": category,
        "conversation_id": conversation.id,
        "turn": turn,
        "roles": roles,
        "causes": causes,
    }


def text_failure(
    decode_one: DecodeOne,
    check: str,
    aspect: str,
    category: str,
    conversation: Conversation,
    turn: int,
    roles: list[str],
    causes: list[str],
    before: RenderedPrefix,
    after: RenderedPrefix,
    char_index: int | None,
    token_index: int,
    owner: MessageRef | None = None,
) -> Failure:
    """A divergence between two renders (or a buffer and a render), located by character and token."""
    return Failure(
        **_where(check, aspect, category, conversation, turn, roles, causes),
        char_index=char_index,
        token_index=token_index,
        expected=token_window(before.ids, token_index, decode_one),
        actual=token_window(after.ids, token_index, decode_one),
        expected_text=text_window(before.text, char_index) if char_index is not None else "",
        actual_text=text_window(after.text, char_index) if char_index is not None else "",
        message_index=owner.index if owner is not None else None,
        message_role=owner.role if owner is not None else None,
        message_was_last=owner.was_last if owner is not None else None,
    )


def token_failure(
    decode_one: DecodeOne,
    check: str,
    aspect: str,
    category: str,
    conversation: Conversation,
    turn: int,
    roles: list[str],
    causes: list[str],
    expected: Sequence[int],
    actual: Sequence[int],
    index: int,
    detail: str = "",
) -> Failure:
    """A divergence between two id sequences, located by token."""
    return Failure(
        **_where(check, aspect, category, conversation, turn, roles, causes),
        token_index=index,
        expected=token_window(expected, index, decode_one),
        actual=token_window(actual, index, decode_one),
        detail=detail,
    )
