"""What a parse changed: the fields of the parsed message that differ from the message the template rendered.

The names are the ones the contract asks ``parse-lossy`` to carry: ``content whitespace``, ``content``, ``reasoning
boundary``, ``arguments re-serialized``, ``arguments changed``, ``call lost``, ``call added``, ``call name``,
``id changed``, ``arguments as an object`` (``id refused`` and ``arguments as objects refused`` are decided by the
render: the template raised on the parser's ids, or on arguments as objects).

>>> changed_fields({"role": "assistant", "content": " Hi\\n"}, {"role": "assistant", "content": "Hi"})
['content whitespace']
"""

from __future__ import annotations

import json
from typing import Any

from tito_audit.conversations.conversation import Message

CONTENT_WHITESPACE = "content whitespace"
CONTENT = "content"
REASONING_BOUNDARY = "reasoning boundary"
ARGUMENTS_RESERIALIZED = "arguments re-serialized"
ARGUMENTS_CHANGED = "arguments changed"
CALL_LOST = "call lost"
CALL_ADDED = "call added"
CALL_NAME = "call name"
ID_CHANGED = "id changed"
ID_REFUSED = "id refused"
ARGUMENTS_AS_OBJECT = "arguments as an object"
"""The message gave arguments as a JSON string; the parsed message (as the engine renders it) as an object."""
OBJECT_REFUSED = "arguments as objects refused"


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _arguments_value(value: Any) -> Any:
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


def _layout(value: Any) -> str:
    """How the arguments read: a string as written, an object as the order of its keys."""
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def changed_fields(original: Message, parsed: Message, written: str | None = None) -> list[str]:
    """The fields ``parsed`` changed relative to ``original`` (empty when the parse gave the message back).

    ``written`` is the text the model wrote for ``original``: reasoning the template does not write there (a
    template that never renders reasoning) is not something a parser could give back, so losing it is no change.
    """
    fields: list[str] = []
    before, after = _text(original.get("content")), _text(parsed.get("content"))
    thought_before, thought_after = _text(original.get("reasoning_content")), _text(parsed.get("reasoning_content"))
    shown = written is None or bool(thought_after.strip()) or (thought_before.strip() or "\0") in written
    if thought_before != thought_after and shown:
        fields.append(REASONING_BOUNDARY)
    if before != after:
        fields.append(CONTENT_WHITESPACE if before.strip() == after.strip() else CONTENT)
    calls_before, calls_after = original.get("tool_calls") or [], parsed.get("tool_calls") or []
    if len(calls_after) < len(calls_before):
        fields.append(CALL_LOST)
    elif len(calls_after) > len(calls_before):
        fields.append(CALL_ADDED)
    for call_before, call_after in zip(calls_before, calls_after, strict=False):
        function_before, function_after = call_before.get("function", {}), call_after.get("function", {})
        if function_before.get("name") != function_after.get("name"):
            fields.append(CALL_NAME)
        value_before = _arguments_value(function_before.get("arguments"))
        value_after = _arguments_value(function_after.get("arguments"))
        if isinstance(function_before.get("arguments"), str) and isinstance(function_after.get("arguments"), dict):
            fields.append(ARGUMENTS_AS_OBJECT)
        if value_before != value_after:
            fields.append(ARGUMENTS_CHANGED)
        elif _layout(function_before.get("arguments")) != _layout(function_after.get("arguments")):
            fields.append(ARGUMENTS_RESERIALIZED)
        if call_before.get("id") != call_after.get("id"):
            fields.append(ID_CHANGED)
    return list(dict.fromkeys(fields))
