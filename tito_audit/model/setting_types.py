"""The type a template reads a keyword argument as, from its Jinja AST: what values a settings sweep may pass.

A template reads its own settings in three ways, often through a local it sets first
(``{% set rs = reasoning_strength if reasoning_strength else 'high' %}``):

- **concatenated with text** (``'Reasoning strength: ' + rs``): a string; a boolean there raises (``TypeError: can
  only concatenate str``), so the sweep passes the strings the template names for it: those it is compared with and
  the literal it falls back to (``'high'``);
- **compared with constants** (``effort == 'low'``, ``effort in ('low', 'high')``, ``budget > 0``): those constants
  (and, for an ordered comparison with a number, one past it, so that both sides of the test are audited); an
  integer the template gives a default of its own is swept at that default and its neighbours among the integers
  the template names (:func:`integer_neighbours`), never one past a threshold;
- **tested for truth** only: booleans (:mod:`tito_audit.model.variants`).

>>> from jinja2 import Environment
>>> ast = Environment().parse(
...     "{% set rs = strength if strength is defined and strength else 'high' %}{{ 'Strength: ' + rs }}")
>>> aliases = value_aliases(ast)
>>> sorted(aliases["rs"]), sorted(concatenated_names(ast, aliases)), literal_alternatives(ast, aliases)["strength"]
(['strength'], ['rs', 'strength'], {'high'})
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TypeGuard

from jinja2 import nodes

PASSING_FILTERS = frozenset({"default", "d", "trim", "lower", "upper", "string", "title", "capitalize"})
"""Filters whose result is their input's value (or its text): a local set through one still holds the setting."""
_STRING_FILTERS = frozenset({"string", "trim", "lower", "upper", "title", "capitalize", "join", "tojson", "replace"})
_ORDERED = frozenset({"lt", "gt", "lteq", "gteq"})


def _yielded(expr: nodes.Node) -> set[str]:
    """The names whose value ``expr`` may evaluate to: a name, either branch of ``a if t else b``, either side of
    ``a or b`` / ``a and b`` (Jinja returns an operand), a name through a filter that passes it on."""
    if isinstance(expr, nodes.Name):
        return {expr.name}
    if isinstance(expr, nodes.CondExpr):
        return _yielded(expr.expr1) | (_yielded(expr.expr2) if expr.expr2 is not None else set())
    if isinstance(expr, (nodes.Or, nodes.And)):
        return _yielded(expr.left) | _yielded(expr.right)
    if isinstance(expr, nodes.Filter) and expr.name in PASSING_FILTERS and expr.node is not None:
        return _yielded(expr.node)
    return set()


def value_aliases(ast: nodes.Template, inputs: Iterable[str] | None = None) -> dict[str, set[str]]:
    """Each name set from others' values (``{% set rs = reasoning_strength | default('high') %}``) -> the names it
    may hold the value of, followed through chains of such sets; a name set from itself maps to itself.

    With ``inputs``, only those names are followed (the template's own settings: what the callers read): one walk
    back from each, through the names set from it, so the cost grows with the template's length times the number of
    inputs, not with the square of a chain's length (a chain of 2,000 ``{% set aN = aN-1 %}`` took 101 s as a
    fixpoint over every name)."""
    holders: dict[str, set[str]] = {}
    """name -> the names set from its value (the edges walked back from each input)."""
    resolved: dict[str, set[str]] = {}
    for node in ast.find_all(nodes.Assign):
        if isinstance(node.target, nodes.Name):
            resolved.setdefault(node.target.name, set())
            for source in _yielded(node.node):
                holders.setdefault(source, set()).add(node.target.name)
    for source in holders if inputs is None else inputs:
        stack, seen = list(holders.get(source, ())), set()
        while stack:
            name = stack.pop()
            if name in seen:
                continue
            seen.add(name)
            resolved[name].add(source)
            stack.extend(holders.get(name, ()))
    return resolved


def sources_of(expr: nodes.Node, aliases: dict[str, set[str]]) -> set[str]:
    """The names (inputs among them) whose value ``expr`` may hold, through locals set from them."""
    found: set[str] = set()
    for name in _yielded(expr):
        found |= {name} | aliases.get(name, set())
    return found


def _stringy(node: nodes.Node) -> bool:
    """Whether ``node`` is text: a string constant, a concatenation with one, a filter that makes text."""
    if isinstance(node, nodes.Const):
        return isinstance(node.value, str)
    if isinstance(node, nodes.Add):
        return _stringy(node.left) or _stringy(node.right)
    if isinstance(node, nodes.Concat):
        return True
    return isinstance(node, nodes.Filter) and node.name in _STRING_FILTERS


def concatenated_names(ast: nodes.Template, aliases: dict[str, set[str]]) -> set[str]:
    """Names added (``+``) to text, directly or through a local set from them: the template reads them as
    strings (``~`` and printing convert any value; ``+`` does not)."""
    names: set[str] = set()
    for node in ast.find_all(nodes.Add):
        for operand, other in ((node.left, node.right), (node.right, node.left)):
            if _stringy(other):
                names |= sources_of(operand, aliases)
    return names


def literal_alternatives(ast: nodes.Template, aliases: dict[str, set[str]]) -> dict[str, set[object]]:
    """Per name, the constants the template falls back to in its place: ``x if x else 'high'``,
    ``x | default('high')``, ``x or 'high'``, ``{% set x = 'high' %}`` (its documented default)."""
    found: dict[str, set[object]] = {}

    def note(names: Iterable[str], constant: nodes.Node | None) -> None:
        if isinstance(constant, nodes.Const) and isinstance(constant.value, (str, int, float)):
            for name in names:
                found.setdefault(name, set()).add(constant.value)

    for cond in ast.find_all(nodes.CondExpr):
        note(sources_of(cond.expr1, aliases), cond.expr2)
        if cond.expr2 is not None:
            note(sources_of(cond.expr2, aliases), cond.expr1)
    for either in ast.find_all(nodes.Or):
        note(sources_of(either.left, aliases), either.right)
    for filtered in ast.find_all(nodes.Filter):
        if filtered.name in {"default", "d"} and filtered.node is not None and filtered.args:
            note(sources_of(filtered.node, aliases), filtered.args[0])
    for assign in ast.find_all(nodes.Assign):
        if isinstance(assign.target, nodes.Name):
            note({assign.target.name}, assign.node)
    return found


def compared_constants(
    node: nodes.Compare, aliases: dict[str, set[str]], one_past: bool = True
) -> dict[str, set[object]]:
    """The constants each name (through its aliases) is compared with in ``node``: ``==``/``!=`` a constant,
    ``in``/``not in`` a list of constants, ``<``/``>``/``<=``/``>=`` a number (that number, and with ``one_past``
    one past it, so that both sides of the test are audited)."""
    found: dict[str, set[object]] = {}
    left = node.expr
    for op in node.ops:
        right = op.expr
        pairs = ((left, right), (right, left))
        for subject, constant in pairs:
            names = sources_of(subject, aliases)
            if not names:
                continue
            values: set[object] = set()
            if op.op in {"eq", "ne"} and isinstance(constant, nodes.Const):
                values = {constant.value} if isinstance(constant.value, (str, int, float, bool)) else set()
            elif op.op in {"in", "notin"} and subject is left and isinstance(constant, (nodes.List, nodes.Tuple)):
                values = {i.value for i in constant.items if isinstance(i, nodes.Const) and isinstance(i.value, str)}
            elif op.op in {"in", "notin"} and subject is left and isinstance(constant, nodes.Const):
                items = constant.value if isinstance(constant.value, (tuple, list)) else ()
                values = {item for item in items if isinstance(item, str)}
            elif op.op in _ORDERED and _is_number(constant):
                value = constant.value
                values = {value, value + 1} if one_past else {value}
            for name in names:
                found.setdefault(name, set()).update(values)
        left = right
    return found


def integer_neighbours(defaults: set[int], named: set[int]) -> set[int]:
    """An integer setting's values to sweep: the template's own defaults and their neighbours among the integers the
    template names for it (its defaults and the constants it compares it with), never a value it does not name (a
    limit one past its threshold, ``max_tool_response_chars=1``, that cuts every tool result to one character).

    >>> sorted(integer_neighbours({4}, {0, 4})), sorted(integer_neighbours({0}, {0}))
    ([0, 4], [0])
    >>> sorted(integer_neighbours({4096}, {0, 512, 1024, 4096, 8192}))
    [1024, 4096, 8192]
    """
    ordered = sorted(defaults | named)
    found = set()
    for default in defaults:
        at = ordered.index(default)
        found.update(ordered[max(at - 1, 0) : at + 2])
    return found


def _is_number(node: nodes.Node) -> TypeGuard[nodes.Const]:
    return isinstance(node, nodes.Const) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool)
