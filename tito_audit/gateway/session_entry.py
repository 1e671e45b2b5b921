"""One session's entry in the gateway's table (:class:`GatewaySession`): its :class:`~tito_audit.session.TitoSession`,
what the client sent last, the answer it was given (:class:`Pending`) and what the session's record counts."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tito_audit.gateway.errors import RequestError
from tito_audit.session import TitoSession

SessionMaker = Callable[[list[dict] | None], TitoSession]
"""A new, empty session of the server's model and settings for the tools given."""


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


def ended_error(entry: GatewaySession) -> RequestError:
    """The 404 of a turn whose session ended while the turn ran (a DELETE): the turn is not kept."""
    return RequestError(
        404,
        "unknown_session",
        f"session {entry.id!r} ended while this turn ran ({entry.ended}): the turn is not kept",
    )
