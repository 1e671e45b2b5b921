"""The sandbox's filters and ``str.format`` with their results' lengths checked before they are made.

:func:`bounded_filters` wraps every filter of a template's environment: under a render budget
(:mod:`tito_audit.model.render_budget`) a filter that can grow (:data:`~tito_audit.model.render_growth.FILTERS`) is
refused when its result would pass the budget's bounds, and every string or list a filter returns is counted against
the bytes the render may build. The wrappers take the template's context (``pass_context``), which also keeps Jinja
from calling them while it compiles (it folds only filters that take no context): a constant filter expression runs
at render time, under the budget, not at compile time where nothing bounds it. Without a budget (a trainer's own
``apply_chat_template`` on a guarded template) a filter runs as it would unguarded.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from functools import update_wrapper
from types import MethodType
from typing import TYPE_CHECKING, Any

from tito_audit.model.boundary_types import TemplateValue
from tito_audit.model.render_budget import current
from tito_audit.model.render_growth import FILTERS, MATERIALIZED, format_field, linear_sum

if TYPE_CHECKING:
    from jinja2 import Environment
    from jinja2.runtime import Context

STRINGIFIED = frozenset({"center", "indent", "format", "replace", "wordwrap", "urlize"})
"""Filters that make their operand a string first: the string is made under the budget before the estimate reads
it."""

_BUILTIN_METHOD = type("".join)
_getsizeof = sys.getsizeof
_SHORT = 4096
"""A result this short is made before its length is checked against ``max_chars`` (its bytes still are)."""
_FORMATS = ("format", "format_map")

ATTRIBUTE_AT = {"join": 1, "sum": 0}
"""Filters that read ``attribute=`` of each item, and where it is among their positional arguments: the items'
attributes are read first (once) and the filter is given them."""


def bounded_filters(environment: Environment) -> None:
    """Replace every filter of ``environment`` with its bounded form (once per environment)."""
    environment.filters.update({name: _bounded(name, f) for name, f in environment.filters.items()})


def _bounded(name: str, original: Callable[..., Any]) -> Callable[..., Any]:
    from jinja2.utils import _PassArg, pass_context

    passes: dict[_PassArg | None, Callable[[Any], Any]] = {
        _PassArg.context: lambda context: context,
        _PassArg.eval_context: lambda context: context.eval_ctx,
        _PassArg.environment: lambda context: context.environment,
    }
    first = passes.get(_PassArg.from_obj(original))
    if name in FILTERS:
        bounded = _growing(name, original, first)
    elif first is None:

        def bounded(context: Context, value: TemplateValue, *args: TemplateValue, **kwargs: TemplateValue) -> Any:
            result = original(value, *args, **kwargs)
            if type(result) is str or type(result) is list:
                budget = current()
                if budget is not None:
                    budget.built += _getsizeof(result)
                    if budget.built > budget.bytes_bound:
                        budget.charge_refused(result)
            return result

    else:

        def bounded(context: Context, value: TemplateValue, *args: TemplateValue, **kwargs: TemplateValue) -> Any:
            result = original(first(context), value, *args, **kwargs)
            if type(result) is str or type(result) is list:
                budget = current()
                if budget is not None:
                    budget.built += _getsizeof(result)
                    if budget.built > budget.bytes_bound:
                        budget.charge_refused(result)
            return result

    bounded.__name__ = getattr(original, "__name__", name)
    bounded.__doc__ = original.__doc__
    return pass_context(bounded)


def _growing(name: str, original: Callable[..., Any], first: Callable[[Any], Any] | None) -> Callable[..., Any]:
    """A filter that can grow: its operand made a string or a list as the filter would, its result's length estimated
    and checked, then the filter run and what it made counted."""
    from jinja2.filters import make_attrgetter

    estimate = FILTERS[name]
    stringified = name in STRINGIFIED
    materialized = name in MATERIALIZED
    attribute_at = ATTRIBUTE_AT.get(name)

    def run(context: Context, value: TemplateValue, args: tuple, kwargs: dict) -> Any:
        if first is None:
            return original(value, *args, **kwargs)
        return original(first(context), value, *args, **kwargs)

    def bounded(context: Context, value: TemplateValue, *args: TemplateValue, **kwargs: TemplateValue) -> Any:
        budget = current()
        if budget is None:
            return run(context, value, args, kwargs)
        if stringified and not isinstance(value, str):
            value = budget.text_of(value, f"the {name} filter's operand")
        if materialized and not isinstance(value, list | tuple):
            value = list(value)
        if attribute_at is not None:
            args, kwargs, attribute = _attribute_apart(args, kwargs, attribute_at)
            if attribute is not None:
                value = list(map(make_attrgetter(context.environment, attribute), value))
        try:
            length = estimate(value, *args, **kwargs)
        except (TypeError, ValueError, AttributeError, LookupError):
            length = None  # arguments the filter refuses itself
        if length is not None and (length > _SHORT or budget.built + length > budget.bytes_bound):
            budget.check(length, f"the {name} filter")
        if name == "sum" and length is not None:
            result = _sum(value, args, kwargs, lambda: run(context, value, args, kwargs))
        else:
            result = run(context, value, args, kwargs)
        if type(result) is str or type(result) is list:
            budget.built += _getsizeof(result)
            if budget.built > budget.bytes_bound:
                budget.charge_refused(result)
        return result

    return bounded


def _attribute_apart(args: tuple, kwargs: dict, at: int) -> tuple[tuple, dict, Any]:
    """The filter's arguments with its ``attribute`` taken out (None in its place), and the attribute."""
    kwargs = dict(kwargs)
    attribute = kwargs.pop("attribute", None)
    if len(args) > at:
        attribute = args[at]
        args = (*args[:at], None, *args[at + 1 :])
    return args, kwargs, attribute


def _sum(items: list, args: tuple, kwargs: dict, plain: Callable[[], Any]) -> Any:
    """A sum of lists made in linear time (``sum`` would copy the growing list once per item); others as ``sum``."""
    start = kwargs.get("start", args[1] if len(args) > 1 else 0)
    if isinstance(start, list) and all(isinstance(item, list) for item in items):
        return linear_sum(items, start)
    return plain()


def bounded_str_format(environment: Environment) -> Callable[[Any], Callable[..., str] | None]:
    """The sandbox's ``wrap_str_format`` (what ``'...'.format`` and ``format_map`` become in a template) with each
    field's length checked before it is formatted."""
    from jinja2.sandbox import SandboxedEscapeFormatter, SandboxedFormatter
    from markupsafe import Markup

    class Checked:
        def format_field(self, value: TemplateValue, format_spec: str) -> Any:
            budget = current()
            if budget is not None:
                budget.check(format_field(value, format_spec), "a format field")
            return super().format_field(value, format_spec)  # type: ignore[misc]

    class CheckedFormatter(Checked, SandboxedFormatter):
        pass

    class CheckedEscapeFormatter(Checked, SandboxedEscapeFormatter):
        pass

    def wrap_str_format(value: TemplateValue) -> Callable[..., str] | None:
        # the sandbox asks this of every attribute it reads: the common answer first
        kind = type(value)
        if (kind is not _BUILTIN_METHOD and kind is not MethodType) or value.__name__ not in _FORMATS:
            return None
        text = value.__self__
        if not isinstance(text, str):
            return None
        formatter = (
            CheckedEscapeFormatter(environment, escape=text.escape)
            if isinstance(text, Markup)
            else CheckedFormatter(environment)
        )
        is_map = value.__name__ == "format_map"

        def formatted(*args: TemplateValue, **kwargs: TemplateValue) -> str:
            if is_map:
                if kwargs or len(args) != 1:
                    raise TypeError("format_map() takes exactly one argument and no keyword arguments")
                mapping = args[0]
                args, kwargs = (), mapping
            result = type(text)(formatter.vformat(text, args, kwargs))
            budget = current()
            if budget is not None:
                budget.charge(result)
            return result

        return update_wrapper(formatted, value)

    return wrap_str_format
