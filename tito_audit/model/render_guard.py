"""Per-thread bounds on a Jinja render (its time, the values it makes, the bytes it builds) and a frozen clock, with
no process-wide state.

A chat template is untrusted code: it can loop for hours or ask for gigabytes without writing a character. The
library runs inside trainers (worker threads, Ray actors, programs with their own ``SIGALRM`` timers), so the limits
use no signal, no interval timer and no process-wide memory limit. They are checked from the sandbox's own hooks
instead, against the current thread's budget (:mod:`tito_audit.model.render_budget`): a template compiled in
sandboxed mode calls ``environment.call(context, f, ...)`` for every call it makes (``range`` and macros included)
and hands its output to ``environment.concat``. :func:`guard` wraps these once on the environment transformers
compiles a template into (``_compile_jinja_template``, cached per template text) and compiles the template once more
so that what runs between two hooks is bounded too:

- every loop iteration starts with a tick (so a loop whose body calls nothing stops);
- ``**``, ``*``, ``%`` and ``+`` go through ``call_binop``, ``~`` and ``{{ value }}`` through the guard's own join and
  ``str``, every filter through its bounded form (:mod:`tito_audit.model.render_filters`), ``'...'.format`` through a
  formatter that checks each field, and the ``str`` methods that can grow (``replace``, ``center``, ``join``, ...)
  are checked where ``environment.call`` calls them. Each operation that can make a value much longer than its
  operands has its result's length estimated first (:mod:`tito_audit.model.render_growth`) and is refused past
  ``max_chars`` or past the bytes the render may still build (``max_bytes``); what it made is counted after.
- Attribute and item reads are not hooked: they cannot loop, and what runs between two ticks is bounded without them.

Time costs a counter, not a clock read, per hook: the clock is read once every
:data:`~tito_audit.model.render_budget.TICKS` ticks, and at once by an operation that builds a large value. Before
transformers first compiles a template, :func:`~tito_audit.model.render_constants.check_constants` refuses a constant
expression past the same bounds (Jinja computes constant expressions while compiling, where no deadline can reach).
Renders without a budget, a trainer's own ``apply_chat_template`` for example, pay one context-variable read per
hook and compute as in plain Jinja.

The clock: transformers gives templates ``strftime_now`` (today's date). The guarded environment's
``strftime_now`` reads the current thread's clock when one is set (:func:`clock`), so renders in two threads
can see two dates at once.
"""

from __future__ import annotations

import operator
import re
import sys
import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import datetime
from itertools import islice
from typing import TYPE_CHECKING, Any

from jinja2 import Undefined
from jinja2.runtime import Macro

from tito_audit.model.boundary_types import TemplateValue
from tito_audit.model.render_budget import (  # noqa: F401  (the limits and the deadline are read from here too)
    Budget,
    RenderLimits,
    RenderTimeout,
    RenderTooLarge,
    RenderTooLong,
    check_deadline,
    current,
    deadline,
)
from tito_audit.model.render_codegen import SHORT as _SHORT
from tito_audit.model.render_codegen import checking_code_generator
from tito_audit.model.render_growth import STR_METHODS, percent, plus, repeat

if TYPE_CHECKING:
    from jinja2.runtime import Context

DEFAULT_CLOCK = datetime(2026, 1, 15, 9, 30, 0)
"""The date templates see through ``strftime_now`` unless ``--clock`` says otherwise."""
ALTERNATE_CLOCK = datetime(2027, 8, 3, 17, 45, 0)

_GUARDED = "_tito_audit_guarded"
_INSTALL = threading.Lock()

MAX_POWER_BITS = 1 << 16
"""The largest integer ``**`` may make (65,536 bits, a number of about 20,000 digits)."""

_CLOCK: ContextVar[datetime | None] = ContextVar("tito_audit_render_clock", default=None)
_BUILTIN_METHOD = type("".join)
_getsizeof = sys.getsizeof
_SEQUENCES = (list, tuple)


@contextmanager
def clock(when: datetime) -> Iterator[None]:
    """Guarded templates rendered in this block (this thread only) read ``when`` through ``strftime_now``."""
    token = _CLOCK.set(when)
    try:
        yield
    finally:
        _CLOCK.reset(token)


def guard(compiled: Any, source: str) -> None:  # jinja2's Template: its environment gets our hooks as attributes
    """Install the budget's hooks and the per-thread clock on ``compiled`` (a template transformers compiled from
    ``source`` into an environment of its own) and compile it again with a tick in every loop iteration and the
    operations that can grow bounded (once; idempotent). The recompiled code replaces the old in the same template
    object, so transformers' own cache of compiled templates hands out the guarded one."""
    from tito_audit.model.render_filters import bounded_filters, bounded_str_format

    environment = compiled.environment
    if environment.__dict__.get(_GUARDED):
        return
    with _INSTALL:
        if environment.__dict__.get(_GUARDED):
            return
        environment.call = _checked_call(environment.call)
        environment.concat = _checked_concat(environment.concat)
        environment.wrap_str_format = bounded_str_format(environment)
        bounded_filters(environment)
        environment.globals["strftime_now"] = _clocked(environment.globals.get("strftime_now"))
        environment.globals["lipsum"] = _bounded_lipsum(environment.globals.get("lipsum"))
        environment.intercepted_binops = BOUNDED_BINOPS
        environment.call_binop = _bounded_binop
        environment.tito_audit_budget = current
        environment.tito_audit_join = _bounded_join
        environment.tito_audit_text = _bounded_text
        environment.tito_audit_made = _made
        environment.code_generator_class = checking_code_generator()
        recompiled = environment.from_string(source)
        compiled.__dict__.update({k: v for k, v in recompiled.__dict__.items() if k != "environment"})
        environment.__dict__[_GUARDED] = True


def compile_guarded(source: str) -> None:
    """Compile ``source`` as :func:`guard` compiles it (in a fresh environment made as transformers makes one, the
    guard installed, so nothing the guard bounds at render time is computed here), raising what Jinja or Python's
    compiler raise: a syntax error, or nesting deeper than the parser reads or than Python compiles."""
    empty = fresh_template("")
    guard(empty, "")
    empty.environment.compile(source)


TEMPLATE_UTILS = "transformers.utils.chat_template_utils"
"""transformers' module of chat-template helpers (imported on first use: its import is slow)."""


def fresh_template(source: str) -> Any:
    """``source`` compiled as transformers compiles a chat template, in an environment of its own: never the one
    transformers caches per source for the whole process, which the guard may have been installed on."""
    from tito_audit.model.threads import imported

    return imported(TEMPLATE_UTILS)._cached_compile_jinja_template(source)  # the uncached builder, despite its name


BOUNDED_BINOPS = frozenset({"**", "*", "%", "+"})
_FORMAT_WIDTH = re.compile(r"%(?:\([^)]*\))?[-#0 +]*(\d*)(?:\.(\d+))?")


def bounded_binop(op: str, left: TemplateValue, right: TemplateValue, budget: Budget) -> Any:
    """``left op right`` for ``**``, ``*``, ``%`` and ``+``, refused (:class:`RenderTooLong`) when the result would
    be an integer of more than :data:`MAX_POWER_BITS` bits, a sequence longer than the budget's ``max_chars`` (or
    past its bytes), or a ``%`` format with a field wider than ``max_chars``."""
    if op == "+":
        if isinstance(left, str | list | tuple):
            budget.check(plus(left, right), "a + concatenation")
            return _charged(budget, left + right)
        return left + right
    if op == "%":
        if isinstance(left, str):
            max_chars = budget.max_chars
            for width, precision in _FORMAT_WIDTH.findall(left) if max_chars else ():
                if max(int(width or 0), int(precision or 0)) > max_chars:
                    raise RenderTooLong(
                        f"output longer than {max_chars} characters (a % format field of "
                        f"{max(int(width or 0), int(precision or 0))} characters; raise it with --max-render-chars)"
                    )
            budget.check(percent(left, right), "a % format")
            return _charged(budget, left % right)
        return left % right
    if op == "**":
        if (
            type(left) in (int, bool)
            and type(right) in (int, bool)
            and right > 1
            and abs(left) > 1
            and (abs(left).bit_length() - 1) * right > MAX_POWER_BITS
        ):
            raise RenderTooLong(f"{left} ** {right} is a number of more than {MAX_POWER_BITS} bits")
        return left**right
    if type(left) in (int, bool) and type(right) in (int, bool):
        if abs(left).bit_length() + abs(right).bit_length() > 2 * MAX_POWER_BITS:
            raise RenderTooLong(f"a product of more than {2 * MAX_POWER_BITS} bits")
        return left * right
    for sequence, times in ((left, right), (right, left)):
        length = repeat(sequence, times)
        if length is not None:
            if length > budget.chars_bound:
                raise budget.too_long(f"a sequence repeated {times} times")
            budget.check(length, "a sequence repeated")
            return _charged(budget, operator.mul(left, right))
    return operator.mul(left, right)


def _charged(budget: Budget, made: TemplateValue) -> Any:
    if type(made) is str or type(made) is list:
        budget.charge(made)
    return made


_PLAIN = {"**": operator.pow, "*": operator.mul, "%": operator.mod, "+": operator.add}


def _bounded_binop(context: Context, op: str, left: TemplateValue, right: TemplateValue) -> Any:
    budget = current()
    if budget is None:
        return _PLAIN[op](left, right)
    if op == "+":  # the most common: numbers, and short strings of the template's own
        kind = type(left)
        if kind is int or kind is float:
            return left + right
        if kind is str and type(right) is str:
            if len(left) + len(right) > _SHORT:
                budget.check(len(left) + len(right), "a + concatenation")
            made = left + right
            budget.built += _getsizeof(made)
            if budget.built > budget.bytes_bound:
                budget.charge_refused(made)
            return made
    return bounded_binop(op, left, right, budget)


_CHUNK = 32
"""Output pieces read between two looks at the output's length (each piece is a value the template holds: a
reference, or a string checked when it was made)."""


def _bounded_join(parts: tuple) -> str:
    """``a ~ b ~ c``: every part's text, its length checked before the join is made."""
    budget = current()
    if budget is None:
        return "".join(map(str, parts))
    if len(parts) == 2 and type(parts[0]) is str and type(parts[1]) is str:  # the most common
        texts: Any = parts
    else:
        texts = [
            part if type(part) is str else str(part) if type(part) in _SCALARS else budget.text_of(part, "a ~ operand")
            for part in parts
        ]
    length = sum(map(len, texts))
    if length > _SHORT:
        budget.check(length, "a ~ concatenation")
    made = "".join(texts)
    budget.built += _getsizeof(made)
    if budget.built > budget.bytes_bound:
        budget.charge_refused(made)
    return made


_SCALARS = frozenset({int, float, bool, type(None)})
"""Values whose text is short (an integer's digits are bounded by :data:`MAX_POWER_BITS` and Python's own limit)."""


def _bounded_text(value: TemplateValue) -> str:
    """``{{ value }}``: ``str(value)``, its length checked before it is made."""
    if type(value) is str:
        return value
    budget = current()
    if budget is None or type(value) in _SCALARS or isinstance(value, Undefined):
        return str(value)
    return budget.text_of(value, "a value written")


def _bounded_lipsum(lipsum: Callable[..., str] | None) -> Callable[..., str]:
    def bounded(n: int = 5, html: bool = True, min: int = 20, max: int = 100) -> str:
        budget = current()
        # every word is at least two letters and a space
        if budget is not None and int(n) * int(max) * 3 > budget.chars_bound:
            raise budget.too_long(f"lipsum({n}) asks for up to {int(n) * int(max)} words")
        check_deadline()
        if lipsum is None:
            raise RenderTooLong("lipsum is not available")
        return lipsum(n, html, min, max)

    return bounded


def _checked_call(call: Callable[..., Any]) -> Callable[..., Any]:
    # the context variable's getter is bound as a local: this runs for every call of a template
    def checked_call(
        context: Context,
        obj: TemplateValue,
        /,
        *args: TemplateValue,
        _current: Callable[[], Any] = current,
        **kwargs: TemplateValue,
    ) -> Any:
        budget = _current()
        if budget is None:
            return call(context, obj, *args, **kwargs)
        budget.ticks -= 1
        if budget.ticks < 0:
            budget.look()
        kind = type(obj)
        if kind is Macro:
            # a macro of the template: the sandbox would find it safe and the context call it as it is (without
            # its loop's and block's variables), so it is called here directly
            kwargs.pop("_loop_vars", None)
            kwargs.pop("_block_vars", None)
            try:
                return obj(*args, **kwargs)
            except StopIteration:
                return context.environment.undefined(
                    "value was undefined because a callable raised a StopIteration exception"
                )
        if kind is not _BUILTIN_METHOD or type(obj.__self__) is not str:
            return call(context, obj, *args, **kwargs)
        # a method of a string: the sandbox lets a template call every one (format and format_map reach it
        # wrapped already), so it is called here directly, as the template's context would call it
        if kwargs:
            kwargs.pop("_loop_vars", None)
            kwargs.pop("_block_vars", None)
        estimate = STR_METHODS.get(obj.__name__)
        if estimate is not None:
            args = _checked_method(budget, obj, estimate, args, kwargs)
        made = obj(*args, **kwargs)
        if type(made) is str or type(made) is list:
            budget.built += _getsizeof(made)
            if budget.built > budget.bytes_bound:
                budget.charge_refused(made)
        return made

    return checked_call


def _checked_method(
    budget: Budget, method: TemplateValue, estimate: Callable[..., Any], args: tuple, kwargs: dict
) -> tuple:
    """Check the length of what ``method`` (a ``str`` method that can grow) would make; its arguments, with
    ``join``'s iterable made a list (read once)."""
    name = method.__name__
    if name == "join" and args and type(args[0]) not in _SEQUENCES:
        args = (list(args[0]), *args[1:])
    try:
        length = estimate(method.__self__, *args, **kwargs)
    except (TypeError, ValueError):
        length = None  # arguments the method refuses itself
    budget.check(length, f"str.{name}")
    return args


def _made(value: TemplateValue) -> Any:
    """``value`` (what a slice made, or text added to a short written string) counted against the current
    render's bytes, and refused past ``max_chars`` (it is at most a short string longer than a value the render
    holds already)."""
    if type(value) is str or type(value) is list:
        budget = current()
        if budget is not None:
            budget.built += _getsizeof(value)
            if budget.built > budget.bytes_bound:
                budget.charge_refused(value)
            if len(value) > _SHORT:
                budget.check(len(value), "a value made")
    return value


def _checked_concat(concat: Callable[[Iterable[str]], str]) -> Callable[[Iterable[str]], str]:
    """The join of a render's output (pieces as the template yields them) and of every block and macro body (a list
    of pieces already): refused once the pieces pass ``max_chars``, before the join is made."""

    def checked_concat(pieces: Iterable[str]) -> str:
        budget = current()
        if budget is None:
            return concat(pieces)
        bound = budget.chars_bound
        if type(pieces) is list:
            length = sum(map(len, pieces))
            if length > bound:
                raise budget.too_long(f"the output passed {length:,}")
            made = concat(pieces)
            budget.built += _getsizeof(made)
            if budget.built > budget.bytes_bound:
                budget.charge_refused(made)
            return made
        kept: list[str] = []
        length = 0
        while True:  # read in chunks: a look at the length every few pieces, without a Python step per piece
            chunk = list(islice(pieces, _CHUNK))
            if not chunk:
                break
            kept += chunk
            length += sum(map(len, chunk))
            if length > bound:
                raise budget.too_long(f"the output passed {length:,}")
        made = concat(kept)
        budget.built += _getsizeof(made)
        if budget.built > budget.bytes_bound:
            budget.charge_refused(made)
        return made

    return checked_concat


def _clocked(now: Callable[[str], str] | None) -> Callable[[str], str]:
    def strftime_now(format: str) -> str:
        when = _CLOCK.get()
        if when is not None:
            return when.strftime(format)
        return now(format) if now is not None else datetime.now().strftime(format)

    return strftime_now
