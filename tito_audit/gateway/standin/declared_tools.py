"""The tools a prompt declares, read back from the prompt's text as the model reads them: one reader per layout a
template writes its tool declarations in.

A serving engine is given token ids and nothing else; the model learns which tools it may call from the text the
template wrote into the prompt. The stand-in engine does the same: it decodes the prompt and reads the declarations in
the layout its template writes them (:func:`learn_reader` finds which, by rendering a probe tool and asking each
reader for it back):

- ``json``: one JSON object per tool (``{"type": "function", "function": {...}}`` or ``{"name", "parameters"}``), as
  Qwen's, Llama 3.x's and most templates write them (``tojson``), or Python's ``repr`` of the same dict (SmolLM3);
- ``typescript``: harmony's ``namespace functions { type NAME = (_: {...}) => any; }`` (gpt-oss): the schema comes
  back as far as the TypeScript shows it (numbers as integers, enums, arrays, nested objects, optional properties);
- ``xml``: Qwen3-Coder's ``<function><name>NAME</name>…<parameters><parameter>…`` (a property's type, description,
  enum and other keywords each in a tag of its own);
- ``gemma``: Gemma 4's ``<|tool>declaration:NAME{description:<|"|>…<|"|>,parameters:{…}}<tool|>``, its strings quoted
  with ``<|"|>`` and its types in capitals.

Only the text before the prompt's first assistant turn is read (the system prompt, or Llama's first user message,
where templates declare tools), so that a call written in the history is never taken for a declaration.
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

Tool = dict[str, Any]
Reader = Callable[[str], list[Tool]]


@dataclass(frozen=True)
class ToolReader:
    name: str
    read: Reader


def tool(name: str, description: str, parameters: dict[str, Any] | None) -> Tool:
    """An OpenAI ``tools`` entry."""
    function: dict[str, Any] = {"name": name, "description": description}
    if parameters is not None:
        function["parameters"] = parameters
    return {"type": "function", "function": function}


# -- json: JSON objects (or Python dict literals) --------------------------------------------------------------------
_OBJECT_START = re.compile(r"""\{\s*["'](?:type|name|function)["']\s*:""")


def read_json(text: str) -> list[Tool]:
    """Every tool definition written as a JSON object (or a Python dict literal) in ``text``, in order."""
    found: list[Tool] = []
    end = 0
    for match in _OBJECT_START.finditer(text):
        if match.start() < end:
            continue
        value, stop = _object_at(text, match.start())
        declared = _as_tool(value)
        if declared is not None:
            found.append(declared)
            end = stop
    return found


def _object_at(text: str, start: int) -> tuple[Any, int]:
    try:
        return json.JSONDecoder().raw_decode(text, start)
    except ValueError:
        pass
    stop = _balanced_end(text, start)
    if stop is None:
        return None, start
    try:
        return ast.literal_eval(text[start:stop]), stop
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return None, start


def _balanced_end(text: str, start: int, limit: int = 1 << 20) -> int | None:
    """Where the brace opened at ``start`` closes, quotes (single or double, with backslash escapes) respected."""
    depth, quote, index, end = 0, "", start, min(len(text), start + limit)
    while index < end:
        char = text[index]
        if quote:
            if char == "\\":
                index += 1
            elif char == quote:
                quote = ""
        elif char in "'\"":
            quote = char
        elif char in "{[":
            depth += 1
        elif char in "}]":
            depth -= 1
            if depth == 0:
                return index + 1
        index += 1
    return None


def _as_tool(value: Any) -> Tool | None:
    """``value`` as a tools entry when it is a tool definition: a function with a name whose parameters (if any) are
    a schema (an object with ``type`` or ``properties``), never a call's arguments."""
    if not isinstance(value, dict):
        return None
    function = value.get("function") if value.get("type") == "function" else value
    if not isinstance(function, dict) or not isinstance(function.get("name"), str):
        return None
    parameters = function.get("parameters", function.get("input_schema"))
    if parameters is not None and not _is_schema(parameters):
        return None
    if parameters is None and "description" not in function:
        return None
    return tool(function["name"], str(function.get("description") or ""), parameters)


def _is_schema(value: Any) -> bool:
    return isinstance(value, dict) and (
        not value or isinstance(value.get("type"), (str, list)) or isinstance(value.get("properties"), dict)
    )


# -- typescript: harmony's namespace functions -----------------------------------------------------------------------
_NAMESPACE = re.compile(r"namespace functions \{\n(.*?)\n\} // namespace functions", re.DOTALL)
_TYPE_LINE = re.compile(r"^type ([A-Za-z_][\w.\-]*) = (\(\) => any;|\(_: \{)$")
_PARAM = re.compile(r"^([A-Za-z_$][\w$\-]*)(\??): (.*)$")


def read_typescript(text: str) -> list[Tool]:
    """Every function of harmony's ``namespace functions`` block in ``text``."""
    found: list[Tool] = []
    for block in _NAMESPACE.finditer(text):
        lines = block.group(1).split("\n")
        index, comments = 0, list[str]()
        while index < len(lines):
            line = lines[index]
            match = _TYPE_LINE.match(line)
            if match is None:  # a description: comment lines, and the raw lines of a description that spans lines
                comments = [*comments, line[3:] if line.startswith("// ") else line] if line.strip() else []
                index += 1
                continue
            description = "\n".join(comments)
            comments = []
            if match.group(2).startswith("()"):
                found.append(tool(match.group(1), description, None))
                index += 1
                continue
            index, parameters = _ts_parameters(lines, index + 1)
            found.append(tool(match.group(1), description, parameters))
    return found


def _ts_parameters(lines: list[str], index: int) -> tuple[int, dict[str, Any]]:
    """The parameters of one function (lines from ``index`` to its ``}) => any;``), as a JSON Schema object."""
    properties: dict[str, Any] = {}
    required: list[str] = []
    described = ""
    while index < len(lines) and lines[index] != "}) => any;":
        line = lines[index]
        index += 1
        if line.startswith("// "):
            described = line[3:]
            continue
        match = _PARAM.match(line)
        if match is None:
            continue
        source = match.group(3)
        while source.count("{") > source.count("}") and index < len(lines):  # a nested object spans lines
            source += "\n" + lines[index]
            index += 1
        value = _ts_type(_without_comment(source).rstrip().rstrip(","))
        if described:
            value["description"] = described
        described = ""
        properties[match.group(1)] = value
        if not match.group(2):
            required.append(match.group(1))
    schema: dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        schema["required"] = required
    return index + 1, schema


def _without_comment(source: str) -> str:
    at = source.find("//")
    return source[:at] if at >= 0 and source.count('"', 0, at) % 2 == 0 else source


def _ts_type(source: str) -> dict[str, Any]:
    """The schema of a TypeScript type as harmony's template writes one (``string``, ``number``, ``"a" | "b"``,
    ``string[]``, ``{a: string, b?: number}``, ``X | null``, ``any``)."""
    source = " ".join(source.split())
    parts = _split_top(source, "|")
    if len(parts) > 1:
        nullable = [p for p in parts if p == "null"]
        rest = [p for p in parts if p != "null"]
        if all(p.startswith('"') and p.endswith('"') for p in rest):
            return {"type": "string", "enum": [json.loads(p) for p in rest]}
        if len(rest) == 1:
            schema = _ts_type(rest[0])
            if nullable:
                schema["nullable"] = True
            return schema
        return {"anyOf": [_ts_type(p) for p in rest]}
    if source.endswith("[]"):
        return {"type": "array", "items": _ts_type(source[:-2])}
    if source.startswith('"') and source.endswith('"'):
        return {"type": "string", "enum": [json.loads(source)]}
    if source.startswith("{") and source.endswith("}"):
        return _ts_object(source[1:-1])
    return dict(_TS_SCALARS.get(source, {}))


_TS_SCALARS: dict[str, dict[str, Any]] = {
    "string": {"type": "string"},
    "number": {"type": "integer"},  # harmony writes integers and numbers alike: an integer is both
    "boolean": {"type": "boolean"},
    "object": {"type": "object"},
    "null": {"type": "null"},
}


def _ts_object(body: str) -> dict[str, Any]:
    properties: dict[str, Any] = {}
    required: list[str] = []
    for part in _split_top(" ".join(body.split()), ","):
        match = _PARAM.match(part)
        if match is None:
            continue
        properties[match.group(1)] = _ts_type(match.group(3))
        if not match.group(2):
            required.append(match.group(1))
    schema: dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        schema["required"] = required
    return schema


def _split_top(source: str, separator: str) -> list[str]:
    """``source`` split at ``separator`` outside braces, brackets and quotes."""
    parts, depth, quote, start = [], 0, False, 0
    for index, char in enumerate(source):
        if char == '"' and (index == 0 or source[index - 1] != "\\"):
            quote = not quote
        elif not quote and char in "{[(":
            depth += 1
        elif not quote and char in "}])":
            depth -= 1
        elif not quote and depth == 0 and char == separator:
            parts.append(source[start:index].strip())
            start = index + 1
    parts.append(source[start:].strip())
    return [p for p in parts if p]


# -- xml: Qwen3-Coder's <function><name>…</name><parameters>… --------------------------------------------------------
_XML_FUNCTION = re.compile(
    r"<function>\n<name>(.*?)</name>\n<description>(.*?)</description>\n<parameters>(.*?)\n</parameters>", re.DOTALL
)
_XML_PARAMETER = re.compile(r"<parameter>\n<name>(.*?)</name>(.*?)\n</parameter>", re.DOTALL)
_XML_FIELD = re.compile(r"\n<(\w+)>(.*?)</\1>", re.DOTALL)
_XML_REQUIRED = re.compile(r"\n<required>(\[.*?\])</required>$", re.DOTALL)


def read_xml(text: str) -> list[Tool]:
    """Every ``<function>`` of a ``<tools>`` block written as Qwen3-Coder's template writes it."""
    found: list[Tool] = []
    for match in _XML_FUNCTION.finditer(text):
        body = match.group(3)
        properties = {}
        for parameter in _XML_PARAMETER.finditer(body):
            schema: dict[str, Any] = {}
            for field in _XML_FIELD.finditer(parameter.group(2)):
                schema[field.group(1)] = _xml_field(field.group(1), field.group(2))
            properties[parameter.group(1)] = schema
        parameters: dict[str, Any] = {"type": "object", "properties": properties}
        required = _XML_REQUIRED.search(_XML_PARAMETER.sub("", body))
        if required:
            parameters["required"] = _xml_list(required.group(1))
        found.append(tool(match.group(1), match.group(2), parameters))
    return found


_PYTHON_LITERALS: dict[str, Any] = {"True": True, "False": False, "None": None}


def _xml_field(key: str, value: str) -> Any:
    if key in ("enum", "required"):
        return _xml_list(value)
    if value in _PYTHON_LITERALS:
        return _PYTHON_LITERALS[value]
    if key == "type" or value[:1] not in ("{", "["):
        return value
    try:
        return json.loads(value)
    except ValueError:
        return value


def _xml_list(source: str) -> list[Any]:
    """``[`a`, `b`, 3]`` (strings in backquotes, other items as Python writes them)."""
    items = []
    for part in _split_top(source.strip()[1:-1], ","):
        if part.startswith("`") and part.endswith("`"):
            items.append(part[1:-1])
        else:
            try:
                items.append(json.loads(part.lower() if part in ("True", "False", "None") else part))
            except ValueError:
                items.append(part)
    return items


# -- gemma: Gemma 4's declarations -----------------------------------------------------------------------------------
_DECLARATION = re.compile(r"<\|tool>declaration:([^{<]+)(\{.*?\})<tool\|>", re.DOTALL)
_GEMMA_TOKEN = re.compile(
    r'<\|"\|>(.*?)<\|"\|>|([A-Za-z_$][\w$\-]*)|(-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)|([{}\[\]:,])', re.S
)


def read_gemma(text: str) -> list[Tool]:
    """Every ``<|tool>declaration:…<tool|>`` of ``text``."""
    found: list[Tool] = []
    for match in _DECLARATION.finditer(text):
        value = _gemma_value(match.group(2))
        if not isinstance(value, dict):
            continue
        parameters = value.get("parameters")
        found.append(
            tool(
                match.group(1).strip(),
                str(value.get("description") or ""),
                _lower_types(parameters) if isinstance(parameters, dict) else None,
            )
        )
    return found


def _gemma_value(source: str) -> Any:
    """Gemma's declaration syntax as JSON: quoted strings, bare keys (a word before a colon), numbers, and bare
    ``true``/``false``/``null`` values."""
    tokens = [match.groups() for match in _GEMMA_TOKEN.finditer(source)]
    out: list[str] = []
    for index, (string, word, number, punctuation) in enumerate(tokens):
        if string is not None:
            out.append(json.dumps(string))
        elif word is not None:
            is_key = index + 1 < len(tokens) and tokens[index + 1][3] == ":"
            out.append(word if not is_key and word in ("true", "false", "null") else json.dumps(word))
        elif number is not None:
            out.append(number)
        else:
            out.append(punctuation)
    try:
        return json.loads("".join(out))
    except ValueError:
        return None


def _lower_types(schema: Any) -> Any:
    """Gemma writes types in capitals (``STRING``): JSON Schema's are lower case."""
    if isinstance(schema, list):
        return [_lower_types(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key == "type" and isinstance(value, str):
            out[key] = value.lower()
        elif key == "type" and isinstance(value, list):
            out[key] = [str(v).lower() for v in value]
        elif key == "properties" and isinstance(value, dict):
            out[key] = {name: _lower_types(sub) for name, sub in value.items()}
        else:
            out[key] = _lower_types(value)
    return out


READERS: tuple[ToolReader, ...] = (
    ToolReader("json", read_json),
    ToolReader("typescript", read_typescript),
    ToolReader("xml", read_xml),
    ToolReader("gemma", read_gemma),
)

_PROBE_PROPERTIES = {"query": {"type": "string", "description": "what to look up"}, "limit": {"type": "integer"}}
PROBE_TOOLS: list[Tool] = [
    tool(
        "probe_lookup_qzxv",
        "Look a value up.",
        {"type": "object", "properties": _PROBE_PROPERTIES, "required": ["query"]},
    ),
    tool("probe_list_qzxv", "List things.", {"type": "object", "properties": {"path": {"type": "string"}}}),
]


def learn_reader(rendered: str | None) -> ToolReader | None:
    """The reader that finds :data:`PROBE_TOOLS` (their names and properties) in ``rendered``, the template's prompt
    declaring them; None when no reader does (the template writes no tools, or in a layout none reads)."""
    if rendered is None:
        return None
    for reader in READERS:
        read = reader.read(rendered)
        if [_outline(t) for t in read] == [_outline(t) for t in PROBE_TOOLS]:
            return reader
    return None


def _outline(declared: Tool) -> tuple[str, tuple[str, ...]]:
    function = declared["function"]
    properties = (function.get("parameters") or {}).get("properties") or {}
    return function["name"], tuple(sorted(properties))
