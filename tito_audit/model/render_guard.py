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

Not interrupted: a loop over a list built earlier whose body writes no text, calls nothing and reads no
attribute or item (``{% for a in xs %}{% for b in xs %}{% endfor %}{% endfor %}``).

The clock: transformers gives templates ``strftime_now`` (today's date). The guarded environment's
``strftime_now`` reads the current thread's clock when one is set (:func:`clock`), so renders in two threads
can see two dates at once.
"""

from __future__ import annotations

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
    """A render past ``max_seconds`` ends the audit (:class:`~tito_audit.errors.TemplateTimeoutError`), and every
    later render of that renderer fails at once: a template slow once is slow on every conversation. False (a
    session): the render is one refused render (:class:`RenderError`) and the next one is tried again."""


_GUARDED = "_tito_audit_guarded"
_INSTALL = threading.Lock()
CONCAT_CHECK_EVERY = 64
"""Output pieces between two looks at the clock while a render's output is joined."""


class RenderTimeout(Exception):
    """A render ran past the current thread's deadline."""


@dataclass(frozen=True)
class _Deadline:
    at: float
    """``time.monotonic()`` after which the render stops."""
    seconds: float

    def expired(self) -> RenderTimeout:
        return RenderTimeout(f"rendering took longer than {self.seconds:g}s (raise it with --max-render-seconds)")


_DEADLINE: ContextVar[_Deadline | None] = ContextVar("tito_audit_render_deadline", default=None)
_CLOCK: ContextVar[datetime | None] = ContextVar("tito_audit_render_clock", default=None)
_current = _DEADLINE.get


class deadline:
    """Renders in this block (this thread only) raise :class:`RenderTimeout` after ``seconds`` (0: no limit).

    An enclosing deadline that ends sooner stays in force. A class rather than a generator-based context manager:
    it is entered once per render, and this costs a third as much."""

    __slots__ = ("_seconds", "_token")

    def __init__(self, seconds: float) -> None:
        self._seconds = seconds
        self._token: Token[_Deadline | None] | None = None

    def __enter__(self) -> None:
        if self._seconds <= 0:
            return
        at = time.monotonic() + self._seconds
        current = _DEADLINE.get()
        if current is None or at < current.at:
            self._token = _DEADLINE.set(_Deadline(at, self._seconds))

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


def guard(environment: Any) -> None:
    """Install the deadline checks and the per-thread clock on a Jinja environment (once; idempotent)."""
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
        environment.__dict__[_GUARDED] = True


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
