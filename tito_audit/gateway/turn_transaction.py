"""One request's transaction on its session (:class:`Turn`): the bytes it reserves, then at most one commit, kept by
the table's :class:`Journal` before it is put in the session's place (:class:`Kept`). A request that leaves without
committing, or whose commit the journal refuses, changes nothing: the step was taken on a copy of the session, and
the session's entry is written only once the journal kept the turn.
:meth:`~tito_audit.gateway.sessions.SessionStore.turn` opens it, the session's lock held, and gives back the
reservation and the lock however the request ends."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from tito_audit.gateway.attribution import HARNESS, RESENT, loss_cause
from tito_audit.gateway.memory_budget import TOKEN_BYTES
from tito_audit.gateway.session_entry import GatewaySession, Pending, ended_error
from tito_audit.session import TitoSession

RESENT_LOSS = loss_cause(HARNESS, RESENT.name)
"""The cause of ids lost when a session that only appends (``--on-rewrite refuse``) samples an answer again."""


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
        """Keep the turn ``kept`` (``entry`` is the session as it was before it), or raise its
        :class:`~tito_audit.gateway.errors.RequestError` (404: the session ended meanwhile; 507: not written)."""

    def delete(self, entry: GatewaySession) -> None:
        """Forget the session ``entry`` (it ended)."""


class MemoryJournal:
    """No journal: a committed turn is kept in memory, unless its session ended while the turn ran (404)."""

    def save(self, entry: GatewaySession, kept: Kept) -> None:
        if entry.ended is not None:
            raise ended_error(entry)

    def delete(self, entry: GatewaySession) -> None:
        return None


class Table(Protocol):
    """What a :class:`Turn` asks of the session table (:class:`~tito_audit.gateway.sessions.SessionStore`)."""

    journal: Journal
    committed: Callable[[GatewaySession, PreparedStep, Pending], None] | None

    def reserve(self, entry: GatewaySession, size: int) -> None: ...

    def settle(self, entry: GatewaySession, size: int | None) -> None: ...


class Turn:
    """One request's transaction on one session (see the module docstring): the bytes it reserves, then at most one
    commit. A request that leaves without committing changes nothing."""

    def __init__(self, table: Table, entry: GatewaySession) -> None:
        self.table = table
        self.entry = entry
        self.committed = False

    def reserve(self, step: PreparedStep, max_tokens: int) -> None:
        """Reserve what the session may hold once ``step`` is answered with ``max_tokens`` ids, or refuse the request
        (413, 507) naming the limit."""
        self.table.reserve(self.entry, _held(step) + TOKEN_BYTES * max_tokens)

    def commit(self, step: PreparedStep, pending: Pending) -> None:
        """Keep the turn (once; no await: nothing interrupts it): what it makes of the session (:class:`Kept`) kept by
        the journal first (which raises its :class:`~tito_audit.gateway.errors.RequestError`, the session unchanged,
        when it does not keep it), then put in the session's place, the branch tree told (``step.on_commit``), the
        table told (``committed``) and the session's size settled."""
        if self.committed:
            raise RuntimeError(f"session {self.entry.id!r}: a request commits one turn")
        entry, table = self.entry, self.table
        kept = Kept.of(entry, step, pending)
        table.journal.save(entry, kept)
        kept.put_in(entry)
        self.committed = True
        if step.on_commit is not None:
            step.on_commit(entry, step, pending)
        if table.committed is not None:
            table.committed(entry, step, pending)
        table.settle(entry, _held(step) + TOKEN_BYTES * len(pending.ids))


def _held(step: PreparedStep) -> int:
    """What the session holds with ``step`` taken (the step's session copy, the other branches), in bytes."""
    return step.trial.held_bytes + step.other_bytes
