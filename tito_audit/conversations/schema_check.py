"""Tool schemas checked before anything is generated: one line naming the tool and the keyword where the arguments
cannot be drawn (:mod:`tito_audit.conversations.schema_draw`), whatever branch a draw would take.

>>> check_tool_schemas([{"type": "function", "function": {"name": "f", "parameters": {"not": {}}}}])
Traceback (most recent call last):
...
tito_audit.conversations.schema_draw.SchemaDrawError: --tools: tool f: cannot draw arguments at parameters: not
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

from tito_audit.conversations.schema_draw import MAX_DEPTH, REFUSED_KEYWORDS, SchemaDrawError, draw_arguments


def check_tool_schemas(tools: Sequence[Any], label: str = "--tools") -> None:
    """Refuse, in one line naming the tool and the keyword, tools whose arguments cannot be drawn: no function
    name, parameters that are not an object schema, or a keyword the generator cannot honour anywhere in the schema
    (checked on every branch, not only on the ones a draw happens to take)."""
    for number, tool in enumerate(tools):
        function = tool.get("function") if isinstance(tool, dict) else None
        if not isinstance(function, dict) or not isinstance(function.get("name"), str) or not function["name"]:
            raise SchemaDrawError(f"{label}: tool {number} has no function name (expected the OpenAI tools shape)")
        name = function["name"]
        parameters = function.get("parameters")
        if parameters in (None, {}):
            continue
        if not isinstance(parameters, dict):
            raise SchemaDrawError(f"{label}: tool {name}: parameters must be a JSON Schema object")
        for node, path, depth in _subschemas(parameters):
            if depth > MAX_DEPTH:
                raise SchemaDrawError(
                    f"{label}: tool {name}: its schema nests deeper than {MAX_DEPTH} levels at {path}"
                )
            for keyword in REFUSED_KEYWORDS:
                if keyword in node:
                    raise SchemaDrawError(f"{label}: tool {name}: cannot draw arguments at {path}: {keyword}")
            ref = node.get("$ref")
            if ref is not None and (not isinstance(ref, str) or not ref.startswith("#")):
                raise SchemaDrawError(f"{label}: tool {name}: cannot draw arguments at {path}: $ref {ref!r}")
        for seed in range(3):  # patterns, references and bounds only show when drawn
            draw_arguments(tool, random.Random(f"check:{name}:{seed}"))


SCHEMA_MAPS = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")
"""Keywords whose value maps names to subschemas."""
SCHEMA_LISTS = ("anyOf", "oneOf", "allOf", "prefixItems")
SCHEMA_SINGLE = (
    "items",
    "additionalProperties",
    "additionalItems",
    "contains",
    "propertyNames",
    "not",
    "if",
    "then",
    "else",
)


def _subschemas(schema: dict) -> list[tuple[dict, str, int]]:
    """Every subschema object of ``schema`` with its path and depth (walked without recursion: a schema nested
    thousands of levels deep is read, and refused, like any other)."""
    found: list[tuple[dict, str, int]] = []
    stack: list[tuple[Any, str, int]] = [(schema, "parameters", 0)]
    while stack:
        node, path, depth = stack.pop()
        if not isinstance(node, dict):
            continue
        found.append((node, path, depth))
        if depth > MAX_DEPTH:
            break
        for keyword in SCHEMA_MAPS:
            children = node.get(keyword)
            if isinstance(children, dict):
                stack.extend((sub, f"{path}/{keyword}/{name}", depth + 1) for name, sub in children.items())
        for keyword in SCHEMA_LISTS:
            children = node.get(keyword)
            if isinstance(children, list):
                stack.extend((sub, f"{path}/{keyword}/{i}", depth + 1) for i, sub in enumerate(children))
        for keyword in SCHEMA_SINGLE:
            child = node.get(keyword)
            if isinstance(child, list):
                stack.extend((sub, f"{path}/{keyword}/{i}", depth + 1) for i, sub in enumerate(child))
            elif isinstance(child, dict):
                stack.append((child, f"{path}/{keyword}", depth + 1))
    return found
