"""The gateway's sessions: one :class:`~tito_audit.session.TitoSession` per session id, bounded in number, idle
time and bytes so that memory stays bounded however many agents come and go.

A session idle for longer than the idle limit is dropped. When the table is full, a new session first drops the
expired ones, then the least recently used session that is not answering a request; when every session is busy the
new one is refused (503). A request reserves its session's size after the step (:mod:`.memory_budget`) and is refused
when the session would pass ``--max-session-bytes`` (413) or the sessions together ``--max-total-bytes`` (507); no other
session is dropped to make room. A dropped session is remembered (why it went, for the 404 of a later request) and
queued for :meth:`SessionStore.take_ended`, which gives its memory back. All of it runs on the server's event loop;
the lock makes the table safe from threads too.

A request is one transaction on its session (:class:`~.turn_transaction.Turn`), opened in one place only,
:meth:`SessionStore.turn` (an ``async with``): it holds the session's lock, reserves the request's bytes and commits
the turn once, kept by the table's journal (:class:`~.turn_transaction.MemoryJournal`, which keeps nothing beyond
memory, or ``--store``'s :class:`~tito_audit.gateway.sqlite_journal.SqliteJournal`) before it is put in the session's
place. Whatever ends the request without a commit (an error, a client gone, a task cancelled, a commit the journal
refused: the session ended meanwhile, 404; the file not written, 507), the session is as it was, so a turn not kept is
never answered, nor shown in the session's record, as if it were: the lock is released, the reservation given back
and a first turn leaves no empty session behind. A session dropped while a request holds it (DELETE) is marked
:attr:`~.session_entry.GatewaySession.ended`: that request's turn is not kept (:func:`~.session_entry.ended_error`),
so a turn begun before a DELETE never brings the deleted session back nor touches a newer session of the same id.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable

from tito_audit.gateway.errors import RequestError
from tito_audit.gateway.memory_budget import DEFAULT_SESSION_BYTES, DEFAULT_TOTAL_BYTES, mib
from tito_audit.gateway.session_entry import GatewaySession, Pending
from tito_audit.gateway.turn_transaction import Journal, MemoryJournal, PreparedStep, Turn

REMEMBERED = 4096
"""Ended session ids whose end the store still explains in their 404; an older one is :data:`UNKNOWN`."""
UNKNOWN = f"never opened, or ended long ago: the gateway says why for the last {REMEMBERED} sessions that ended"


class SessionStore:
    def __init__(
        self,
        max_sessions: int,
        idle_seconds: float,
        max_session_bytes: int = DEFAULT_SESSION_BYTES,
        max_total_bytes: int = DEFAULT_TOTAL_BYTES,
    ) -> None:
        if max_sessions < 1:
            raise ValueError("--max-sessions must be at least 1")
        if idle_seconds <= 0:
            raise ValueError("--session-idle must be a positive number of seconds")
        if not 0 < max_session_bytes <= max_total_bytes:
            raise ValueError("--max-session-bytes must be positive and at most --max-total-bytes")
        self.max_sessions = max_sessions
        self.idle_seconds = idle_seconds
        self.max_session_bytes = max_session_bytes
        self.max_total_bytes = max_total_bytes
        self._items: OrderedDict[str, GatewaySession] = OrderedDict()
        self._gone: OrderedDict[str, str] = OrderedDict()
        self._ended: list[GatewaySession] = []
        self._lock = threading.Lock()
        self.expired = 0
        self.evicted = 0
        self.journal: Journal = MemoryJournal()
        """What keeps a committed turn beyond memory (``--store``: the SQLite file)."""
        self.opened = 0
        """Sessions opened so far (each one's :attr:`GatewaySession.number`)."""
        self.committed: Callable[[GatewaySession, PreparedStep, Pending], None] | None = None
        """Told of every turn kept (the gateway indexes a session's first answered exchange)."""
        self.ending: Callable[[str], None] | None = None
        """Told of every session id that leaves the table."""

    def __len__(self) -> int:
        return len(self._items)

    @property
    def total_bytes(self) -> int:
        """What the sessions hold and the requests under way may bring them to, estimated."""
        with self._lock:
            return self._total()

    def get(self, session_id: str) -> GatewaySession | None:
        with self._lock:
            self._expire()
            entry = self._items.get(session_id)
            if entry is not None:
                entry.used = time.monotonic()
                self._items.move_to_end(session_id)
            return entry

    def peek(self, session_id: str) -> GatewaySession | None:
        """The session of ``session_id``, without counting it as used."""
        with self._lock:
            return self._items.get(session_id)

    def open(self, session_id: str) -> GatewaySession:
        """The entry for ``session_id``, created (empty) when there is none."""
        with self._lock:
            self._expire()
            entry = self._items.get(session_id)
            if entry is None:
                if len(self._items) >= self.max_sessions:
                    self._evict_one()
                entry = self._items[session_id] = GatewaySession(session_id)
                entry.gone = self._gone.pop(session_id, None)
                self.opened += 1
                entry.number = self.opened
            entry.used = time.monotonic()
            entry.last_used = time.time()
            self._items.move_to_end(session_id)
            return entry

    def listing(self, after: int, limit: int) -> list[GatewaySession]:
        """Up to ``limit`` sessions that answered a turn, opened after the ``after``-th, in the order they opened."""
        with self._lock:
            entries = sorted(
                (e for e in self._items.values() if e.session is not None and e.number > after), key=lambda e: e.number
            )
            return entries[:limit]

    @contextlib.asynccontextmanager
    async def turn(self, session_id: str) -> AsyncIterator[Turn]:
        """One request's transaction (:class:`Turn`) on the entry of ``session_id`` (created empty when there is none),
        its lock held: the one place a session's lock is taken. On the way out, whatever happened, the reservation is
        given back, a first turn that committed nothing drops its empty entry, and the lock is released."""
        while True:
            entry = self.open(session_id)
            async with entry.lock:
                if not self.holds(entry):  # dropped while this request waited for it: open the id again
                    continue
                opening = entry.session is None
                try:
                    yield Turn(self, entry)
                finally:
                    self.settle(entry, None)
                    if opening and entry.session is None:
                        self.discard(entry)
                return

    def holds(self, entry: GatewaySession) -> bool:
        """Whether ``entry`` is still the session stored under its id."""
        with self._lock:
            return self._items.get(entry.id) is entry

    def discard(self, entry: GatewaySession) -> None:
        """Drop ``entry`` if it is still the one stored under its id (a first turn that failed)."""
        with self._lock:
            if self._items.get(entry.id) is entry:
                del self._items[entry.id]
                if self.ending is not None:
                    self.ending(entry.id)
                if entry.gone is not None:
                    self._remember(entry.id, entry.gone)

    def delete(self, session_id: str) -> bool:
        with self._lock:
            if session_id not in self._items:
                return False
            self._drop(session_id, "it was deleted (DELETE /sessions/ID)")
            return True

    def missing(self, session_id: str) -> RequestError:
        """The 404 for a session id the store does not hold, saying why when it knows."""
        return RequestError(404, "unknown_session", f"no session {session_id!r}: {self.why_gone(session_id)}")

    def why_gone(self, session_id: str) -> str:
        """Why the session of ``session_id`` ended, as far as the store remembers."""
        with self._lock:
            return self._gone.get(session_id) or UNKNOWN

    def reserve(self, entry: GatewaySession, size: int) -> None:
        """Let the request under way bring ``entry`` to ``size`` bytes, or refuse it (413, 507) naming the limit."""
        with self._lock:
            if size > self.max_session_bytes:
                raise RequestError(
                    413,
                    "session_too_large",
                    f"session {entry.id!r} would hold about {mib(size)} after this request, past --max-session-bytes "
                    f"({mib(self.max_session_bytes)}): end it and start a new session",
                )
            others = sum(max(e.size, e.reserved) for e in self._items.values() if e is not entry)
            if others + size > self.max_total_bytes:
                raise RequestError(
                    507,
                    "insufficient_storage",
                    f"the sessions would hold about {mib(others + size)} in all, past --max-total-bytes "
                    f"({mib(self.max_total_bytes)}): retry once sessions have ended (DELETE /sessions/ID) or expired",
                )
            entry.reserved = size

    def settle(self, entry: GatewaySession, size: int | None) -> None:
        """The request under way ended: ``entry`` now holds ``size`` bytes (None: it failed, nothing changed)."""
        with self._lock:
            if size is not None:
                entry.size = size
            entry.reserved = 0

    def take_ended(self) -> list[GatewaySession]:
        """The sessions dropped since the last call (their memory is to be given back)."""
        with self._lock:
            ended, self._ended = self._ended, []
            return ended

    def _total(self) -> int:
        return sum(max(e.size, e.reserved) for e in self._items.values())

    def _drop(self, key: str, why: str) -> None:
        entry = self._items.pop(key)
        entry.ended = why
        if self.ending is not None:
            self.ending(key)
        self._ended.append(entry)
        self._remember(key, why)

    def _remember(self, key: str, why: str) -> None:
        self._gone[key] = why
        self._gone.move_to_end(key)
        while len(self._gone) > REMEMBERED:
            self._gone.popitem(last=False)

    def _expire(self) -> None:
        limit = time.monotonic() - self.idle_seconds
        for key in [k for k, e in self._items.items() if e.used < limit and not e.busy]:
            self._drop(key, f"it expired, idle for longer than {self.idle_seconds:g} s (--session-idle)")
            self.expired += 1

    def _evict_one(self) -> None:
        for key, entry in self._items.items():  # least recently used first
            if not entry.busy:
                self._drop(
                    key,
                    f"it was evicted: the gateway keeps at most {self.max_sessions} sessions (--max-sessions) and it "
                    "was the least recently used one when a new session opened",
                )
                self.evicted += 1
                return
        raise RequestError(
            503, "too_many_sessions", f"all {self.max_sessions} sessions are answering requests; retry later"
        )
