"""What a trainer hands a session, checked: messages as plain data nested at most 64 levels, text a tokenizer can
take."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from tito_audit.conversations.conversation import ASSISTANT, Message, clone_data
from tito_audit.conversations.validate import MAX_DEPTH, text_problem
from tito_audit.errors import BadInputError


def too_deep(value: Any, limit: int = MAX_DEPTH) -> bool:
    """Whether lists and dicts nest in ``value`` deeper than ``limit`` levels (``value`` itself is level 1), found
    without recursion: what copies, compares and renders the data recurses, and must never meet deeper data."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict | list | tuple):
            if depth > limit:
                return True
            stack.extend((child, depth + 1) for child in (item.values() if isinstance(item, dict) else item))
    return False


def check_depth(value: Any, what: str) -> None:
    if too_deep(value):
        raise BadInputError(f"{what} is nested deeper than {MAX_DEPTH} levels")


def check_text(messages: Sequence[Message], tools: Any, name: str = "message {index}") -> None:
    """Text no tokenizer can take (a lone surrogate) is bad input naming the message, its role and the character."""
    check_depth(tools, "tools")
    problem = text_problem(messages, tools, name)
    if problem is not None:
        raise BadInputError(problem)


def as_assistant_message(value: Any) -> Message:
    message = message_copy(value, "assistant_message")
    message.setdefault("role", ASSISTANT)
    if message.get("role") != ASSISTANT:
        raise ValueError(f"assistant_message has role {message.get('role')!r}, not 'assistant'")
    return message


def message_copy(value: Any, what: str) -> Message:
    if not isinstance(value, Mapping):
        raise ValueError(f"{what}: each message must be a mapping (role, content, ...), not {type(value).__name__}")
    message = dict(value)
    check_depth(message, what)
    return clone_data(message)


def checked_messages(messages: Sequence[Any], name: str) -> list[Message]:
    """Copies of ``messages`` (a trainer's), each checked: bad input names ``name[index]``."""
    copied = [message_copy(m, f"{name}[{i}]") for i, m in enumerate(messages)]
    check_text(copied, None, name + "[{index}]")
    return copied
