"""Validation of conversations that come from users (files, data sets, the library): clear errors, early."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tito_audit.conversation import Conversation
from tito_audit.errors import BadInputError

KNOWN_ROLES = frozenset({"system", "developer", "user", "assistant", "tool", "ipython", "function"})
MAX_DEPTH = 64


def _depth(value: Any, limit: int = MAX_DEPTH) -> int:
    """Nesting depth of lists and dicts, counting no further than ``limit + 1``."""
    stack = [(value, 1)]
    deepest = 0
    while stack:
        item, depth = stack.pop()
        if isinstance(item, (dict, list)):
            deepest = max(deepest, depth)
            if deepest > limit:
                return deepest
            children = item.values() if isinstance(item, dict) else item
            stack.extend((child, depth + 1) for child in children)
    return deepest


def problems_of(conversation: Conversation) -> list[str]:
    """Why ``conversation`` cannot be audited (empty when it can)."""
    problems: list[str] = []
    messages = conversation.messages
    if not isinstance(messages, list) or not messages:
        return ["it has no messages"]
    if _depth(messages) > MAX_DEPTH or _depth(conversation.tools) > MAX_DEPTH:
        return [f"it is nested deeper than {MAX_DEPTH} levels"]
    for index, message in enumerate(messages):
        if not isinstance(message, dict):
            problems.append(f"message {index} is not an object")
            continue
        role = message.get("role")
        if not isinstance(role, str) or role not in KNOWN_ROLES:
            problems.append(f"message {index} has an unknown role {role!r}")
        content = message.get("content")
        if content is not None and not isinstance(content, (str, list)):
            problems.append(f"message {index} content is a {type(content).__name__}, not text or a list of parts")
        calls = message.get("tool_calls")
        if calls is not None and (
            not isinstance(calls, list)
            or not all(isinstance(c, dict) and isinstance((c.get("function") or {}).get("name"), str) for c in calls)
        ):
            problems.append(f"message {index} has malformed tool_calls (each needs function.name)")
    if conversation.tools is not None and not isinstance(conversation.tools, list):
        problems.append("tools is not a list")
    return problems


def validate_conversations(conversations: Sequence[Conversation]) -> None:
    """Raise :class:`BadInputError` naming the first conversation that cannot be audited."""
    if not conversations:
        raise BadInputError("there are no conversations to audit")
    for conversation in conversations:
        problems = problems_of(conversation)
        if problems:
            raise BadInputError(f"conversation {conversation.id}: {problems[0]}")
