"""Arguments drawn from a tool's JSON Schema (docs/contract.md, Conversations: "Arguments from the tools' schemas"):
every draw is valid under the schema as an independent validator reads it (``jsonschema``), the built-in tools cover
every form in the default conversation count, and a schema the generator cannot honour is refused in one line naming the
tool and the keyword."""

from __future__ import annotations

import json
import random

import jsonschema
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import SHARED
from tito_audit.conversations.generate import generate
from tito_audit.conversations.schema_check import check_tool_schemas
from tito_audit.conversations.schema_draw import MAX_DEPTH, SchemaDrawError, draw_arguments
from tito_audit.conversations.tools import BUILT_IN_TOOLS, built_in_tools

TAU_TOOLS = SHARED / "conversations" / "tau-bench" / "airline_tools.derived.json"


def _tool(parameters: dict | None, name: str = "probe") -> dict:
    function: dict = {"name": name, "description": "A tool."}
    if parameters is not None:
        function["parameters"] = parameters
    return {"type": "function", "function": function}


def _valid(schema: dict, value: object) -> None:
    jsonschema.Draft202012Validator(schema, format_checker=jsonschema.FormatChecker()).validate(value)


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(min_value=0, max_value=2**31), name=st.sampled_from(sorted(BUILT_IN_TOOLS)))
def test_every_built_in_draw_is_valid_under_its_schema(seed, name):
    tool = _tool(BUILT_IN_TOOLS[name]["parameters"], name)
    _valid(BUILT_IN_TOOLS[name]["parameters"], draw_arguments(tool, random.Random(seed)))


scalars = st.sampled_from([{"type": t} for t in ("string", "integer", "number", "boolean", "null")])
non_null = st.sampled_from([{"type": t} for t in ("string", "integer", "boolean")] + [{"type": "array"}])


def _schemas(children):
    return st.one_of(
        st.builds(lambda items: {"type": "array", "items": items}, children),
        st.builds(
            lambda props, keep: {
                "type": "object",
                "properties": props,
                "required": sorted(props)[: len(props) // 2] if keep else [],
            },
            st.dictionaries(st.sampled_from(["a", "b", "c", "d"]), children, max_size=3),
            st.booleans(),
        ),
        st.builds(lambda a, b: {"anyOf": [a, b]}, children, children),
        st.builds(lambda a: {"oneOf": [a, {"type": "null"}]}, non_null),
        st.builds(
            lambda kinds: {"type": kinds},
            st.lists(st.sampled_from(["string", "null", "integer"]), min_size=1, max_size=3, unique=True),
        ),
        st.builds(
            lambda values: {"enum": values},
            st.lists(st.integers(-3, 3) | st.text(max_size=4), min_size=1, max_size=4, unique=True),
        ),
        st.just({"type": "integer", "minimum": 5, "maximum": 9}),
        st.just({"type": "number", "exclusiveMinimum": 0, "maximum": 0.001}),
        st.just({"type": "string", "minLength": 3, "maxLength": 5}),
        st.just({"type": "array", "items": {"type": "integer"}, "minItems": 2, "maxItems": 2, "uniqueItems": True}),
    )


schemas = st.recursive(scalars, _schemas, max_leaves=12)


@settings(max_examples=150, deadline=None)
@given(schema=schemas, seed=st.integers(min_value=0, max_value=2**31))
def test_draws_from_any_schema_are_valid(schema, seed):
    parameters = {"type": "object", "properties": {"x": schema}, "required": ["x"]}
    arguments = draw_arguments(_tool(parameters), random.Random(seed))
    _valid(parameters, arguments)


def test_local_references_are_followed():
    parameters = {
        "type": "object",
        "$defs": {"item": {"type": "object", "properties": {"sku": {"type": "string"}}, "required": ["sku"]}},
        "properties": {"items": {"type": "array", "items": {"$ref": "#/$defs/item"}, "minItems": 1}},
        "required": ["items"],
    }
    for seed in range(20):
        arguments = draw_arguments(_tool(parameters), random.Random(seed))
        _valid(parameters, arguments)
        assert all(isinstance(item["sku"], str) for item in arguments["items"])


@pytest.mark.skipif(
    not TAU_TOOLS.is_file(), reason="../shared/conversations (tau-bench tools) is not beside the project"
)
def test_real_tools_draw_valid_arguments():
    tools = json.loads(TAU_TOOLS.read_text(encoding="utf-8"))
    check_tool_schemas(tools)
    for tool in tools:
        for seed in range(5):
            _valid(tool["function"]["parameters"], draw_arguments(tool, random.Random(seed)))


def test_a_tool_without_parameters_gets_an_empty_object():
    for parameters in (None, {}, {"type": "object", "properties": {}}):
        assert all(draw_arguments(_tool(parameters), random.Random(s)) == {} for s in range(10))


@pytest.mark.parametrize(
    ("parameters", "keyword"),
    [
        ({"type": "object", "properties": {"a": {"not": {"type": "string"}}}}, "not"),
        ({"type": "object", "if": {"required": ["a"]}, "then": {"required": ["b"]}}, "if"),
        ({"type": "object", "properties": {"a": {"$ref": "https://example.org/s.json"}}}, "$ref"),
        ({"type": "object", "properties": {"a": {"type": "string", "pattern": "^[0-9]{12}$"}}}, "pattern"),
        ({"type": "object", "properties": {"a": {"type": "decimal"}}}, "type"),
    ],
)
def test_a_schema_that_cannot_be_drawn_is_refused_in_one_line_naming_tool_and_keyword(parameters, keyword):
    with pytest.raises(SchemaDrawError) as raised:
        check_tool_schemas([_tool(parameters, "book_flight")])
    message = str(raised.value)
    assert "\n" not in message and "book_flight" in message and keyword in message


def test_a_property_called_like_a_keyword_is_a_property():
    parameters = {"type": "object", "properties": {"not": {"type": "boolean"}, "if": {"type": "string"}}}
    check_tool_schemas([_tool(parameters)])
    _valid(parameters, draw_arguments(_tool(parameters), random.Random(1)))


def test_a_schema_nested_hundreds_deep_is_one_line_not_a_recursion_error():
    schema: dict = {"type": "string"}
    for _ in range(300):
        schema = {"type": "object", "properties": {"a": schema}, "required": ["a"]}
    with pytest.raises(SchemaDrawError) as raised:
        check_tool_schemas([_tool(schema, "deep")])
    assert f"deeper than {MAX_DEPTH}" in str(raised.value) and "\n" not in str(raised.value)


def _values(conversations) -> list[tuple[str, str, object]]:
    found = []
    for conversation in conversations:
        for message in conversation.messages:
            for call in message.get("tool_calls") or []:
                arguments = call["function"]["arguments"]
                arguments = json.loads(arguments) if isinstance(arguments, str) else arguments
                found.append((call["function"]["name"], "", arguments))
                found += [(call["function"]["name"], key, value) for key, value in arguments.items()]
    return found


def _nested(values) -> list[object]:
    found: list[object] = []
    stack = list(values)
    while stack:
        value = stack.pop()
        found.append(value)
        if isinstance(value, dict):
            stack += list(value.values())
        elif isinstance(value, list):
            stack += value
    return found


def test_the_default_conversations_hold_every_form_of_argument():
    """The default count (96) meets every JSON type and form the contract lists, in the built-in tools' calls."""
    values = _values(generate(96, seed=0))
    top = [(tool, key, value) for tool, key, value in values if key]
    assert any(isinstance(v, bool) for _, _, v in top), "boolean"
    assert any(v is None for _, _, v in top), "null"
    assert any(type(v) is int for _, _, v in top), "integer"
    floats = {v for v in _nested(v for _, _, v in top) if type(v) is float}
    assert {1.0, -0.5, 1e-07} <= floats, floats
    assert any(isinstance(v, list) and v and all(isinstance(x, str) for x in v) for _, _, v in top), "array of strings"
    assert any(isinstance(v, list) and v and all(isinstance(x, dict) for x in v) for _, _, v in top), "array of objects"
    assert any(isinstance(v, dict) and any(isinstance(x, (dict, list)) for x in v.values()) for _, _, v in top)
    assert any(arguments == {} for _, key, arguments in values if not key), "a call without arguments"
    # optional properties are sometimes left out, and union types draw each of their types
    tickets = [arguments for tool, key, arguments in values if tool == "update_ticket" and not key]
    assert any("labels" in a for a in tickets) and any("labels" not in a for a in tickets)
    assignees = {type(a["assignee"]).__name__ for a in tickets}
    assert assignees == {"str", "NoneType"}, assignees
    units = {a.get("unit") for tool, key, a in values if tool == "get_weather" and not key}
    assert {"celsius", "fahrenheit"} <= units


def test_the_built_in_set_is_its_own_tools():
    assert built_in_tools().names == list(BUILT_IN_TOOLS)
