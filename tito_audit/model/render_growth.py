"""How long a template operation's result would be, found before the operation makes it: one function per operation
that can make a string or a list much longer than its operands (repeated, replaced, padded, joined, formatted,
serialized, concatenated). The render guard checks the length against the render's bounds first and refuses the
operation past them; what the functions return is the result's length in characters (items, for a list), exact
where it is cheap to know and otherwise an upper estimate.

An estimate never raises: operands a function does not understand give None (the operation then raises its own error,
or is one that cannot grow).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from itertools import chain

from tito_audit.model.boundary_types import TemplateValue
from tito_audit.model.render_sizes import json_length, measure, text_length

Estimate = Callable[..., int | None]

_PERCENT_FIELD = re.compile(r"%(?:\([^)]*\))?[-#0 +]*(\*|\d*)(?:\.(\*|\d*))?")
_FORMAT_NUMBERS = re.compile(r"\d+")


def _is_int(value: TemplateValue) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _count(text: str, part: str) -> int:
    return len(text) + 1 if not part else text.count(part)


# -- operators ---------------------------------------------------------------------------------------------------


def repeat(sequence: TemplateValue, times: TemplateValue) -> int | None:
    """``sequence * times`` (a string or a list repeated)."""
    if isinstance(sequence, str | list | tuple) and _is_int(times):
        return len(sequence) * max(times, 0)
    return None


def plus(left: TemplateValue, right: TemplateValue) -> int | None:
    """``left + right`` of two strings, lists or tuples."""
    if isinstance(left, str) and isinstance(right, str):
        return len(left) + len(right)
    if isinstance(left, list | tuple) and isinstance(right, list | tuple):
        return len(left) + len(right)
    return None


def percent(template: TemplateValue, values: TemplateValue) -> int | None:
    """``template % values``: the template's own text, every value's text, and every field's width and precision
    (those written and those a ``*`` takes from the values)."""
    if not isinstance(template, str):
        return None
    items = values if isinstance(values, tuple) else (values,)
    total = len(template)
    for width, precision in _PERCENT_FIELD.findall(template):
        for number in (width, precision):
            if number.isdigit():
                total += int(number)
    if "*" in template:
        total += sum(max(item, 0) for item in items if _is_int(item))
    if isinstance(values, dict):
        return total + sum(text_length(value) for value in values.values())
    return total + sum(text_length(item) for item in items)


def concatenation(parts: Iterable[TemplateValue]) -> int:
    """``a ~ b ~ c``: the text of every part."""
    return sum(text_length(part) for part in parts)


def format_field(value: TemplateValue, spec: str) -> int:
    """One field of ``str.format``: the value's text padded to the spec's width (its largest number)."""
    numbers = [int(number) for number in _FORMAT_NUMBERS.findall(spec)] if spec else []
    return text_length(value) + (max(numbers) if numbers else 0)


# -- str methods (called through the sandbox) --------------------------------------------------------------------


def _replace(
    text: str, old: TemplateValue = None, new: TemplateValue = None, count: TemplateValue = -1, *_: TemplateValue
) -> int | None:
    if not isinstance(old, str) or not isinstance(new, str):
        return None
    found = _count(text, old)
    if _is_int(count) and count >= 0:
        found = min(found, count)
    return len(text) + found * (len(new) - len(old))


def _pad(text: str, width: TemplateValue = 0, *_: TemplateValue) -> int | None:
    return max(len(text), width) if _is_int(width) else None


def _expandtabs(text: str, tabsize: TemplateValue = 8) -> int | None:
    return len(text) + text.count("\t") * max(tabsize, 0) if _is_int(tabsize) else None


def _join(separator: str, items: TemplateValue = (), *_: TemplateValue) -> int | None:
    if not isinstance(items, list | tuple):
        return None
    return len(separator) * max(len(items) - 1, 0) + sum(len(item) for item in items if isinstance(item, str))


def _translate(text: str, table: TemplateValue = None) -> int | None:
    if not isinstance(table, dict):
        return None
    longest = max((len(value) for value in table.values() if isinstance(value, str)), default=1)
    return len(text) * max(longest, 1)


STR_METHODS: dict[str, Estimate] = {
    "replace": _replace,
    "center": _pad,
    "ljust": _pad,
    "rjust": _pad,
    "zfill": _pad,
    "expandtabs": _expandtabs,
    "join": _join,
    "translate": _translate,
}
"""The ``str`` methods whose result can be longer than the string: the result's length from the string and the
call's arguments (``join``'s iterable made a list first: see :data:`MATERIALIZED`)."""


# -- filters -----------------------------------------------------------------------------------------------------


def _center(value: TemplateValue, width: TemplateValue = 80, *_: TemplateValue) -> int | None:
    return max(text_length(value), width) if _is_int(width) else None


def _indent(value: TemplateValue, width: TemplateValue = 4, *_: TemplateValue, **__: TemplateValue) -> int | None:
    if isinstance(width, str):
        pad = len(width)
    elif _is_int(width):
        pad = max(width, 0)
    else:
        return None
    text = str(value) if isinstance(value, str) else None
    length = text_length(value)
    lines = (text.count("\n") if text is not None else length) + 1
    return length + lines * pad


def _join_filter(items: TemplateValue, d: TemplateValue = "", *_: TemplateValue) -> int:
    return text_length(d) * max(len(items) - 1, 0) + sum(text_length(item) for item in items)


def _format_filter(value: TemplateValue, *args: TemplateValue, **kwargs: TemplateValue) -> int | None:
    return percent(value if isinstance(value, str) else str(value), kwargs or args)


def _replace_filter(
    value: TemplateValue, old: TemplateValue = "", new: TemplateValue = "", count: TemplateValue = None
) -> int | None:
    length = text_length(value)
    old_text, new_text = str(old), str(new)
    found = _count(value, old_text) if isinstance(value, str) else length + 1
    if _is_int(count) and count >= 0:
        found = min(found, count)
    return length + found * max(len(new_text) - len(old_text), 0)


def _wordwrap(
    value: TemplateValue,
    width: TemplateValue = 79,
    break_long_words: TemplateValue = True,
    wrapstring: TemplateValue = None,
    *_: TemplateValue,
) -> int:
    length = text_length(value)
    return length + (length + 1) * (len(wrapstring) if isinstance(wrapstring, str) else 2)


def _string(value: TemplateValue) -> int:
    return text_length(value)


def _tojson(
    value: TemplateValue,
    ensure_ascii: TemplateValue = False,
    indent: TemplateValue = None,
    separators: TemplateValue = None,
    sort_keys: TemplateValue = False,
) -> int:
    return json_length(value, indent, separators, bool(ensure_ascii))


def _pprint(value: TemplateValue) -> int:
    shape = measure(value)
    return shape.text + shape.lines + 64 * shape.depths  # pformat indents nested items by their opening column


def _escaped(value: TemplateValue, *_: TemplateValue, **__: TemplateValue) -> int:
    return 6 * text_length(value)  # an HTML entity for a character is at most six


def _urlencode(value: TemplateValue) -> int:
    return 12 * text_length(value)  # a character is at most four bytes of UTF-8, each written as %XX


def _urlize(value: TemplateValue, *args: TemplateValue, **kwargs: TemplateValue) -> int:
    extra = sum(text_length(part) for part in chain(args, kwargs.values()) if isinstance(part, str))
    length = text_length(value)
    return 12 * length + (length // 2 + 1) * (64 + extra)


def _batch(value: TemplateValue, linecount: TemplateValue = 1, fill_with: TemplateValue = None) -> int | None:
    return max(linecount, 0) if _is_int(linecount) and fill_with is not None else None


def _slice(value: TemplateValue, slices: TemplateValue = 1, fill_with: TemplateValue = None) -> int | None:
    return max(slices, 0) if _is_int(slices) else None


def _sum(items: TemplateValue, attribute: TemplateValue = None, start: TemplateValue = 0) -> int | None:
    if isinstance(start, list | tuple) or any(isinstance(item, list | tuple) for item in items):
        return (len(start) if isinstance(start, list | tuple) else 0) + sum(
            len(item) for item in items if isinstance(item, list | tuple)
        )
    return None


FILTERS: dict[str, Estimate] = {
    "center": _center,
    "indent": _indent,
    "join": _join_filter,
    "format": _format_filter,
    "replace": _replace_filter,
    "wordwrap": _wordwrap,
    "string": _string,
    "tojson": _tojson,
    "pprint": _pprint,
    "e": _escaped,
    "escape": _escaped,
    "forceescape": _escaped,
    "xmlattr": _escaped,
    "urlencode": _urlencode,
    "urlize": _urlize,
    "batch": _batch,
    "slice": _slice,
    "sum": _sum,
}
"""The filters whose result can be much longer than their operand: the result's length (characters, or items for a
list) from the filter's arguments as the template passes them."""

MATERIALIZED = frozenset({"join", "sum"})
"""Filters whose iterable is made a list before the estimate (so that a generator is read once): the filter then
reads the list (the items' ``attribute=`` already read, when it is given)."""


def linear_sum(items: list[TemplateValue], start: list) -> list:
    """``sum(items, start)`` of lists, in linear time (``sum`` copies the growing list once per item)."""
    return list(chain(start, *items))
