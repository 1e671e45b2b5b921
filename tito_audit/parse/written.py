"""What models write besides the template's own layout (docs/contract.md "The parse step", "What models write").

A model trained on a template mostly writes the template's layout, but not always: tool-call arguments in compact
JSON (``{"a":1}``) or with their keys in another order, content with a newline or space around it. Each layout
here rewrites the text of one sampled turn (``None`` when it does not apply: no call whose arguments the template
writes as JSON, a single key, no content) and gives the message a perfect inverse would return for that text.

>>> text = 'Let me check.<tool_call>{"name": "f", "arguments": {"a": 1, "b": 2}}</tool_call>'
>>> message = {"role": "assistant", "content": "Let me check.",
...            "tool_calls": [{"function": {"name": "f", "arguments": {"a": 1, "b": 2}}}]}
>>> COMPACT.rewrite(text, message)[0]
'Let me check.<tool_call>{"name": "f", "arguments": {"a":1,"b":2}}</tool_call>'
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tito_audit.conversations.conversation import Message, clone_data

Rewrite = Callable[[str, Message], "tuple[str, Message] | None"]


@dataclass(frozen=True)
class Layout:
    name: str
    rewrite: Rewrite


def _template_layouts(arguments: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """The ways a template may have written ``arguments`` as JSON, with the ``json.dumps`` options of each."""
    options: list[dict[str, Any]] = [
        {"ensure_ascii": False},
        {"ensure_ascii": True},
        {"ensure_ascii": False, "separators": (",", ":")},
        {"ensure_ascii": False, "indent": 2},
        {"ensure_ascii": False, "indent": 4},
    ]
    return [(json.dumps(arguments, **option), option) for option in options]


def _rewrite_arguments(text: str, message: Message, rewrite: Callable[[dict, dict], tuple[str, str]]) -> Any:
    """Each call's arguments found once in ``text`` (in any of the template's JSON layouts) and rewritten;
    None when no call's arguments could be found and changed."""
    calls = message.get("tool_calls") or []
    new_message = clone_data(message)
    changed = False
    for call, new_call in zip(calls, new_message.get("tool_calls") or [], strict=True):
        arguments = call.get("function", {}).get("arguments")
        if isinstance(arguments, str):
            try:
                arguments = json.loads(arguments)
            except ValueError:
                continue
        if not isinstance(arguments, dict) or not arguments:
            continue
        for written, option in _template_layouts(arguments):
            if text.count(written) != 1:
                continue
            replacement, as_string = rewrite(arguments, option)
            if replacement == written:
                continue
            text = text.replace(written, replacement)
            new_call["function"]["arguments"] = as_string
            changed = True
            break
    return (text, new_message) if changed else None


def _compact(arguments: dict, option: dict) -> tuple[str, str]:
    written = json.dumps(arguments, ensure_ascii=option.get("ensure_ascii", False), separators=(",", ":"))
    return written, written


def _reordered(arguments: dict, option: dict) -> tuple[str, str]:
    if len(arguments) < 2:
        return json.dumps(arguments, **option), json.dumps(arguments, **option)
    reversed_order = dict(reversed(list(arguments.items())))
    written = json.dumps(reversed_order, **option)
    return written, written


def _padded(text: str, message: Message) -> tuple[str, Message] | None:
    content = message.get("content")
    if not isinstance(content, str) or not content.strip() or text.count(content) != 1:
        return None
    padded = "\n" + content + "\n"
    new_message = clone_data(message)
    new_message["content"] = padded
    return text.replace(content, padded), new_message


COMPACT = Layout("compact JSON arguments", lambda text, message: _rewrite_arguments(text, message, _compact))
REORDERED = Layout(
    "arguments in another key order", lambda text, message: _rewrite_arguments(text, message, _reordered)
)
PADDED = Layout("content with surrounding whitespace", _padded)
LAYOUTS = (COMPACT, REORDERED, PADDED)
