"""What a trainer hands a session, checked: messages as plain data, text a tokenizer can take."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from tito_audit.conversations.conversation import ASSISTANT, Message, clone_data
from tito_audit.conversations.validate import text_problem
from tito_audit.errors import BadInputError


def check_text(messages: Sequence[Message], tools: Any, name: str = "message {index}") -> None:
    """Text no tokenizer can take (a lone surrogate) is bad input naming the message, its role and the character."""
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
    return clone_data(dict(value))
