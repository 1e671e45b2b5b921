"""How a template writes a tool-call argument value, and the JSON literals a model may write instead (docs/contract.md
"Written values").

A value that is not a string can be written more than one way: JSON ``false``, ``null``, ``1.0``, or the template's
own literal (``False``, ``None`` where it writes ``value | string``). Where the template writes a value is found by
rendering the turn again with that value replaced by a marker: the two renders part exactly around the value's
literal.

>>> json_literals(False), json_literals(None), json_literals(1.0), json_literals(1e-07)
(['false'], ['null'], ['1.0', '1'], ['1e-07', '1e-7'])
>>> value_type(True), value_type(3), value_type(0.5), value_type([1]), value_type({}), value_type("x")
('boolean', 'integer', 'number', 'array', 'object', None)
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from typing import Any

from tito_audit.audit.core.diff import common_prefix_length
from tito_audit.conversations.conversation import Message

VALUE_TYPES = ("boolean", "null", "integer", "number", "array", "object")
MARKER = "QZXVMARK"
"""Stands in for a value when locating its literal: no literal of a non-string value starts with its first character
or ends with its last (``true``, ``None``, ``1e-07``, ``[…]``), so the two renders part exactly around the literal."""

_EXPONENT = re.compile(r"e([+-])0*(\d)")


def value_type(value: Any) -> str | None:
    """The JSON type of a non-string value (None for a string)."""
    if isinstance(value, bool):
        return "boolean"
    if value is None:
        return "null"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return None


def json_literals(value: Any) -> list[str]:
    """The ways a model writing JSON writes ``value``: the literal ``json.dumps`` gives, and for numbers the other
    spellings of the same number (``1`` for ``1.0``, ``1e-7`` for ``1e-07``), for arrays and objects the compact
    layout."""
    first = json.dumps(value, ensure_ascii=False)
    found = [first]
    if isinstance(value, float) and not isinstance(value, bool):
        if value.is_integer() and abs(value) < 1e15:
            found.append(str(int(value)))
        if "e" in first:
            found.append(_EXPONENT.sub(lambda m: "e" + ("-" if m.group(1) == "-" else "") + m.group(2), first))
    elif isinstance(value, (list, dict)):
        found.append(json.dumps(value, ensure_ascii=False, separators=(",", ":")))
    return list(dict.fromkeys(found))


def same_value(a: Any, b: Any) -> bool:
    """JSON equality: ``1 == 1.0`` but ``True != 1`` and ``None != "None"``."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return a == b
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same_value(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same_value(a[k], b[k]) for k in a)
    return type(a) is type(b) and a == b


def arguments_of(call: dict) -> dict | None:
    """A call's arguments as an object (parsed from a JSON string), None when they are not one."""
    arguments = (call.get("function") or {}).get("arguments")
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except ValueError:
            return None
    return arguments if isinstance(arguments, dict) else None


def non_string_values(message: Message) -> list[tuple[int, str, Any]]:
    """``(call index, argument name, value)`` of every top-level argument value that is not a string."""
    found = []
    for index, call in enumerate(message.get("tool_calls") or []):
        arguments = arguments_of(call)
        for name, value in (arguments or {}).items():
            if value_type(value) is not None:
                found.append((index, name, value))
    return found


def with_value(message: Message, call_index: int, name: str, value: Any) -> Message:
    """``message`` with argument ``name`` of call ``call_index`` set to ``value`` (arguments kept a JSON string when
    they were one)."""
    calls = [dict(call) for call in message["tool_calls"]]
    call = calls[call_index]
    function = dict(call["function"])
    arguments = function.get("arguments")
    as_string = isinstance(arguments, str)
    values = dict(arguments_of(call) or {})
    values[name] = value
    function["arguments"] = json.dumps(values, ensure_ascii=False) if as_string else values
    call["function"] = function
    calls[call_index] = call
    return {**message, "tool_calls": calls}


RenderText = Callable[[list[Message]], "str | None"]
"""``render(messages, gp=False)`` as text (None when the template refuses)."""


def locate_literal(
    full: str, messages: Sequence[Message], j: int, where: tuple[int, str], render: RenderText
) -> tuple[int, int] | None:
    """Where turn ``j``'s argument ``where`` (call index, name) is written in ``full`` (``render(M[:j+1])``), as
    ``(start, end)``; None when the template does not write it on its own (the marker render refused, or not parting
    around the marker)."""
    call_index, name = where
    marked = [*messages[:j], with_value(messages[j], call_index, name, MARKER)]
    other = render(marked)
    if other is None:
        return None
    start = common_prefix_length(full, other)
    tail = common_prefix_length(full[start:][::-1], other[start:][::-1])
    end, other_end = len(full) - tail, len(other) - tail
    if MARKER not in other[start:other_end] or other[start:other_end].replace(MARKER, "") not in ("", '""'):
        return None
    return (start, end) if end > start else None
