"""How long a value's text would be, found before the text is made.

A template can build a small value whose text is enormous: ``[[a] * 1000] * 1000`` is two lists of a thousand
references, and ``str()`` or ``tojson`` of it writes a million copies of ``a``. The render guard asks these functions
first. They walk the value once, each distinct list, dict or namespace once (a value that is shared is measured once
and counted every time it appears), without recursion, and give the length ``str(value)``, ``repr`` or
``json.dumps`` would give (exact for the types a template holds: strings, numbers, lists, tuples, dicts, namespaces;
an upper estimate where a serializer's escapes are not counted one by one).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import NamedTuple

from jinja2.utils import Namespace

from tito_audit.model.boundary_types import TemplateValue

CHUNK = 1 << 16
"""Characters of a long string escaped at a time to count its escaped length (a bounded temporary)."""


class InputDict(dict):
    """A dict of a render's input (a message, a tool, a setting), as :func:`as_input` marks it."""

    __slots__ = ("measured",)


class InputList(list):
    """A list of a render's input, as :func:`as_input` marks it."""

    __slots__ = ("measured",)


for _marked, _plain in ((InputDict, dict), (InputList, list)):
    # named as the plain type: what a template's error says of a value ("'dict object' has no attribute 'x'", in
    # reports) reads as it did before the mark
    _marked.__name__ = _marked.__qualname__ = _plain.__name__
    _marked.__module__ = "builtins"

INPUT_TYPES = (InputDict, InputList)
_PAIR = (list, tuple)


def as_input(value: TemplateValue) -> TemplateValue:
    """``value`` (plain JSON data, as transformers hands a template its messages and tools) with its dicts and lists
    marked as a render's input: each keeps its :class:`Measure` once measured, so that a tool written with
    ``tojson`` in every render of a conversation is measured once, not once per render (measuring it would cost more
    than writing it). Nothing changes an input once marked: the sandbox refuses a template the methods that change a
    list or dict, and what a template's operations make of one (``+``, ``*``, a slice, ``dict(...)``) is a plain
    list or dict."""
    if not isinstance(value, dict | list):
        return value
    root = InputDict(value) if isinstance(value, dict) else InputList(value)
    stack: list[InputDict | InputList] = [root]
    while stack:
        container = stack.pop()
        keys = container.keys() if isinstance(container, dict) else range(len(container))
        for key in list(keys):
            item = container[key]
            if isinstance(item, dict | list) and not isinstance(item, INPUT_TYPES):
                marked = InputDict(item) if isinstance(item, dict) else InputList(item)
                dict.__setitem__(container, key, marked) if isinstance(container, dict) else list.__setitem__(
                    container, key, marked
                )
                stack.append(marked)
    return root


class Measure(NamedTuple):
    """What the text of one value costs: its ``repr`` and its compact JSON, and what indentation adds."""

    text: int
    """``len(repr(value))`` (a container's ``str`` is its ``repr``)."""
    json: int
    """``len(json.dumps(value, ensure_ascii=False))`` with the default separators ``', '`` and ``': '``."""
    separators: int
    """Item separators in the JSON (one less than the items of each non-empty list or dict)."""
    pairs: int
    """Key separators in the JSON (the entries of every dict)."""
    lines: int
    """Lines ``json.dumps(value, indent=...)`` starts (each with a newline and its indentation)."""
    depths: int
    """The sum of those lines' depths (indentation written: ``indent`` times this)."""
    wide: int
    """Characters of non-ASCII strings (``ensure_ascii=True`` writes each as up to twelve)."""


_LEAF_NONE = Measure(4, 4, 0, 0, 0, 0, 0)


def text_length(value: TemplateValue) -> int:
    """``len(str(value))``, without making it."""
    if isinstance(value, str):
        return len(value)
    return measure(value).text


def json_length(
    value: TemplateValue, indent: TemplateValue = None, separators: TemplateValue = None, ensure_ascii: bool = False
) -> int:
    """``len(json.dumps(value, indent=indent, separators=separators, ensure_ascii=ensure_ascii))``, without making
    it (an upper estimate where a separator or an indentation is not what ``json`` accepts: it then raises)."""
    if type(value) is str:  # exact when nothing is escaped, else at most six characters a character (\u00XX)
        plain = value.isascii() and value.isprintable() and "\\" not in value and '"' not in value
        return len(value) + 2 if plain else (12 if ensure_ascii else 6) * len(value) + 2
    shape = measure(value)
    if indent is None:
        indent_chars = -1
    elif type(indent) is int:
        indent_chars = max(indent, 0)
    else:
        indent_chars = len(indent) if type(indent) is str else -1
    total = shape.json
    if indent_chars >= 0:
        total -= shape.separators  # "," rather than ", " between items
    if separators is not None and type(separators) in _PAIR and len(separators) == 2:
        item, key = (str(separators[0]), str(separators[1]))
        total = shape.json + shape.separators * (len(item) - 2) + shape.pairs * (len(key) - 2)
    if indent_chars >= 0:
        total += shape.lines + indent_chars * shape.depths
    if ensure_ascii:
        total += 11 * shape.wide
    return total


def measure(value: TemplateValue) -> Measure:
    """The :class:`Measure` of ``value``: a walk in which each distinct container is measured once (an input's kept
    from the first time: see :func:`as_input`)."""
    if type(value) in INPUT_TYPES:
        kept = getattr(value, "measured", None)
        if kept is not None:
            return kept
    known: dict[int, Measure] = {}
    opened: set[int] = set()
    stack: list[tuple[TemplateValue, bool]] = [(value, False)]
    while stack:
        item, children_done = stack.pop()
        key = id(item)
        if not children_done and key in known:
            continue
        if type(item) in INPUT_TYPES:
            kept = getattr(item, "measured", None)
            if kept is not None:
                known[key] = kept
                continue
        children = _children(item)
        if children is None:
            known[key] = _leaf(item)
            continue
        if not children_done:
            if key in opened:  # a namespace that holds itself: repr writes "..." there, json refuses
                known[key] = Measure(5, 0, 0, 0, 0, 0, 0)
                continue
            opened.add(key)
            stack.append((item, True))
            stack.extend((child, False) for child in children if id(child) not in known)
            continue
        opened.discard(key)
        known[key] = _container(item, children, known)
        if type(item) in INPUT_TYPES:
            item.measured = known[key]
    return known[id(value)]


def _children(item: TemplateValue) -> list[TemplateValue] | None:
    kind = type(item)
    if kind is list or kind is tuple or isinstance(item, list | tuple | set | frozenset):
        return list(item)
    if isinstance(item, dict):
        return [part for pair in item.items() for part in pair]
    attrs = _namespace_attrs(item)
    if attrs is not None:
        return [attrs]
    return None


def _namespace_attrs(item: TemplateValue) -> dict | None:
    if isinstance(item, Namespace):
        attrs = item.__dict__.get("_Namespace__attrs")
        return attrs if isinstance(attrs, dict) else None
    return None


def _container(item: TemplateValue, children: list[TemplateValue], known: dict[int, Measure]) -> Measure:
    parts = [known.get(id(child), _LEAF_NONE) for child in children]
    if _namespace_attrs(item) is not None:  # "<Namespace {...}>"; json refuses a namespace
        inner = parts[0]
        return Measure(inner.text + 12, 0, 0, 0, 0, 0, inner.wide)
    count = len(parts)
    is_dict = isinstance(item, dict)
    entries = count // 2 if is_dict else count
    text = sum(part.text for part in parts) + 2 + 2 * max(entries - 1, 0) + (2 * entries if is_dict else 0)
    if type(item) is tuple and count == 1:
        text += 1  # "(x,)"
    json_text = sum(part.json for part in parts) + 2 + 2 * max(entries - 1, 0) + (2 * entries if is_dict else 0)
    nested_lines = sum(part.lines for part in parts)
    nested_depths = sum(part.depths for part in parts)
    # with indent: each entry starts a line one deeper, and the closing bracket a line at this depth
    lines = entries + 1 + nested_lines if entries else 0
    depths = entries + nested_lines + nested_depths if entries else 0
    return Measure(
        text=text,
        json=json_text,
        separators=max(entries - 1, 0) + sum(part.separators for part in parts),
        pairs=(entries if is_dict else 0) + sum(part.pairs for part in parts),
        lines=lines,
        depths=depths,
        wide=sum(part.wide for part in parts),
    )


def _leaf(item: TemplateValue) -> Measure:
    if isinstance(item, str):
        wide = 0 if item.isascii() else len(item)
        return Measure(_escaped_length(item, repr), _escaped_length(item, _json_string), 0, 0, 0, 0, wide)
    if item is None or isinstance(item, bool):  # None, True, False as long as null, true, false
        text = len(repr(item))
        return Measure(text, text, 0, 0, 0, 0, 0)
    if isinstance(item, int):
        bits = item.bit_length()
        text = len(repr(item)) if bits < 4096 else bits * 30103 // 100000 + 2
        return Measure(text, text, 0, 0, 0, 0, 0)
    if isinstance(item, float):
        text = len(repr(item))
        return Measure(text, text, 0, 0, 0, 0, 0)
    return Measure(100, 100, 0, 0, 0, 0, 0)  # a macro, a loop, an undefined value: a short repr


def _json_string(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)


def _escaped_length(text: str, escape: Callable[[str], str]) -> int:
    """``len(escape(text))`` (``repr`` or JSON's quoting), counted a chunk at a time for a long string."""
    if len(text) <= CHUNK:
        if text.isascii() and text.isprintable() and "\\" not in text and '"' not in text and "'" not in text:
            return len(text) + 2
        return len(escape(text))
    return 2 + sum(len(escape(text[start : start + CHUNK])) - 2 for start in range(0, len(text), CHUNK))
