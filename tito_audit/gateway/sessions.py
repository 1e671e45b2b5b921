"""The gateway's sessions: one :class:`~tito_audit.session.TitoSession` per session id, bounded in number, idle
time and bytes so that memory stays bounded however many agents come and go.

A session idle for longer than the idle limit is dropped. When the table is full, a new session first drops the
expired ones, then the least recently used session that is not answering a request; when every session is busy the
new one is refused (503). A request reserves its session's size after the step (:mod:`.memory_budget`) and is refused
when the session would pass ``--max-session-bytes`` (413) or the sessions together ``--max-total-bytes`` (507); no other
session is dropped to make room. A dropped session is remembered (why it went, for the 404 of a later request) and
queued for :meth:`SessionStore.take_ended`, which gives its memory back. All of it runs on the server's event loop;
the lock makes the table safe from threads too.

A request is one transaction on its session, :class:`Turn`, opened in one place only, :meth:`SessionStore.turn` (an
``async with``): it holds the session's lock, reserves the request's bytes (:meth:`Turn.reserve`) and commits the
turn once (:meth:`Turn.commit`). Whatever ends the request without a commit (an error, a client gone, a task
cancelled, a commit the journal refused), the session is as it was: the step was taken on a copy, the lock is
released, the reservation given back and a first turn leaves no empty session behind. A session dropped while a
request holds it (DELETE) is marked :attr:`GatewaySession.ended`: that request's turn is not kept
(:func:`ended_error`), so a turn begun before a DELETE never brings the deleted session back nor touches a newer
session of the same id.

A turn, plain or streamed, is committed in one place, :meth:`Turn.commit`: what the turn makes of the session
(:class:`Kept`: the step's session copy, its answer, the counts) is made first, kept by the table's :class:`Journal`
(:class:`MemoryJournal`, which keeps nothing beyond memory, or ``--store``'s
:class:`~tito_audit.gateway.sqlite_journal.SqliteJournal`), and only then put in the session's place; a turn the
journal does not keep (the session ended meanwhile: 404; the file not written: 507) changes nothing, so a turn not
kept is never answered, nor shown in the session's record, as if it were.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any, Protocol

from tito_audit.gateway.attribution import HARNESS, RESENT, loss_cause
from tito_audit.gateway.errors import RequestError
from tito_audit.gateway.memory_budget import DEFAULT_SESSION_BYTES, DEFAULT_TOTAL_BYTES, TOKEN_BYTES, mib
from tito_audit.session import TitoSession

SessionMaker = Callable[[list[dict] | None], TitoSession]
"""A new, empty session of the server's model and settings for the tools given."""

RESENT_LOSS = loss_cause(HARNESS, RESENT.name)
"""The cause of ids lost when a session that only appends (``--on-rewrite refuse``) samples an answer again."""
REMEMBERED = 4096
"""Ended session ids whose end the store still explains in their 404; an older one is :data:`UNKNOWN`."""
UNKNOWN = f"never opened, or ended long ago: the gateway says why for the last {REMEMBERED} sessions that ended"


@dataclass
class Pending:
    """The last answer of a session: sampled, parsed, answered, and appended once the client sends what follows."""

    ids: list[int]
    message: dict[str, Any]
    """The parser's message (appended to the session)."""
    wire: dict[str, Any]
    """The message as the client got it (call ids included): what the client sends back."""
    finish: str
    echo: dict[str, Any]
    """The wire message taken back as a request message (what the client's echo must compare equal to)."""
    logprobs: list[float | None] | None = None
    """The engine's log-probability of each id (kept in the session with them)."""
    top_logprobs: list[list[tuple[int, float]]] | None = None
    """The alternatives the engine gave per id, when the request asked (answered, not kept)."""


class GatewaySession:
    """One session's state between requests."""

    def __init__(self, session_id: str) -> None:
        self.id = session_id
        self.session: TitoSession | None = None
        self.history: list[dict] = []
        """The messages the client sent last time (as compared: see :func:`~tito_audit.gateway.protocol.comparable`)."""
        self.sent: tuple[list[dict], list[dict]] | None = None
        """(:attr:`history` as committed, the same messages as the client sent them): a request's messages equal to
        these take their compared form from :attr:`history` (:func:`~tito_audit.gateway.turn_steps.compared`)."""
        self.pending: Pending | None = None
        self.tools: list[dict] | None = None
        self.lock = asyncio.Lock()
        self.used = time.monotonic()
        self.requests = 0
        self.size = 0
        """The session's estimated bytes (:attr:`TitoSession.held_bytes` with the last answer's ids)."""
        self.reserved = 0
        """The size the request under way may bring the session to (0 when none is)."""
        self.gone: str | None = None
        """Why an earlier session of this id ended (``it was evicted: ...``), when one did and the store remembers."""
        self.stored: str | None = None
        """The generation of its rows in ``--store`` (None: not written yet, or no store)."""
        self.tree: Any = None
        """Under ``--on-rewrite branch``, every branch of the session (:class:`~tito_audit.gateway.branches.Tree`)."""
        self.dialect: dict[str, Any] = {}
        """What the dialects keep per session (the Responses API: the chain of response ids)."""
        self.ended: str | None = None
        """Why the session left the table (deleted, expired, evicted); None while it is the one under its id."""
        self.number = 0
        """The order the session was opened in (the table's count): ``GET /sessions`` pages by it, and a tie between
        sessions a request's conversation continues as far goes to the lower."""
        self.created = time.time()
        self.last_used = self.created
        """Wall-clock times (``GET /sessions``); :attr:`used` is the monotonic one that idle time is counted on."""
        self.lookups: list[dict[str, Any]] = []
        """How each committed request found the session (:class:`~tito_audit.gateway.session_lookup.Found`)."""
        self.ignored: dict[str, int] = {}
        """Each request field the gateway did not act on, with the first request that sent it."""
        self.sampled = 0
        """Ids the engine sampled for the session's committed answers, all of them."""
        self.lost: dict[str, int] = {}
        """Sampled ids no training sample keeps, by cause (an answer sampled again in place of another)."""

    @property
    def busy(self) -> bool:
        return self.lock.locked()


class PreparedStep(Protocol):
    """What the table commits of a prepared step (:class:`~tito_audit.gateway.turn_steps.Step`)."""

    @property
    def trial(self) -> TitoSession:
        """The session copy the step was tried on: the session from now on."""

    @property
    def history(self) -> list[dict]: ...

    @property
    def sent(self) -> list[dict] | None: ...

    @property
    def on_commit(self) -> Callable[[GatewaySession, Any, Pending], None] | None: ...

    @property
    def retry(self) -> bool: ...

    @property
    def other_bytes(self) -> int:
        """What the session's other branches hold (counted with the step's copy against the byte bounds)."""

    @property
    def found(self) -> Any:
        """How the request found the session (:class:`~tito_audit.gateway.session_lookup.Found`), or None."""

    @property
    def ignored(self) -> list[str]: ...


@dataclass
class Kept:
    """What a committed turn puts in its session's entry: made from the entry and the step before anything of the
    entry changes, kept by the journal, then put in the entry's place (:meth:`put_in`)."""

    session: TitoSession
    history: list[dict]
    pending: Pending
    sent: tuple[list[dict], list[dict]] | None
    requests: int
    lookups: list[dict[str, Any]]
    ignored: dict[str, int]
    sampled: int
    lost: dict[str, int]

    @classmethod
    def of(cls, entry: GatewaySession, step: PreparedStep, pending: Pending) -> Kept:
        requests = entry.requests + 1
        lookups = list(entry.lookups)
        if step.found is not None:
            lookups.append({"request": requests, **step.found.record()})
        ignored = dict(entry.ignored)
        for name in step.ignored:
            ignored.setdefault(name, requests)
        lost = dict(entry.lost)
        replaced = entry.pending if step.retry and step.on_commit is None else None
        if replaced is not None:  # an append-only session keeps one answer per prompt: the one it replaces is lost
            lost[RESENT_LOSS] = lost.get(RESENT_LOSS, 0) + len(replaced.ids)
        sent = (step.history, step.sent) if step.sent is not None else None
        sampled = entry.sampled + len(pending.ids)
        return cls(step.trial, step.history, pending, sent, requests, lookups, ignored, sampled, lost)

    def put_in(self, entry: GatewaySession) -> None:
        entry.session, entry.history, entry.pending, entry.sent = self.session, self.history, self.pending, self.sent
        entry.requests, entry.lookups, entry.ignored = self.requests, self.lookups, self.ignored
        entry.sampled, entry.lost = self.sampled, self.lost


class Journal(Protocol):
    """Where the session table keeps a committed turn beyond memory (see the module docstring)."""

    def save(self, entry: GatewaySession, kept: Kept) -> None:
        """Keep the turn ``kept`` (``entry`` is the session as it was before it), or raise its :class:`RequestError`
        (404: the session ended meanwhile; 507: not written)."""

    def delete(self, entry: GatewaySession) -> None:
        """Forget the session ``entry`` (it ended)."""


class MemoryJournal:
    """No journal: a committed turn is kept in memory, unless its session ended while the turn ran (404)."""

    def save(self, entry: GatewaySession, kept: Kept) -> None:
        if entry.ended is not None:
            raise ended_error(entry)

    def delete(self, entry: GatewaySession) -> None:
        return None


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

    def _commit(self, entry: GatewaySession, step: PreparedStep, pending: Pending) -> None:
        """Commit a turn (see the module docstring): what it makes of ``entry`` kept by the journal first (which raises
        its :class:`RequestError`, ``entry`` unchanged, when it does not keep it), then put in ``entry``'s place and
        the branch tree told (``step.on_commit``)."""
        kept = Kept.of(entry, step, pending)
        self.journal.save(entry, kept)
        kept.put_in(entry)
        if step.on_commit is not None:
            step.on_commit(entry, step, pending)
        if self.committed is not None:
            self.committed(entry, step, pending)

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


class Turn:
    """One request's transaction on one session (:meth:`SessionStore.turn`; see the module docstring): the bytes it
    reserves, then at most one commit. A request that leaves without committing changes nothing."""

    def __init__(self, store: SessionStore, entry: GatewaySession) -> None:
        self.store = store
        self.entry = entry
        self.committed = False

    def reserve(self, step: PreparedStep, max_tokens: int) -> None:
        """Reserve what the session may hold once ``step`` is answered with ``max_tokens`` ids, or refuse the request
        (413, 507) naming the limit."""
        self.store.reserve(self.entry, _held(step) + TOKEN_BYTES * max_tokens)

    def commit(self, step: PreparedStep, pending: Pending) -> None:
        """Keep the turn (once; no await: nothing interrupts it) and the session's size with it, or raise the
        :class:`RequestError` of a turn not kept (the session as it was)."""
        if self.committed:
            raise RuntimeError(f"session {self.entry.id!r}: a request commits one turn")
        self.store._commit(self.entry, step, pending)
        self.committed = True
        self.store.settle(self.entry, _held(step) + TOKEN_BYTES * len(pending.ids))


def _held(step: PreparedStep) -> int:
    """What the session holds with ``step`` taken (the step's session copy, the other branches), in bytes."""
    return step.trial.held_bytes + step.other_bytes


def ended_error(entry: GatewaySession) -> RequestError:
    """The 404 of a turn whose session ended while the turn ran (a DELETE): the turn is not kept."""
    return RequestError(
        404,
        "unknown_session",
        f"session {entry.id!r} ended while this turn ran ({entry.ended}): the turn is not kept",
    )
