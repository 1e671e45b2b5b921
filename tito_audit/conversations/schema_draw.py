"""Tool-call arguments drawn from the tool's JSON Schema (docs/contract.md, Conversations: "Arguments from the tools'
schemas").

A model calling a tool writes the arguments its ``parameters`` schema describes, so the audit draws them from that
schema: one function per JSON type (:data:`DRAW_BY_TYPE`), and the keywords that choose among types (``enum``,
``const``, ``type`` lists, ``anyOf``/``oneOf``, ``allOf``, local ``$ref``, OpenAPI's ``nullable``) decide which one
draws. The values cover what templates and parsers get wrong: booleans and nulls, numbers written ``1.0``, ``-0.5``
and ``1e-07``, arrays of scalars and of objects, nested objects, optional properties left out, and ``{}`` for a tool
without parameters.

``oneOf`` is drawn like ``anyOf`` (a branch, then its value): tool schemas use it for disjoint alternatives (a value
or null); overlapping branches are not made exclusive. A schema that constrains values in a way no draw here honours
(``not``, ``if``/``then``/``else``, a ``$ref`` outside the schema, a ``pattern`` none of the candidate strings match)
is refused with one line naming the tool and the keyword (:class:`SchemaDrawError`), before anything is generated:
:func:`tito_audit.conversations.schema_check.check_tool_schemas`.

>>> import random
>>> schema = {"type": "object", "properties": {"on": {"type": "boolean"}}, "required": ["on"]}
>>> sorted(draw_arguments({"function": {"name": "f", "parameters": schema}}, random.Random(0)))
['on']
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from tito_audit.errors import BadInputError

JSON_TYPES = ("string", "integer", "number", "boolean", "null", "array", "object")

MAX_DEPTH = 16
"""Nesting a schema may reach; a deeper one (or a recursive ``$ref`` whose required properties never end) is
refused with one line."""
OPTIONAL_DEPTH = 4
"""Below this depth optional properties and array items are no longer drawn, so recursive schemas end."""

REFUSED_KEYWORDS = ("not", "if", "then", "else", "dependentSchemas", "$dynamicRef", "$recursiveRef")
"""Keywords that constrain values in ways a draw cannot honour in general."""

INTEGERS = (0, 1, 3, 7, 42, 100, -2, 2_147_483_647)
NUMBERS = (1.0, -0.5, 1e-07, 3.14159, 99.5, 0.0, 2500.0, 12.75)
"""Floats as models write them: integral (``1.0``), negative, tiny (``1e-07``: Python and JSON both write the
exponent), and plain decimals."""
WORDS = (
    "Paris",
    "São Paulo",
    "東京",
    "running shoes",
    'shoes "size 10"',
    "usb-c\tcable",
    "pytest -q",
    "grep -rn 'TODO' .",
    'echo "a\\nb"',
    "line one\nline two",
    "café",
    "",
)
FORMATS: dict[str, tuple[str, ...]] = {
    "date": ("2026-01-15", "1999-12-31"),
    "date-time": ("2026-01-15T09:30:00Z", "2025-06-01T18:05:59+02:00"),
    "time": ("09:30:00", "23:59:59"),
    "email": ("ada@example.com",),
    "uri": ("https://huggingface.co/docs", "file:///tmp/report.txt"),
    "uuid": ("123e4567-e89b-12d3-a456-426614174000",),
    "ipv4": ("192.168.0.1",),
}


class SchemaDrawError(BadInputError):
    """A tool's schema asks for values the generator cannot draw (one line naming the tool and the keyword)."""


@dataclass(frozen=True)
class Draw:
    """Where a draw is: the random source, the tool and the path inside its schema (for error messages), the
    schema's root (for ``$ref``), the depth, and where string values come from."""

    rng: random.Random
    tool: str
    root: dict
    strings: Callable[[random.Random], str]
    path: str = "parameters"
    depth: int = 0
    refs: tuple[str, ...] = field(default_factory=tuple)

    def inside(self, step: str, schema: Any = None) -> Draw:
        if self.depth + 1 > MAX_DEPTH:
            raise SchemaDrawError(
                f"tool {self.tool}: its schema nests deeper than {MAX_DEPTH} levels at {self.path} "
                "(a recursive $ref whose required properties never end?)"
            )
        return replace(self, path=f"{self.path}{step}", depth=self.depth + 1)

    def refuse(self, keyword: str, why: str) -> SchemaDrawError:
        return SchemaDrawError(f"tool {self.tool}: cannot draw arguments at {self.path}: {keyword} ({why})")


def default_strings(rng: random.Random) -> str:
    return rng.choice(WORDS)


def draw_arguments(
    tool: dict, rng: random.Random, strings: Callable[[random.Random], str] = default_strings
) -> dict[str, Any]:
    """The arguments of one call of ``tool`` (an OpenAI ``tools`` entry): an object drawn from its ``parameters``
    (``{}`` when it has none)."""
    function = tool.get("function", tool)
    name = str(function.get("name", "?"))
    parameters = function.get("parameters")
    if not parameters:
        return {}
    if not isinstance(parameters, dict):
        raise SchemaDrawError(f"tool {name}: parameters must be a JSON Schema object, not {type(parameters).__name__}")
    value = draw_value(parameters, Draw(rng, name, parameters, strings))
    if not isinstance(value, dict):
        raise SchemaDrawError(f"tool {name}: parameters must describe an object (arguments are a JSON object)")
    return value


def draw_value(schema: Any, at: Draw) -> Any:
    """A value of ``schema``: its ``const`` or ``enum`` when it has one, else a branch of ``anyOf``/``oneOf`` or one
    of its types, drawn by that type's function."""
    if schema is True or schema == {}:
        return _any_scalar(at)
    if not isinstance(schema, dict):
        raise at.refuse("schema", f"expected an object or true, found {type(schema).__name__}")
    for keyword in REFUSED_KEYWORDS:
        if keyword in schema:
            raise at.refuse(keyword, "not supported by the generator")
    if "$ref" in schema:
        return draw_value(_merged_ref(schema, at), at.inside("/$ref"))
    if "allOf" in schema:
        return draw_value(_merged_all_of(schema, at), at.inside("/allOf"))
    if "const" in schema:
        return schema["const"]
    if isinstance(schema.get("enum"), list) and schema["enum"]:
        return at.rng.choice(schema["enum"])
    for keyword in ("anyOf", "oneOf"):
        branches = schema.get(keyword)
        if isinstance(branches, list) and branches:
            index = at.rng.randrange(len(branches))
            base = {k: v for k, v in schema.items() if k != keyword}
            branch = branches[index] if isinstance(branches[index], dict) else {}
            return draw_value({**base, **branch}, at.inside(f"/{keyword}/{index}"))
    kind = at.rng.choice(_types_of(schema, at))
    return DRAW_BY_TYPE[kind](schema, at)


def _types_of(schema: dict, at: Draw) -> list[str]:
    declared = schema.get("type")
    if declared is None:
        kinds = ["object"] if "properties" in schema else ["array"] if "items" in schema else ["string"]
    elif isinstance(declared, str):
        kinds = [declared]
    elif isinstance(declared, list) and declared:
        kinds = [str(k) for k in declared]
    else:
        raise at.refuse("type", f"expected a type name or a list of them, found {declared!r}")
    if schema.get("nullable") is True and "null" not in kinds:
        kinds.append("null")
    unknown = [k for k in kinds if k not in JSON_TYPES]
    if unknown:
        raise at.refuse("type", f"{unknown[0]!r} is not a JSON type")
    return kinds


def _merged_ref(schema: dict, at: Draw) -> dict:
    ref = schema["$ref"]
    if not isinstance(ref, str) or not ref.startswith("#"):
        raise at.refuse("$ref", f"only references inside the schema are followed, not {ref!r}")
    target: Any = at.root
    for part in [p for p in ref[1:].split("/") if p]:
        part = part.replace("~1", "/").replace("~0", "~")
        if not isinstance(target, dict) or part not in target:
            raise at.refuse("$ref", f"{ref} names nothing in the schema")
        target = target[part]
    if not isinstance(target, dict):
        raise at.refuse("$ref", f"{ref} is not a schema object")
    return {**target, **{k: v for k, v in schema.items() if k != "$ref"}}


def _merged_all_of(schema: dict, at: Draw) -> dict:
    """``allOf`` as one schema: properties and required names joined, the other keywords of later branches win
    (enough for the ``allOf`` tool schemas use: a base object extended with more properties)."""
    merged = {k: v for k, v in schema.items() if k != "allOf"}
    for branch in schema["allOf"] if isinstance(schema["allOf"], list) else []:
        if not isinstance(branch, dict):
            continue
        if "$ref" in branch:
            branch = _merged_ref(branch, at)
        properties = {**merged.get("properties", {}), **branch.get("properties", {})}
        required = list(dict.fromkeys([*merged.get("required", []), *branch.get("required", [])]))
        merged.update({k: v for k, v in branch.items() if k not in ("properties", "required")})
        if properties:
            merged["properties"] = properties
        if required:
            merged["required"] = required
    return merged


def _any_scalar(at: Draw) -> Any:
    kind = at.rng.choice(("string", "string", "integer", "number", "boolean", "null"))
    return DRAW_BY_TYPE[kind]({}, at)


def draw_string(schema: dict, at: Draw) -> str:
    """A string: a value of its ``format`` when it names a known one, else text models write in arguments (plain
    words, quotes, tabs, newlines, non-Latin scripts), cut to ``maxLength`` and padded to ``minLength``; with a
    ``pattern``, the first candidate it matches."""
    pattern = schema.get("pattern")
    candidates = [*FORMATS.get(str(schema.get("format")), ()), at.strings(at.rng)]
    if pattern is not None:
        try:
            compiled = re.compile(str(pattern))
        except re.error as exc:
            raise at.refuse("pattern", f"not a regular expression: {exc}") from None
        pool = [*candidates, *WORDS, *(w for values in FORMATS.values() for w in values)]
        matching = [c for c in pool if compiled.search(c)]
        if not matching:
            raise at.refuse("pattern", f"no candidate string matches {pattern!r}")
        candidates = matching
    text = candidates[0] if schema.get("format") in FORMATS or pattern is not None else candidates[-1]
    low, high = schema.get("minLength"), schema.get("maxLength")
    if isinstance(high, int) and len(text) > high:
        text = text[:high]
    if isinstance(low, int) and len(text) < low:
        text = text + "x" * (low - len(text))
    return text


def _in_range(value: float, schema: dict) -> bool:
    low, high = schema.get("minimum"), schema.get("maximum")
    above, below = schema.get("exclusiveMinimum"), schema.get("exclusiveMaximum")
    if isinstance(above, bool):  # draft 4: exclusiveMinimum is a flag on minimum
        above = low if above else None
    if isinstance(below, bool):
        below = high if below else None
    step = schema.get("multipleOf")
    return (
        (low is None or value >= low)
        and (high is None or value <= high)
        and (above is None or value > above)
        and (below is None or value < below)
        and (not step or abs(value / step - round(value / step)) < 1e-9)
    )


def _number_in(schema: dict, at: Draw, pool: Sequence[float], integral: bool) -> float:
    fitting = [value for value in pool if _in_range(value, schema)]
    if fitting:
        return at.rng.choice(fitting)
    low = schema.get("minimum", schema.get("exclusiveMinimum"))
    high = schema.get("maximum", schema.get("exclusiveMaximum"))
    step = schema.get("multipleOf")
    for guess in _guesses(low, high, step, integral):
        if _in_range(guess, schema):
            return guess
    raise at.refuse("minimum/maximum", "no number satisfies the bounds")


def _guesses(low: Any, high: Any, step: Any, integral: bool) -> list[float]:
    numbers = [v for v in (low, high) if isinstance(v, (int, float)) and not isinstance(v, bool)]
    guesses: list[float] = []
    if len(numbers) == 2:
        guesses.append((numbers[0] + numbers[1]) / 2)
    for value in numbers:
        guesses += [value, value + 1, value - 1]
    if isinstance(step, (int, float)) and step and numbers:
        guesses += [step * round(v / step) + step * k for v in numbers for k in (0, 1, -1)]
    if integral:
        return [float(int(g)) for g in guesses] + [float(int(g) + 1) for g in guesses]
    return guesses


def draw_integer(schema: dict, at: Draw) -> int:
    return int(_number_in(schema, at, INTEGERS, integral=True))


def draw_number(schema: dict, at: Draw) -> float | int:
    """A number: mostly floats (``1.0``, ``-0.5``, ``1e-07``), sometimes an integer (JSON has one number type)."""
    if at.rng.random() < 0.2:
        fitting = [value for value in INTEGERS if _in_range(value, schema)]
        if fitting:
            return at.rng.choice(fitting)
    return _number_in(schema, at, NUMBERS, integral=False)


def draw_boolean(schema: dict, at: Draw) -> bool:
    return at.rng.random() < 0.5


def draw_null(schema: dict, at: Draw) -> None:
    return None


def draw_array(schema: dict, at: Draw) -> list[Any]:
    """An array: its ``prefixItems`` then ``items`` (zero to three when the bounds allow; none past
    :data:`OPTIONAL_DEPTH`), one of ``contains`` when asked, unique when ``uniqueItems``."""
    low = schema.get("minItems", 0) if isinstance(schema.get("minItems"), int) else 0
    high = schema.get("maxItems") if isinstance(schema.get("maxItems"), int) else None
    prefix_items = schema.get("prefixItems")
    prefix = prefix_items if isinstance(prefix_items, list) else []
    items = schema.get("items", {})
    values = [draw_value(sub, at.inside(f"/prefixItems/{i}")) for i, sub in enumerate(prefix)]
    if isinstance(items, list):  # draft 4 tuple form
        values += [draw_value(sub, at.inside(f"/items/{i}")) for i, sub in enumerate(items)]
        items = schema.get("additionalItems", False)
    wanted = 0 if at.depth >= OPTIONAL_DEPTH else at.rng.choice((1, 1, 2, 3, 0))
    wanted = max(wanted, low - len(values))
    if high is not None:
        wanted = min(wanted, high - len(values))
    if "contains" in schema and wanted > 0:
        values.append(draw_value(schema["contains"], at.inside("/contains")))
        wanted -= 1
    if items is not False:
        for _ in range(max(0, wanted)):
            values.append(_unique_item(items, at, values) if schema.get("uniqueItems") else _item(items, at))
    return values


def _item(items: Any, at: Draw) -> Any:
    return draw_value(items if items is not None else {}, at.inside("/items"))


def _unique_item(items: Any, at: Draw, taken: list[Any]) -> Any:
    for _ in range(8):
        value = _item(items, at)
        if value not in taken:
            return value
    raise at.refuse("uniqueItems", "could not draw distinct items")


def draw_object(schema: dict, at: Draw) -> dict[str, Any]:
    """An object: every required property, each optional one about half of the time (none past
    :data:`OPTIONAL_DEPTH`), and for a free-form object (no ``properties`` keyword, extra keys allowed) a few keys of
    its own; ``"properties": {}`` is an object without properties (``{}``)."""
    named_properties = schema.get("properties")
    properties = named_properties if isinstance(named_properties, dict) else {}
    required = [n for n in schema.get("required", []) if isinstance(n, str)]
    out: dict[str, Any] = {}
    for name, sub in properties.items():
        if name in required or (at.depth < OPTIONAL_DEPTH and at.rng.random() < 0.55):
            out[name] = draw_value(sub, at.inside(f".{name}"))
    for name in required:
        if name not in out:
            out[name] = _any_scalar(at.inside(f".{name}"))
    for name, needed in (schema.get("dependentRequired") or {}).items():
        if name in out:
            for other in needed:
                if other not in out:
                    out[other] = draw_value(properties.get(other, {}), at.inside(f".{other}"))
    extra = schema.get("additionalProperties", True)
    free_form = "properties" not in schema and extra is not False and "patternProperties" not in schema
    if free_form and at.depth < OPTIONAL_DEPTH:
        for key in at.rng.sample(("color", "size", "note", "max_price"), at.rng.choice((0, 1, 2))):
            out[key] = draw_value(extra if isinstance(extra, dict) else {}, at.inside(f".{key}"))
    low = schema.get("minProperties")
    if isinstance(low, int) and len(out) < low:
        for name in [n for n in properties if n not in out][: low - len(out)]:
            out[name] = draw_value(properties[name], at.inside(f".{name}"))
    return out


DRAW_BY_TYPE: dict[str, Callable[[dict, Draw], Any]] = {
    "string": draw_string,
    "integer": draw_integer,
    "number": draw_number,
    "boolean": draw_boolean,
    "null": draw_null,
    "array": draw_array,
    "object": draw_object,
}
