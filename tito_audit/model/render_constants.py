"""Constant expressions a template would make Jinja compute while it compiles, checked first.

Jinja folds constant expressions when it compiles a template (``{{ 'ab' * 1000000000 }}``, ``{{ 'a' | center(10 **
9) }}``, ``{{ [['a' * 9999] * 9999] * 9999 }}`` written out), before any render budget is set, and transformers
compiles each template once with plain Jinja before the guard recompiles it. :func:`check_constants` walks the parsed
template bottom-up and, for every operation that can grow, computes its constant operands as Jinja would and checks
the result's length with the guard's own estimates (:mod:`tito_audit.model.render_growth`) before Jinja may make
it: one budget for the whole template, since every folded constant is kept in the compiled code.
"""

from __future__ import annotations

import functools
import math
from typing import TYPE_CHECKING, Any

from tito_audit.errors import TemplateTimeoutError
from tito_audit.model.boundary_types import TemplateValue
from tito_audit.model.render_budget import Budget, RenderLimits, RenderTooLong
from tito_audit.model.render_filters import STRINGIFIED
from tito_audit.model.render_growth import FILTERS, MATERIALIZED, concatenation
from tito_audit.model.render_guard import bounded_binop, fresh_template
from tito_audit.model.render_sizes import text_length

if TYPE_CHECKING:
    from jinja2 import Environment, nodes


def check_constants(environment: Environment, source: str, max_chars: int, max_bytes: int = 0) -> None:
    """Refuse (:class:`~tito_audit.model.render_budget.RenderTooLong`) a constant expression in ``source`` whose
    value would pass ``max_chars`` (or whose values in all would pass ``max_bytes``). ``environment`` parses and
    folds as transformers' does (any environment with the template's extensions and filters); a template that does
    not parse is left to the compiler to report."""
    from jinja2 import nodes
    from jinja2.exceptions import TemplateSyntaxError

    try:
        tree = environment.parse(source)
    except (TemplateSyntaxError, RecursionError):
        return
    budget = Budget(math.inf, 0, max_chars or math.inf, max_bytes or math.inf)
    context = nodes.EvalContext(environment)
    try:
        for node in _bottom_up(tree):
            _check(node, budget, context)
    except RecursionError:
        return  # nested past Python's stack: the compiler reports it


def _bottom_up(tree: nodes.Node) -> list[Any]:
    """Every node of ``tree``, each after the nodes below it (without recursion)."""
    order: list[Any] = []
    stack = [tree]
    while stack:
        node = stack.pop()
        order.append(node)
        stack.extend(node.iter_child_nodes())
    order.reverse()
    return order


def _check(node: nodes.Node, budget: Budget, context: nodes.EvalContext) -> None:
    from jinja2 import nodes

    if isinstance(node, nodes.Output):
        for child in node.nodes:
            if not isinstance(child, nodes.TemplateData):
                value = _constant(child, context)
                if value is not _NOT_CONSTANT:
                    budget.check(text_length(value), "a constant written")
        return
    if isinstance(node, nodes.Pow | nodes.Mul | nodes.Mod | nodes.Add):
        left, right = _constant(node.left, context), _constant(node.right, context)
        if left is not _NOT_CONSTANT and right is not _NOT_CONSTANT:
            try:
                bounded_binop(node.operator, left, right, budget)
            except RenderTooLong:
                raise
            except Exception:
                return
        return
    if isinstance(node, nodes.Concat):
        parts = [_constant(part, context) for part in node.nodes]
        if all(part is not _NOT_CONSTANT for part in parts):
            budget.check(concatenation(parts), "a constant ~ concatenation")
        return
    if isinstance(node, nodes.Filter) and node.name in FILTERS and node.node is not None:
        _check_filter(node, budget, context)


def _check_filter(node: nodes.Filter, budget: Budget, context: nodes.EvalContext) -> None:
    from jinja2 import nodes

    if node.node is None:  # a filter block, not an expression's filter (the caller passes none)
        return
    value = _constant(node.node, context)
    if value is _NOT_CONSTANT or node.dyn_args is not None or node.dyn_kwargs is not None:
        return
    args = [_constant(arg, context) for arg in node.args]
    keywords: list[nodes.Node] = list(node.kwargs)  # Keyword nodes (jinja2 annotates them as Pair)
    kwargs = {pair.key: _constant(pair.value, context) for pair in keywords if isinstance(pair, nodes.Keyword)}
    if any(arg is _NOT_CONSTANT for arg in [*args, *kwargs.values()]):
        return
    if node.name in MATERIALIZED and not isinstance(value, list | tuple):
        try:
            value = list(value)
        except TypeError:
            return
    if node.name in STRINGIFIED and not isinstance(value, str):
        budget.check(text_length(value), f"the {node.name} filter's constant operand")
        value = str(value)
    try:
        length = FILTERS[node.name](value, *args, **kwargs)
    except (TypeError, ValueError, AttributeError, LookupError):
        return
    budget.check(length, f"the {node.name} filter on constants")
    budget.built += length or 0


_NOT_CONSTANT = object()


def _constant(node: nodes.Expr, context: nodes.EvalContext) -> TemplateValue:
    from jinja2.nodes import Impossible

    try:
        return node.as_const(context)
    except Impossible:
        return _NOT_CONSTANT


def refuse_constants(template_source: str, limits: RenderLimits | None = None) -> None:
    """Raise :class:`TemplateTimeoutError` when a constant expression of ``template_source`` is too big to compute
    under ``limits``: before anything that compiles the template with plain Jinja (which computes them; Jinja's
    ``meta`` does too) gets to it."""
    limits = limits or RenderLimits()
    refusal = constant_refusal(template_source, limits.max_chars, limits.max_bytes)
    if refusal is not None:
        raise TemplateTimeoutError(f"{refusal[1]}: the template is refused")


@functools.lru_cache(maxsize=256)
def constant_refusal(template_source: str, max_chars: int, max_bytes: int) -> tuple[type, str] | None:
    """Why the constants of ``template_source`` are refused (the exception's class and message), or None (parsed
    once per template and bounds)."""
    try:
        check_constants(fresh_template("").environment, template_source, max_chars, max_bytes)
    except RenderTooLong as exc:
        return type(exc), str(exc)
    return None
