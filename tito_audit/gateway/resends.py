"""Refused requests sent again unchanged: what a watcher (the harness matrix's runner,
:mod:`tito_audit.harnesses.group`) learns of a client that resends, byte for byte, a request the gateway has refused,
the same way each time.

Each gateway owns one :class:`Resends`; the web layer tells it of every refusal it logs (:func:`.app.refused`), with
the digest of the request's body (a refusal before the body was read, such as a 401, has none and is not counted).
A refusal counts only when the same bytes would be refused again: a client error the request itself causes (400,
404, 413, 422, …), not one its client may retry with reason (408, 409, 429 and 5xx: a session busy or ended, a limit
of all sessions, the engine).

Nothing happens unless someone watches: :meth:`Resends.watch` counts, from then on, how often each refused request
arrives, and tells its callback (once) when one has been resent ``times`` times, from the thread that refuses it and
before the refusal is answered, so a watcher that ends the client there gets nothing more from it. Thread-safe; each
watch keeps at most :data:`KEPT` requests' counts (the oldest forgotten first).
"""

from __future__ import annotations

import contextlib
import hashlib
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import dataclass

KEPT = 256
"""Refused requests one watch keeps a count of."""
RETRIED_WITH_REASON = frozenset({408, 409, 429})
"""Client errors a client may retry with the same bytes and get another answer (and every status of 500 or more)."""


def body_digest(body: bytes) -> bytes:
    """What tells two request bodies apart."""
    return hashlib.blake2b(body, digest_size=16).digest()


@dataclass(frozen=True)
class Resent:
    """A refused request sent again unchanged: how many times it was resent, and its refusal."""

    times: int
    status: int
    code: str
    message: str


class Watch:
    """One watcher's counts (see the module docstring): :attr:`resent` is the refusal it was told of, once told."""

    def __init__(self, times: int, told: Callable[[Resent], None]) -> None:
        if times < 1:
            raise ValueError(f"a watch needs at least one resend, not {times}")
        self.times = times
        self.resent: Resent | None = None
        self._told = told
        self._counts: OrderedDict[tuple[bytes, int, str], int] = OrderedDict()

    def _note(self, key: tuple[bytes, int, str], message: str) -> Resent | None:
        """Count one refusal (under the owner's lock); the resend to tell of, the first time one reaches the count."""
        sent = self._counts.pop(key, 0) + 1
        self._counts[key] = sent
        while len(self._counts) > KEPT:
            self._counts.popitem(last=False)
        if self.resent is not None or sent - 1 < self.times:
            return None
        self.resent = Resent(sent - 1, key[1], key[2], message)
        return self.resent


class Resends:
    """A gateway's watchers of refused requests sent again unchanged (see the module docstring)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._watches: list[Watch] = []

    def refused(self, digest: bytes | None, status: int, code: str, message: str) -> None:
        """Tell the watchers of a refusal of the request whose body has ``digest`` (None: its body was not read)."""
        if digest is None or status >= 500 or status in RETRIED_WITH_REASON:
            return
        with self._lock:
            found = [(watch, watch._note((digest, status, code), message)) for watch in self._watches]
        for watch, resent in found:  # outside the lock: a callback may stop a process, or watch anew
            if resent is not None:
                watch._told(resent)

    @contextlib.contextmanager
    def watch(self, times: int, told: Callable[[Resent], None]) -> Iterator[Watch]:
        """Count refusals while the block runs; ``told`` (once) when a refused request has been resent ``times``
        times (sent ``times + 1`` times)."""
        watch = Watch(times, told)
        with self._lock:
            self._watches.append(watch)
        try:
            yield watch
        finally:
            with self._lock:
                self._watches.remove(watch)
