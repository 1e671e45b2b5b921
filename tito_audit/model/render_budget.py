"""What one render may spend, per thread: its time, the length of any value it makes and the bytes it builds in all.

:class:`deadline` sets a render's budget for the current thread (a context variable, so asyncio tasks have their own
too); the render guard's hooks read it (:mod:`tito_audit.model.render_guard`). Time is looked at by counting: each
hook the template passes costs one tick and each value it builds one more per 64 KiB, and the clock is read once every
:data:`TICKS` ticks; what runs between two ticks is bounded (a loop iteration, a call, one operation whose result was
checked before it was made), so a render stops within a few milliseconds of its limit without a clock read per access.
"""

from __future__ import annotations

import math
import sys
import time
from contextvars import ContextVar, Token
from dataclasses import dataclass

from tito_audit.model.boundary_types import TemplateValue


@dataclass(frozen=True)
class RenderLimits:
    """Bounds on one render: a template that loops forever or writes megabytes is refused, not waited for."""

    max_chars: int = 2_000_000
    """The longest output, and the longest string or list any operation of the template may make."""
    max_seconds: float = 10.0
    refuse_after_timeout: bool = True
    """A render past ``max_seconds`` (or past ``max_chars`` or ``max_bytes``) ends the audit
    (:class:`~tito_audit.errors.TemplateTimeoutError`), and every later render of that renderer fails at once: a
    template slow once is slow on every conversation. False (an open session): the render is one refused render
    (:class:`RenderError`) and the next one is tried again."""
    max_bytes: int = 256 * 1024 * 1024
    """The bytes the strings and lists a render's operations make may take in all (what it gives back counted
    too): a template cannot take more memory than this, whatever it builds."""


class RenderTimeout(Exception):
    """A render ran past the current thread's deadline."""


class RenderTooLong(Exception):
    """A render asked for an output (or a value) past the current thread's ``max_chars``."""


class RenderTooLarge(RenderTooLong):
    """A render's operations would build more bytes in all than the current thread's ``max_bytes``."""


TICKS = 256
"""Ticks between two reads of the clock (a tick: one hook passed, or 64 KiB built)."""
_TICK_BYTES = 16
"""A value built costs one more tick per ``1 << _TICK_BYTES`` bytes."""


class Budget:
    """One render's budget in the current thread: mutable, made per render, read by every hook."""

    __slots__ = ("at", "built", "bytes_bound", "chars_bound", "seconds", "ticks")

    def __init__(self, at: float, seconds: float, chars_bound: float = math.inf, bytes_bound: float = math.inf) -> None:
        self.at = at
        """``time.monotonic()`` after which the render stops (infinity: no time limit)."""
        self.seconds = seconds
        self.chars_bound = chars_bound
        """The longest string or list an operation may make (infinity: no bound)."""
        self.bytes_bound = bytes_bound
        """The bytes the render's operations may build in all (infinity: no bound). The hooks compare with the
        bounds in place, without a call: ``if budget.built > budget.bytes_bound: budget.charge_refused(made)``."""
        self.built = 0
        """Bytes built so far."""
        self.ticks = TICKS

    @property
    def max_chars(self) -> int:
        """``chars_bound`` as the option gives it (0: no bound)."""
        return 0 if self.chars_bound == math.inf else int(self.chars_bound)

    @property
    def max_bytes(self) -> int:
        """``bytes_bound`` as the option gives it (0: no bound)."""
        return 0 if self.bytes_bound == math.inf else int(self.bytes_bound)

    def look(self) -> None:
        """Read the clock (the ticks ran out): raise :class:`RenderTimeout` past the deadline."""
        self.ticks = TICKS
        if time.monotonic() > self.at:
            raise self.expired()

    def tick(self) -> None:
        self.ticks -= 1
        if self.ticks < 0:
            self.look()

    def check(self, length: int | None, what: str) -> None:
        """Before an operation makes a value of ``length`` characters (items, for a list): refuse it past
        ``max_chars``, or when even one byte a character would pass ``max_bytes``."""
        if length is None:
            return
        if length > self.chars_bound:
            raise self.too_long(f"{what} making {length:,}")
        if self.built + length > self.bytes_bound:
            raise self.too_large(f"{what} making {length:,} characters")
        self.ticks -= length >> _TICK_BYTES
        if self.ticks < 0:
            self.look()

    def charge(self, made: TemplateValue, _size: TemplateValue = sys.getsizeof) -> None:
        """Count the bytes of ``made`` (a string or list just made) against ``max_bytes``."""
        size = _size(made)
        self.built += size
        if self.built > self.bytes_bound:
            self.charge_refused(made)
        if size >> _TICK_BYTES:
            self.ticks -= size >> _TICK_BYTES
            if self.ticks < 0:
                self.look()

    def charge_refused(self, made: TemplateValue) -> None:
        """``made`` took the render past ``max_bytes`` (counted already)."""
        raise self.too_large(f"a {type(made).__name__} of {len(made):,} made")

    def text_of(self, value: TemplateValue, what: str) -> str:
        """``str(value)``, its length checked before it is made (a list of shared lists can write gigabytes)."""
        from tito_audit.model.render_sizes import text_length

        self.check(text_length(value), what)
        text = str(value)
        self.charge(text)
        return text

    def expired(self) -> RenderTimeout:
        return RenderTimeout(f"rendering took longer than {self.seconds:g}s (raise it with --max-render-seconds)")

    def too_long(self, what: str) -> RenderTooLong:
        return RenderTooLong(
            f"output longer than {self.max_chars} characters ({what}; raise it with --max-render-chars)"
        )

    def too_large(self, what: str) -> RenderTooLarge:
        return RenderTooLarge(
            f"the render builds more than {self.max_bytes:,} bytes ({what}; raise it with --max-render-bytes)"
        )


_BUDGET: ContextVar[Budget | None] = ContextVar("tito_audit_render_budget", default=None)
current = _BUDGET.get
"""The current thread's render budget, or None (a render without limits: the hooks pass everything through)."""


class deadline:
    """Renders in this block (this thread only) raise :class:`RenderTimeout` after ``seconds`` (0: no limit),
    :class:`RenderTooLong` when an operation would make a value longer than ``max_chars`` and
    :class:`RenderTooLarge` when they would build more than ``max_bytes`` in all (0: no bound). Each block is one
    budget (enter it once per render).

    An enclosing deadline that ends sooner stays in force (a render inside a longer piece of work bounded as a
    whole, as the bridge proof is); the bounds on what is built are this block's, counted afresh. A class rather
    than a generator-based context manager: it is entered once per render, and this costs a third as much."""

    __slots__ = ("_bytes_bound", "_chars_bound", "_off", "_seconds", "_token")

    def __init__(self, seconds: float, max_chars: int = 0, max_bytes: int = 0) -> None:
        self._seconds = seconds
        self._chars_bound = max_chars if max_chars > 0 else math.inf
        self._bytes_bound = max_bytes if max_bytes > 0 else math.inf
        self._off = seconds <= 0 and max_chars <= 0 and max_bytes <= 0
        self._token: Token[Budget | None] | None = None

    @classmethod
    def of(cls, limits: RenderLimits) -> deadline:
        """The deadline and bounds of ``limits``."""
        return cls(limits.max_seconds, limits.max_chars, limits.max_bytes)

    def __enter__(self) -> None:
        if self._off:
            return
        at = time.monotonic() + self._seconds if self._seconds > 0 else math.inf
        seconds = self._seconds
        enclosing = _BUDGET.get()
        if enclosing is not None and enclosing.at <= at:  # the sooner deadline holds, with this block's bounds
            at, seconds = enclosing.at, enclosing.seconds
        self._token = _BUDGET.set(Budget(at, seconds, self._chars_bound, self._bytes_bound))

    def __exit__(self, *exc_info: object) -> None:
        if self._token is not None:
            _BUDGET.reset(self._token)
            self._token = None


def check_deadline() -> None:
    """Raise :class:`RenderTimeout` when the current thread's render deadline has passed (a clock read)."""
    budget = _BUDGET.get()
    if budget is not None and time.monotonic() > budget.at:
        raise budget.expired()
