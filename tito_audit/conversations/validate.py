"""Validation of conversations that come from users (files, data sets, the library): clear errors, early."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from tito_audit.conversations.conversation import Conversation
from tito_audit.errors import BadInputError

if TYPE_CHECKING:
    from tito_audit.model.tokens import TokenCodec

KNOWN_ROLES = frozenset({"system", "developer", "user", "assistant", "tool", "ipython", "function"})
MAX_DEPTH = 64
LONE_SURROGATE = re.compile("[\ud800-\udfff]")
"""Half of a UTF-16 surrogate pair: a Python string can hold one, no UTF-8 text (and so no tokenizer) can."""


def unencodable(value: Any, where: str = "") -> str | None:
    """Where ``value`` (text, or JSON-like data holding text) has a character no tokenizer can take, as
    ``a lone surrogate U+D800 at character 5 of content``; None when there is none."""
    stack = [(value, where)]
    while stack:
        item, path = stack.pop()
        if isinstance(item, str):
            found = LONE_SURROGATE.search(item)
            if found is not None:
                where = path or "the text"
                return f"a lone surrogate U+{ord(found.group()):04X} at character {found.start()} of {where}"
        elif isinstance(item, dict):
            stack.extend((v, f"{path}.{k}" if path else str(k)) for k, v in reversed(list(item.items())))
        elif isinstance(item, (list, tuple)):
            stack.extend((v, f"{path}[{i}]") for i, v in reversed(list(enumerate(item))))
    return None


ENCODE_PROBLEM = "has text the tokenizer cannot encode"


def text_problem(messages: Sequence[Any], tools: Any = None, name: str = "message {index}") -> str | None:
    """The first message (index, role) or tool schema holding text the tokenizer cannot take, in one line
    (``name``: how a message is named, ``{index}`` its position)."""
    for index, message in enumerate(messages):
        found = unencodable(message)
        if found is not None:
            role = message.get("role") if isinstance(message, dict) else None
            return f"{name.format(index=index)} ({role}) {ENCODE_PROBLEM}: {found}"
    found = unencodable(tools, "tools")
    return f"the tool schemas: {ENCODE_PROBLEM}: {found}" if found is not None else None


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
    if not problems:
        text = text_problem(messages, conversation.tools)
        if text is not None:
            problems.append(text)
    return problems


def check_stop_tokens(codec: TokenCodec, texts: Sequence[str]) -> None:
    """Each extra stop token must be one token of the vocabulary: a text the tokenizer splits would never be
    sampled as one id, and would turn the verdict without saying why."""
    for text in texts:
        if codec.id_of(text) is not None:
            continue
        ids = codec.encode(text) if text else []
        pieces = ", ".join(repr(codec.decode([i])) for i in ids[:6]) + (", …" if len(ids) > 6 else "")
        said = f"it encodes to {len(ids)} tokens ({pieces})" if ids else "it is empty"
        raise BadInputError(f"--stop-token {text!r} is not a single token of the vocabulary: {said}")


def validate_conversations(conversations: Sequence[Conversation]) -> None:
    """Raise :class:`BadInputError` naming the first conversation that cannot be audited."""
    if not conversations:
        raise BadInputError("there are no conversations to audit")
    for conversation in conversations:
        problems = problems_of(conversation)
        if problems:
            raise BadInputError(f"conversation {conversation.id}: {problems[0]}")
