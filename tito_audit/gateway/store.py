"""The gateway's sessions: one :class:`~tito_audit.session.TitoSession` per session id, bounded in number and idle
time so that memory stays bounded however many agents come and go.

A session idle for longer than the idle limit is dropped. When the table is full, a new session first drops the
expired ones, then the least recently used session that is not answering a request; when every session is busy the
new one is refused (503). All of it runs on the server's event loop; the lock makes the table safe from threads too.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from tito_audit.gateway.protocol import RequestError
from tito_audit.session import TitoSession


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


class GatewaySession:
    """One session's state between requests."""

    def __init__(self, session_id: str) -> None:
        self.id = session_id
        self.session: TitoSession | None = None
        self.history: list[dict] = []
        """The messages the client sent last time (as compared: see :func:`~tito_audit.gateway.protocol.comparable`)."""
        self.pending: Pending | None = None
        self.tools: list[dict] | None = None
        self.lock = asyncio.Lock()
        self.used = time.monotonic()
        self.requests = 0

    @property
    def busy(self) -> bool:
        return self.lock.locked()


class SessionStore:
    def __init__(self, max_sessions: int, idle_seconds: float) -> None:
        if max_sessions < 1:
            raise ValueError("--max-sessions must be at least 1")
        if idle_seconds <= 0:
            raise ValueError("--session-idle must be a positive number of seconds")
        self.max_sessions = max_sessions
        self.idle_seconds = idle_seconds
        self._items: OrderedDict[str, GatewaySession] = OrderedDict()
        self._lock = threading.Lock()
        self.expired = 0
        self.evicted = 0

    def __len__(self) -> int:
        return len(self._items)

    def get(self, session_id: str) -> GatewaySession | None:
        with self._lock:
            self._expire()
            entry = self._items.get(session_id)
            if entry is not None:
                entry.used = time.monotonic()
                self._items.move_to_end(session_id)
            return entry

    def open(self, session_id: str) -> GatewaySession:
        """The entry for ``session_id``, created (empty) when there is none."""
        with self._lock:
            self._expire()
            entry = self._items.get(session_id)
            if entry is None:
                if len(self._items) >= self.max_sessions:
                    self._evict_one()
                entry = self._items[session_id] = GatewaySession(session_id)
            entry.used = time.monotonic()
            self._items.move_to_end(session_id)
            return entry

    def discard(self, entry: GatewaySession) -> None:
        """Drop ``entry`` if it is still the one stored under its id (a first turn that failed)."""
        with self._lock:
            if self._items.get(entry.id) is entry:
                del self._items[entry.id]

    def delete(self, session_id: str) -> bool:
        with self._lock:
            return self._items.pop(session_id, None) is not None

    def _expire(self) -> None:
        limit = time.monotonic() - self.idle_seconds
        for key in [k for k, e in self._items.items() if e.used < limit and not e.busy]:
            del self._items[key]
            self.expired += 1

    def _evict_one(self) -> None:
        for key, entry in self._items.items():  # least recently used first
            if not entry.busy:
                del self._items[key]
                self.evicted += 1
                return
        raise RequestError(
            503, "too_many_sessions", f"all {self.max_sessions} sessions are answering requests; retry later"
        )
