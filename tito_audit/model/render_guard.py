"""Per-thread bounds on a Jinja render, a time limit and a frozen clock, with no process-wide state.

A chat template is untrusted code: it can loop for hours. The library runs inside trainers (worker threads, Ray
actors, programs with their own ``SIGALRM`` timers), so the limit uses no signal and no interval timer. It is
checked from the sandbox's own hooks instead: a template compiled in sandboxed mode calls
``environment.call(context, f, ...)`` for every call it makes (``range`` included), ``environment.getattr`` and
``environment.getitem`` for every attribute and item it reads, and hands its output to ``environment.concat``.
:func:`guard` wraps these once on the environment transformers compiles a template into
(``_compile_jinja_template``, cached per template text); each wrapper checks the deadline of the current thread
(a context variable, so asyncio tasks have their own too) and raises :class:`RenderTimeout` once it has passed.
Renders without a deadline, a trainer's own ``apply_chat_template`` for example, pay one context-variable read
per hook.

What runs between two hooks is bounded too (:func:`guard` compiles the template once more for this): every loop
iteration starts with a look at the deadline, so a loop whose body calls nothing stops; ``**``, ``*`` and ``%``
go through ``call_binop``, which refuses an integer power of more than :data:`MAX_POWER_BITS` bits, a repeated
string or list longer than the render's ``max_chars`` and a ``%`` format whose width is longer; ``lipsum`` asked
for more than ``max_chars`` worth of words is refused before it writes any. Before transformers first compiles a
template, :func:`check_constants` refuses a constant ``**``, ``*`` or ``%`` past the same bounds (Jinja computes
constant expressions while compiling, where no deadline can reach). Not bounded: a filter asked for a huge width
(``center``, ``indent``, ``format``) costs memory, not time, up to what ``max_chars`` refuses after the render.

The clock: transformers gives templates ``strftime_now`` (today's date). The guarded environment's
``strftime_now`` reads the current thread's clock when one is set (:func:`clock`), so renders in two threads
can see two dates at once.
"""

from __future__ import annotations

import operator
import re
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar, Token
from dataclasses import dataclass
from datetime import datetime
from typing import Any

DEFAULT_CLOCK = datetime(2026, 1, 15, 9, 30, 0)
"""The date templates see through ``strftime_now`` unless ``--clock`` says otherwise."""
ALTERNATE_CLOCK = datetime(2027, 8, 3, 17, 45, 0)


@dataclass(frozen=True)
class RenderLimits:
    """Bounds on one render: a template that loops forever or writes megabytes is refused, not waited for."""

    max_chars: int = 2_000_000
    max_seconds: float = 10.0
    refuse_after_timeout: bool = True
    """A render past ``max_seconds`` (or past ``max_chars``) ends the audit
    (:class:`~tito_audit.errors.TemplateTimeoutError`), and every later render of that renderer fails at once: a
    template slow once is slow on every conversation. False (an open session): the render is one refused render
    (:class:`RenderError`) and the next one is tried again."""


_GUARDED = "_tito_audit_guarded"
_INSTALL = threading.Lock()
CONCAT_CHECK_EVERY = 64
"""Output pieces between two looks at the clock while a render's output is joined."""


MAX_POWER_BITS = 1 << 16
"""The largest integer ``**`` may make (65,536 bits, a number of about 20,000 digits)."""


class RenderTimeout(Exception):
    """A render ran past the current thread's deadline."""


class RenderTooLong(Exception):
    """A render asked for an output (or a value) past the current thread's ``max_chars``."""


@dataclass(frozen=True)
class _Deadline:
    at: float
    """``time.monotonic()`` after which the render stops (infinity: no time limit)."""
    seconds: float
    max_chars: int = 0
    """The longest string or list ``*`` and ``lipsum`` may make (0: no bound)."""

    def expired(self) -> RenderTimeout:
        return RenderTimeout(f"rendering took longer than {self.seconds:g}s (raise it with --max-render-seconds)")

    def too_long(self, what: str) -> RenderTooLong:
        return RenderTooLong(
            f"output longer than {self.max_chars} characters ({what}; raise it with --max-render-chars)"
        )


_DEADLINE: ContextVar[_Deadline | None] = ContextVar("tito_audit_render_deadline", default=None)
_CLOCK: ContextVar[datetime | None] = ContextVar("tito_audit_render_clock", default=None)
_current = _DEADLINE.get


class deadline:
    """Renders in this block (this thread only) raise :class:`RenderTimeout` after ``seconds`` (0: no limit), and
    :class:`RenderTooLong` when ``*`` or ``lipsum`` would make more than ``max_chars`` (0: no bound).

    An enclosing deadline that ends sooner stays in force. A class rather than a generator-based context manager:
    it is entered once per render, and this costs a third as much."""

    __slots__ = ("_max_chars", "_seconds", "_token")

    def __init__(self, seconds: float, max_chars: int = 0) -> None:
        self._seconds = seconds
        self._max_chars = max_chars
        self._token: Token[_Deadline | None] | None = None

    def __enter__(self) -> None:
        if self._seconds <= 0 and self._max_chars <= 0:
            return
        at = time.monotonic() + self._seconds if self._seconds > 0 else float("inf")
        current = _DEADLINE.get()
        if current is None or at < current.at:
            self._token = _DEADLINE.set(_Deadline(at, self._seconds, max(self._max_chars, 0)))

    def __exit__(self, *exc_info: object) -> None:
        if self._token is not None:
            _DEADLINE.reset(self._token)
            self._token = None


def check_deadline() -> None:
    """Raise :class:`RenderTimeout` when the current thread's render deadline has passed."""
    current = _DEADLINE.get()
    if current is not None and time.monotonic() > current.at:
        raise current.expired()


@contextmanager
def clock(when: datetime) -> Iterator[None]:
    """Guarded templates rendered in this block (this thread only) read ``when`` through ``strftime_now``."""
    token = _CLOCK.set(when)
    try:
        yield
    finally:
        _CLOCK.reset(token)


def guard(compiled: Any, source: str) -> None:
    """Install the deadline checks and the per-thread clock on ``compiled`` (a template transformers compiled from
    ``source`` into an environment of its own) and compile it again with a check in every loop iteration and
    ``**``, ``*``, ``%`` intercepted (once; idempotent). The recompiled code replaces the old in the same template
    object, so transformers' own cache of compiled templates hands out the guarded one."""
    environment = compiled.environment
    if environment.__dict__.get(_GUARDED):
        return
    with _INSTALL:
        if environment.__dict__.get(_GUARDED):
            return
        environment.call = _checked_call(environment.call)
        environment.getattr = _checked(environment.getattr)
        environment.getitem = _checked(environment.getitem)
        environment.concat = _checked_concat(environment.concat)
        environment.globals["strftime_now"] = _clocked(environment.globals.get("strftime_now"))
        environment.globals["lipsum"] = _bounded_lipsum(environment.globals.get("lipsum"))
        environment.intercepted_binops = BOUNDED_BINOPS
        environment.call_binop = _bounded_binop
        environment.tito_audit_check = check_deadline
        environment.code_generator_class = _checking_code_generator()
        recompiled = environment.from_string(source)
        compiled.__dict__.update({k: v for k, v in recompiled.__dict__.items() if k != "environment"})
        environment.__dict__[_GUARDED] = True


BOUNDED_BINOPS = frozenset({"**", "*", "%"})
_FORMAT_WIDTH = re.compile(r"%(?:\([^)]*\))?[-#0 +]*(\d*)(?:\.(\d+))?")


def _checking_code_generator() -> type:
    """A Jinja code generator that starts every loop body (each iteration) with a look at the current thread's
    deadline (macros recurse through ``environment.call``, checked already)."""
    from jinja2.compiler import CodeGenerator

    class CheckingCodeGenerator(CodeGenerator):
        _loop_bodies: set[int] | None = None

        def visit_For(self, node: Any, frame: Any) -> None:
            if self._loop_bodies is None:
                self._loop_bodies = set()
            self._loop_bodies.add(id(node.body))
            super().visit_For(node, frame)

        def blockvisit(self, nodes: Any, frame: Any) -> None:
            if self._loop_bodies is not None and id(nodes) in self._loop_bodies:
                self.writeline("environment.tito_audit_check()")
            super().blockvisit(nodes, frame)

    return CheckingCodeGenerator


def bounded_binop(op: str, left: Any, right: Any, max_chars: int) -> Any:
    """``left ** right`` or ``left * right``, refused (:class:`RenderTooLong`) when the result would be an integer
    of more than :data:`MAX_POWER_BITS` bits or a sequence longer than ``max_chars`` (0: no bound on sequences);
    ``left % right`` when ``left`` is a format asking for a field wider than ``max_chars``."""
    if op == "%":
        if isinstance(left, str) and max_chars > 0:
            for width, precision in _FORMAT_WIDTH.findall(left):
                if max(int(width or 0), int(precision or 0)) > max_chars:
                    raise RenderTooLong(
                        f"output longer than {max_chars} characters (a % format field of "
                        f"{max(int(width or 0), int(precision or 0))} characters; raise it with --max-render-chars)"
                    )
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
    elif max_chars > 0:
        for sequence, times in ((left, right), (right, left)):
            if (
                isinstance(sequence, str | list | tuple)
                and isinstance(times, int)
                and len(sequence) * times > max_chars
            ):
                raise RenderTooLong(
                    f"output longer than {max_chars} characters (a sequence repeated {times} times; raise it with "
                    "--max-render-chars)"
                )
    return operator.mul(left, right)


def check_constants(environment: Any, source: str, max_chars: int) -> None:
    """Refuse (:class:`RenderTooLong`) a constant ``**`` or ``*`` in ``source`` past the bounds of
    :func:`bounded_binop`: Jinja computes constant expressions while it compiles, before any deadline is set.
    ``environment`` parses (any environment with the template's extensions); a template that does not parse is
    left to the compiler to report."""
    from jinja2 import nodes
    from jinja2.exceptions import TemplateSyntaxError

    try:
        tree = environment.parse(source)
    except (TemplateSyntaxError, RecursionError):
        return
    arithmetic: dict[type, Callable[[Any, Any], Any]] = {
        nodes.Add: operator.add,
        nodes.Sub: operator.sub,
        nodes.FloorDiv: operator.floordiv,
    }

    def value(node: Any) -> Any:
        if isinstance(node, nodes.Const):
            return node.value
        if isinstance(node, nodes.Neg):
            return -value(node.node)
        if isinstance(node, nodes.Pos):
            return value(node.node)
        if isinstance(node, nodes.Tuple | nodes.List):
            items = [value(item) for item in node.items]
            return tuple(items) if isinstance(node, nodes.Tuple) else items
        if isinstance(node, nodes.Pow | nodes.Mul | nodes.Mod):
            return bounded_binop(node.operator, value(node.left), value(node.right), max_chars)
        if type(node) in arithmetic:
            return arithmetic[type(node)](value(node.left), value(node.right))
        raise LookupError  # not a constant

    for node in tree.find_all((nodes.Pow, nodes.Mul, nodes.Mod)):
        try:
            value(node)
        except (LookupError, ArithmeticError, TypeError, ValueError, RecursionError):
            continue


_PLAIN = {"**": operator.pow, "*": operator.mul, "%": operator.mod}


def _bounded_binop(context: Any, op: str, left: Any, right: Any) -> Any:
    current = _current()
    if current is None:
        return _PLAIN[op](left, right)
    if time.monotonic() > current.at:
        raise current.expired()
    return bounded_binop(op, left, right, current.max_chars)


def _bounded_lipsum(lipsum: Callable[..., str] | None) -> Callable[..., str]:
    def bounded(n: int = 5, html: bool = True, min: int = 20, max: int = 100) -> str:
        current = _current()
        # every word is at least two letters and a space
        if current is not None and current.max_chars and int(n) * int(max) * 3 > current.max_chars:
            raise current.too_long(f"lipsum({n}) asks for up to {int(n) * int(max)} words")
        check_deadline()
        if lipsum is None:
            raise RenderTooLong("lipsum is not available")
        return lipsum(n, html, min, max)

    return bounded


def _checked_call(call: Callable[..., Any]) -> Callable[..., Any]:
    # the context variable's getter and the clock are bound as locals: these run for every call of a template
    def checked_call(
        context: Any, obj: Any, /, *args: Any, _now: Callable[[], float] = time.monotonic, **kwargs: Any
    ) -> Any:
        current = _current()
        if current is not None and _now() > current.at:
            raise current.expired()
        return call(context, obj, *args, **kwargs)

    return checked_call


def _checked(lookup: Callable[[Any, Any], Any]) -> Callable[[Any, Any], Any]:
    def checked(
        obj: Any, key: Any, /, _current: Callable[[], Any] = _current, _now: Callable[[], float] = time.monotonic
    ) -> Any:
        current = _current()
        if current is not None and _now() > current.at:
            raise current.expired()
        return lookup(obj, key)

    return checked


def _checked_concat(concat: Callable[[Iterable[str]], str]) -> Callable[[Iterable[str]], str]:
    def checked_concat(pieces: Iterable[str]) -> str:
        current = _DEADLINE.get()
        if current is None:
            return concat(pieces)
        kept: list[str] = []
        append = kept.append
        for count, piece in enumerate(pieces):
            append(piece)
            if not count % CONCAT_CHECK_EVERY and time.monotonic() > current.at:
                raise current.expired()
        return concat(kept)

    return checked_concat


def _clocked(now: Callable[[str], str] | None) -> Callable[[str], str]:
    def strftime_now(format: str) -> str:
        when = _CLOCK.get()
        if when is not None:
            return when.strftime(format)
        return now(format) if now is not None else datetime.now().strftime(format)

    return strftime_now
