"""``--store PATH``: the session table's journal in a SQLite file, so that a restarted server continues every session.

Memory stays the default (sessions are lost when the server stops). With a store, each turn the session table commits
(:meth:`~tito_audit.gateway.turn_transaction.Turn.commit`, for plain and streamed turns alike) is written in one
transaction (SQLite's WAL mode with ``synchronous=FULL``: the commit is on disk, fsync'd, before the HTTP answer is
sent), as the change it made to the session (:mod:`tito_audit.session.snapshot`: what follows the kept part of the
buffer, mask, log-probabilities, turns and breaks) and to the gateway's record of it (the messages the client sent,
the last answer). A write that fails keeps the turn out of memory too (507 ``store_failed``): what the client was
answered is always on disk. A server started on the file reads every session back, whole, before it serves: the same
buffer, the same turns, and the next request goes on from the last answer (a turn written but never answered, the
server killed in between, is on disk: the client's retry of that request samples it again).

A session that ends (DELETE, expiry, eviction) is deleted from the file when its memory is given back; each
session's rows carry its generation, so a new session under an ended one's id is never deleted with it. A turn whose
session ended while it ran (a DELETE during the engine's answer) is not written (404): whether the write or the end
comes first is decided under the file's lock, so the ended session never comes back and a newer session of its id
is never touched. Idle time counts while the server runs: restored sessions start idle from the restart.

A file that cannot be read back (garbage inside it, a value that is not what this code writes) refuses the start in
one line naming the file and what is wrong, never quoting a session's text.

One store per server process: the file is opened in SQLite's exclusive locking mode, and a second server on it is
refused at start. Several server processes need a file each, and a router that sends each session id to the same
process every time (sessions are not shared between processes). The file, its ``-wal`` and its ``-shm`` files get
the mode an ordinary new file gets (``0o666`` minus the umask).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import sqlite3
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tito_audit.errors import BadInputError, one_line
from tito_audit.gateway.errors import RequestError
from tito_audit.gateway.session_entry import GatewaySession, Pending, SessionMaker, ended_error
from tito_audit.gateway.sessions import SessionStore
from tito_audit.gateway.turn_transaction import Kept
from tito_audit.session import TitoSession
from tito_audit.session.machinery import Machinery
from tito_audit.session.snapshot import change, fold, restore

SCHEMA = 1
log = logging.getLogger("tito_audit.gateway")
TABLES = (
    "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS sessions (id TEXT PRIMARY KEY, generation TEXT NOT NULL, tools TEXT NOT NULL, "
    "used REAL NOT NULL)",
    "CREATE TABLE IF NOT EXISTS turns (session TEXT NOT NULL, generation TEXT NOT NULL, seq INTEGER NOT NULL, "
    "change TEXT NOT NULL, PRIMARY KEY (session, generation, seq))",
)


@dataclass
class Stored:
    """One session read back: what the gateway's table needs to serve it again."""

    id: str
    generation: str
    tools: list[dict] | None
    session: TitoSession
    history: list[dict]
    pending: Pending | None
    requests: int
    used: float
    counts: dict[str, Any] = field(default_factory=dict)
    """What the record counts beside the turns: how each request found the session (``found``), the fields not acted
    on, the ids sampled and lost."""


class SqliteJournal:
    """The sessions' file (see the module docstring); its methods are safe from any thread (one connection, one
    lock)."""

    def __init__(self, path: str | Path, identity: dict[str, Any]) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()
        self._connection = _open(self.path)
        try:
            self._check_identity(identity)
        except sqlite3.Error as exc:
            self._connection.close()
            raise unreadable(self.path, f"its table meta cannot be read ({one_line(exc)})") from None
        except BaseException:
            self._connection.close()
            raise

    def _check_identity(self, identity: dict[str, Any]) -> None:
        wanted = json.dumps({"schema": SCHEMA, **identity}, sort_keys=True)
        row = self._connection.execute("SELECT value FROM meta WHERE key = 'identity'").fetchone()
        if row is None:
            with self._connection:
                self._connection.execute("INSERT INTO meta VALUES ('identity', ?)", (wanted,))
            return
        if row[0] != wanted:
            try:
                held = json.loads(row[0])
                differs = sorted(k for k in {*held, *json.loads(wanted)} if held.get(k) != json.loads(wanted).get(k))
            except (TypeError, ValueError, AttributeError, RecursionError) as exc:
                raise unreadable(
                    self.path, f"its identity (table meta) is not what this tool writes ({_kind(exc)})"
                ) from None
            raise BadInputError(
                f"--store {self.path}: it holds sessions of {held.get('model')} made with other settings "
                f"({', '.join(differs)} differ); serve them with the same model and settings, or give another file"
            )

    def close(self) -> None:
        with self._lock:
            self._connection.close()

    def sessions(self) -> int:
        with self._lock:
            return int(self._connection.execute("SELECT count(*) FROM sessions").fetchone()[0])

    def load(self, make_session: SessionMaker) -> list[Stored]:
        """Every stored session, least recently used first, each folded back from its turns; a file that cannot be
        read back is :func:`unreadable` (naming the table and row, never a session's text)."""
        with self._lock:
            try:
                heads = self._connection.execute(
                    "SELECT id, generation, tools, used FROM sessions ORDER BY used"
                ).fetchall()
            except sqlite3.Error as exc:
                raise unreadable(self.path, f"its table sessions cannot be read ({one_line(exc)})") from None
            out = []
            for number, (session_id, generation, tools_text, used) in enumerate(heads, 1):
                where = f"session {number} of {len(heads)} (table sessions, by last use)"
                try:
                    rows = self._connection.execute(
                        "SELECT change FROM turns WHERE session = ? AND generation = ? ORDER BY seq",
                        (session_id, generation),
                    ).fetchall()
                except sqlite3.Error as exc:
                    raise unreadable(self.path, f"the turns of {where} cannot be read ({one_line(exc)})") from None
                if not rows:  # a session and its turns are written in one transaction, and deleted in one
                    raise unreadable(self.path, f"{where} has no turns")
                try:
                    if not isinstance(session_id, str) or not isinstance(generation, str):
                        raise TypeError("an id or generation that is not text")
                    tools = json.loads(tools_text)
                    out.append(_stored(session_id, generation, tools, rows, used, make_session))
                except Exception as exc:  # whatever a bad value makes the fold raise: one line, never its text
                    raise unreadable(self.path, f"{where} is not what this tool writes ({_kind(exc)})") from None
        return [s for s in out if s is not None]

    def save(self, entry: GatewaySession, kept: Kept) -> None:
        """Write the turn ``kept`` (``entry``: the session before it; a new session's has no session yet) in one
        transaction; raises :class:`RequestError` (507) when it cannot be written."""
        before = entry.session
        data = {
            "session": change(before, kept.session),
            "history": _list_change(entry.history if before is not None else [], kept.history),
            "pending": _pending_data(kept.pending),
            "requests": kept.requests,
            "counts": {
                "found": kept.lookups[-1] if kept.lookups else None,
                "ignored": kept.ignored,
                "sampled": kept.sampled,
                "lost": kept.lost,
            },
        }
        text = json.dumps(data, ensure_ascii=False, separators=(",", ":"))
        with self._lock:
            if entry.ended is not None:  # decided under the file's lock: see the module docstring
                raise ended_error(entry)
            self._write(entry, before, text)

    def _write(self, entry: GatewaySession, before: TitoSession | None, text: str) -> None:
        fresh = before is None or entry.stored is None
        generation = uuid.uuid4().hex if fresh else entry.stored
        try:
            with self._connection:
                if fresh:  # rows of an ended session of this id not deleted yet: the live session replaces them
                    self._connection.execute("DELETE FROM turns WHERE session = ?", (entry.id,))
                    self._connection.execute(
                        "INSERT OR REPLACE INTO sessions VALUES (?, ?, ?, ?)",
                        (entry.id, generation, json.dumps(entry.tools), time.time()),
                    )
                else:
                    self._connection.execute("UPDATE sessions SET used = ? WHERE id = ?", (time.time(), entry.id))
                self._connection.execute(
                    "INSERT INTO turns VALUES (?, ?, (SELECT coalesce(max(seq), 0) + 1 FROM turns WHERE session = ? "
                    "AND generation = ?), ?)",
                    (entry.id, generation, entry.id, generation, text),
                )
        except sqlite3.Error as exc:
            raise RequestError(
                507,
                "store_failed",
                f"the turn could not be written to --store {self.path} ({one_line(exc)}); the session is as it was",
            ) from None
        entry.stored = generation

    def delete(self, entry: GatewaySession) -> None:
        """Delete an ended session's rows (only its own generation's, read under the file's lock: a write of it under
        way is over first). A delete that fails is logged in one line: the session comes back at the next start, and
        ends again as any session does."""
        with self._lock:
            generation = entry.stored
            if generation is None:
                return
            try:
                with self._connection:
                    self._connection.execute(
                        "DELETE FROM turns WHERE session = ? AND generation = ?", (entry.id, generation)
                    )
                    self._connection.execute(
                        "DELETE FROM sessions WHERE id = ? AND generation = ?", (entry.id, generation)
                    )
            except sqlite3.Error as exc:
                log.warning(
                    "gateway: session %s could not be deleted from --store %s: %s", entry.id, self.path, one_line(exc)
                )


def _open(path: Path) -> sqlite3.Connection:
    """The file opened (created with the umask's mode when new), in WAL mode, locked for this process."""
    try:
        if path.is_dir():
            raise BadInputError(f"--store {path}: is a folder, not a file")
        if not path.exists():
            os.close(os.open(path, os.O_CREAT | os.O_WRONLY, 0o666))  # SQLite's own files then take this mode
        connection = sqlite3.connect(path, timeout=0.5, check_same_thread=False, isolation_level=None)
    except OSError as exc:
        raise BadInputError(f"--store {path}: {(exc.strerror or str(exc)).lower()}") from None
    except sqlite3.Error as exc:
        raise BadInputError(f"--store {path}: {one_line(exc)}") from None
    try:
        connection.execute("PRAGMA locking_mode = EXCLUSIVE")
        mode = connection.execute("PRAGMA journal_mode = WAL").fetchone()[0]
        if str(mode).lower() != "wal":
            raise BadInputError(f"--store {path}: SQLite cannot keep it in WAL mode (journal mode {mode})")
        connection.execute("PRAGMA synchronous = FULL")
        # transactions again, one per turn (the connection as a context manager); "DEFERRED" is what the default ""
        # stands for: a plain BEGIN
        connection.isolation_level = "DEFERRED"
        with connection:
            connection.execute("BEGIN IMMEDIATE")  # takes the file's lock now, and keeps it (exclusive mode)
            for statement in TABLES:
                connection.execute(statement)
    except sqlite3.OperationalError as exc:
        connection.close()
        if "locked" in str(exc):
            raise BadInputError(
                f"--store {path} is in use by another server process (one store per process: give each its own file)"
            ) from None
        raise BadInputError(f"--store {path}: {one_line(exc)}") from None
    except sqlite3.DatabaseError as exc:
        connection.close()
        raise BadInputError(f"--store {path}: not a session store ({one_line(exc)})") from None
    return connection


def _stored(
    session_id: str,
    generation: str,
    tools: list[dict] | None,
    rows: list[tuple[str]],
    used: float,
    make_session: SessionMaker,
) -> Stored | None:
    state: dict[str, Any] = {}
    history: list[dict] = []
    last: dict[str, Any] = {}
    lookups: list[dict[str, Any]] = []
    for (text,) in rows:
        last = json.loads(text)
        state = fold(state, last["session"])
        kept, tail = last["history"]
        history = history[:kept] + tail
        found = (last.get("counts") or {}).get("found")
        if found is not None:
            lookups.append(found)
    if not last:
        return None
    session = restore(make_session(tools), state)
    counts = {**(last.get("counts") or {}), "found": lookups}
    pending = _pending_of(last["pending"])
    return Stored(session_id, generation, tools, session, history, pending, last["requests"], used, counts)


def _list_change(old: list, new: list) -> list:
    kept = next((i for i, (a, b) in enumerate(zip(old, new, strict=False)) if a != b), min(len(old), len(new)))
    return [kept, new[kept:]]


def _pending_data(pending: Pending | None) -> dict[str, Any] | None:
    if pending is None:
        return None
    return {
        "ids": pending.ids,
        "message": pending.message,
        "wire": pending.wire,
        "finish": pending.finish,
        "echo": pending.echo,
        "logprobs": pending.logprobs,
    }


def _pending_of(data: dict[str, Any] | None) -> Pending | None:
    if data is None:
        return None
    return Pending(data["ids"], data["message"], data["wire"], data["finish"], data["echo"], data.get("logprobs"))


def _kind(exc: BaseException) -> str:
    """What went wrong reading a value back, without the value (its message may quote a session's text)."""
    if isinstance(exc, json.JSONDecodeError):
        return "a value that is not JSON"
    return f"{type(exc).__name__} while reading it back"


def unreadable(path: Path | str, what: str) -> BadInputError:
    """A ``--store`` file the server cannot start on (exit 2): the file and what is wrong with it."""
    return BadInputError(f"--store {path}: {what}; move it aside (or restore a copy) and start again")


def open_store(
    path: str | Path, identity: dict[str, Any], table: SessionStore, make_session: SessionMaker, token_bytes: int
) -> SqliteJournal:
    """The store at ``path``, its sessions put back in ``table`` (a :class:`~tito_audit.gateway.sessions.SessionStore`),
    least recently used first (past ``--max-sessions``, the least recently used go as evicted ones do), and the
    journal the table commits with from now on."""
    durable = SqliteJournal(path, identity)
    try:
        for stored in durable.load(make_session):
            entry = table.open(stored.id)
            entry.session, entry.history, entry.pending = stored.session, stored.history, stored.pending
            entry.tools, entry.requests, entry.stored = stored.tools, stored.requests, stored.generation
            counts = stored.counts
            entry.lookups, entry.ignored = counts.get("found", []), counts.get("ignored", {})
            entry.sampled, entry.lost = counts.get("sampled", 0), counts.get("lost", {})
            pending_ids = len(stored.pending.ids) if stored.pending is not None else 0
            table.settle(entry, stored.session.held_bytes + token_bytes * pending_ids)
    except BaseException:
        durable.close()
        raise
    table.journal = durable
    return durable


def store_identity(machinery: Machinery, template_kwargs: dict[str, Any]) -> dict[str, Any]:
    """What sessions in a store were made with and a server must share to continue them: the model, its template,
    the template settings, the stop ids and the vocabulary's size."""
    template = machinery.loaded.template_source or ""
    return {
        "model": machinery.loaded.resolved.model_id,
        "template_sha256": hashlib.sha256(template.encode("utf-8")).hexdigest(),
        "template_kwargs": template_kwargs,
        "stop_ids": sorted(machinery.stop_ids),
        "vocabulary": machinery.codec.id_limit,
    }
