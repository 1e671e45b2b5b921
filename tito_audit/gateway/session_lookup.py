"""Which session a request belongs to, with or without a session id.

A request names its session when it can: the ``X-Session-Id`` header (opencode sends it as it ships), the headers
Codex sends (``session-id``, then ``thread-id``), a Responses ``previous_response_id``, or a field of its body (chat's
and Responses' ``user``, Responses' ``prompt_cache_key``, Messages' ``metadata.user_id``), in that order. A request
that names none is found from its conversation: the session whose answered history is the longest prefix of the
request's messages, compared as ``--match`` compares them. Only a session that *answered* an assistant turn of the
request can be its session: an answered turn tells apart the rollouts of one prompt, so a first request (no answered
turn in it) always opens a new session, even when its messages equal another session's. Candidates are found through
an index of each session's first answered exchange (the messages before its first answer, then that answer); among
them the one whose history the request continues furthest wins, then one the request grows without a new branch, then
the oldest session: the same request finds the same session every time, and the record says how
(:class:`Found`).

A harness that rewrites the answers it was given (smolagents resends each call as text, inspect-ai re-spaces the
content) sends no exchange the index holds. Such a request is looked for through a second index, of each session's
first prompt (the messages before its first answer): an answer counts as come back when the assistant turn at its
place carries every call id it was given (:func:`~tito_audit.gateway.attribution.carries_answer`), in its calls or in
its text; ids are drawn per answer, so they tell the rollouts apart as the answer itself would. A request that goes
on past a prompt without its answer (a malformed turn the harness dropped, then a note about it) joins the one session
whose *last* answer was given at that prompt; where several sessions wait there (rollouts of one prompt under way at
once) nothing tells them apart: it opens a session of its own, the harness named as its maker
(:attr:`Found.made_by`).
"""

from __future__ import annotations

import hashlib
import json
import threading
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from tito_audit.gateway.attribution import DROPPED_TURN, carries_answer, made_by_harness
from tito_audit.gateway.errors import RequestError
from tito_audit.gateway.protocol import ChatRequest, SessionName
from tito_audit.gateway.session_entry import GatewaySession, Pending
from tito_audit.gateway.sessions import SessionStore

MAX_SESSION_ID = 256
HEADER_SOURCES = ((b"session-id", "the session-id header"), (b"thread-id", "the thread-id header"))
"""Headers a harness names its session in, besides ``X-Session-Id`` (Codex sends both, equal)."""


@dataclass(frozen=True)
class Found:
    """A request's session and how it was found (the record keeps it per request)."""

    session_id: str
    how: str
    """``named``, ``conversation`` or ``new``."""
    by: str
    """What named it (``the X-Session-Id header``, ``user``), or why the conversation led there or to a new one."""
    made_by: dict[str, Any] | None = None
    """Who made a new session that goes on from another's prompt without being told apart from it (the harness that
    dropped its answer): its first branch names it (:mod:`.attribution`)."""

    def record(self) -> dict[str, str]:
        return {"how": self.how, "by": self.by}


def checked_id(session_id: str, source: str) -> str:
    """``session_id`` if it can name a session (printable, no ``/``, at most :data:`MAX_SESSION_ID` characters), else
    a 400 naming where it came from."""
    if len(session_id) > MAX_SESSION_ID or "/" in session_id or not session_id.isprintable() or not session_id:
        raise RequestError(
            400,
            "invalid_request",
            f"the session id ({source}) must be printable, without '/', at most {MAX_SESSION_ID} characters",
        )
    return session_id


def header_name(headers: dict[bytes, bytes]) -> tuple[str, str] | None:
    """The session a harness's own headers name (Codex's ``session-id``/``thread-id``), with the header's name."""
    for key, source in HEADER_SOURCES:
        value = headers.get(key)
        if value:
            try:
                return value.decode("utf-8"), source
            except UnicodeDecodeError:
                raise RequestError(400, "invalid_request", f"{source} is not UTF-8 text") from None
    return None


def new_id() -> str:
    return f"s-{uuid.uuid4().hex}"


def first_exchange(keys: Sequence[dict]) -> str | None:
    """The index key of a conversation (its messages as the matcher keys them): a digest of the messages up to its
    first assistant turn, that turn included; None when it holds none."""
    first = next((i for i, m in enumerate(keys) if m.get("role") == "assistant"), None)
    if first is None:
        return None
    return _digest("exchange", keys[: first + 1])


def prompt_key(keys: Sequence[dict]) -> str:
    """The index key of a session's first prompt (the messages before its first answer, as the matcher keys them)."""
    return _digest("prompt", keys)


def prompt_keys(keys: Sequence[dict]) -> list[str]:
    """:func:`prompt_key` of every prefix of ``keys``, shortest first (each message serialized once)."""
    digest = hashlib.sha256(b"prompt")
    found = []
    for message in keys:
        digest.update(_serialized(message))
        found.append(digest.copy().hexdigest())
    return found


def _digest(kind: str, keys: Sequence[dict]) -> str:
    digest = hashlib.sha256(kind.encode("ascii"))
    for message in keys:
        digest.update(_serialized(message))
    return digest.hexdigest()


def _serialized(message: dict) -> bytes:
    return json.dumps(message, sort_keys=True, ensure_ascii=False, default=str).encode("utf-8") + b"\0"


@dataclass(frozen=True)
class Reach:
    """How far a request's messages continue one session: ``depth`` messages of them are its history (an answer come
    back edited counts, :func:`~tito_audit.gateway.attribution.carries_answer`), ``answered`` whether one of those is
    an answer the session sampled, ``grows`` whether the request goes on from the tip of a branch with the answer it
    was given (no new branch); ``dropped``: the length of the prompt of the session's last answer, when the request
    goes on past it without that answer (None otherwise)."""

    depth: int
    answered: bool
    grows: bool
    dropped: int | None = None


class ConversationIndex:
    """Sessions by their first answered exchange (see the module docstring); thread-safe, bounded by the sessions."""

    def __init__(self) -> None:
        self._by_key: dict[str, dict[str, int]] = {}
        self._keys: dict[str, set[str]] = {}
        self._lock = threading.Lock()

    def add(self, key: str, session_id: str, number: int) -> None:
        """Index session ``session_id`` (opened ``number``-th) under ``key``."""
        with self._lock:
            self._by_key.setdefault(key, {})[session_id] = number
            self._keys.setdefault(session_id, set()).add(key)

    def drop(self, session_id: str) -> None:
        with self._lock:
            for key in self._keys.pop(session_id, set()):
                sessions = self._by_key.get(key, {})
                sessions.pop(session_id, None)
                if not sessions:
                    self._by_key.pop(key, None)

    def candidates(self, key: str) -> list[tuple[int, str]]:
        """The sessions indexed under ``key`` as (opened number, id), oldest first."""
        with self._lock:
            return sorted((number, sid) for sid, number in self._by_key.get(key, {}).items())

    def prompted(self, keys: Sequence[str]) -> list[tuple[int, str]]:
        """The sessions indexed under any of ``keys`` (:func:`prompt_keys`), oldest first, each once."""
        with self._lock:
            found = {sid: number for key in keys for sid, number in self._by_key.get(key, {}).items()}
        return sorted((number, sid) for sid, number in found.items())


def found_by_conversation(
    request: ChatRequest,
    key: Callable[[dict], dict],
    index: ConversationIndex,
    reach: Callable[[str, list[dict]], Reach | None],
) -> Found:
    """The session of a request that names none (see the module docstring); ``reach`` says how far the request's
    messages continue a session (None: the session is gone)."""
    sent = [key(m) for m in request.messages]
    exchange = first_exchange(sent)
    reached = [] if exchange is None else _reached(index.candidates(exchange), sent, reach)
    found = _deepest(reached)
    if found is None:  # an answer come back edited, or dropped: through the sessions' first prompts
        reached = _reached(index.prompted(prompt_keys(sent)), sent, reach)
        found = _deepest(reached) or _waiting(reached, request)
    if found is not None:
        return found
    if exchange is None:
        return Found(new_id(), "new", "a first request (no assistant turn): a new session")
    return Found(
        new_id(),
        "new",
        "no session answered an assistant turn of these messages: a new session, its assistant turns context",
    )


Reached = list[tuple[int, str, Reach]]


def _reached(
    candidates: list[tuple[int, str]], sent: list[dict], reach: Callable[[str, list[dict]], Reach | None]
) -> Reached:
    """(opened number, id, how far ``sent`` continues it) of each candidate session still there."""
    out: Reached = []
    for number, session_id in candidates:
        got = reach(session_id, sent)
        if got is not None:
            out.append((number, session_id, got))
    return out


def _deepest(reached: Reached) -> Found | None:
    """The session among ``reached`` that answered a turn of the request and whose history it continues furthest
    (then one it grows without a new branch, then the oldest)."""
    best: tuple[tuple[int, int, int], str] | None = None
    tied = 0
    for number, session_id, got in reached:
        if not got.answered:
            continue
        rank = (got.depth, int(got.grows), -number)
        if best is None or rank[:2] > best[0][:2]:
            best, tied = (rank, session_id), 0
        elif rank[:2] == best[0][:2]:
            tied += 1
    if best is None:
        return None
    (depth, grows, _), session_id = best
    said = f"its first {depth} messages are this session's history" + (
        ", and it goes on from a branch's tip" if grows else ""
    )
    if tied:
        said += f" (as far as {tied} other session(s): the oldest is taken)"
    return Found(session_id, "conversation", said)


def _waiting(reached: Reached, request: ChatRequest) -> Found | None:
    """The session whose last answer the request drops (it goes on past that answer's prompt without it), when one
    session only waits there; when several do, a new session the harness is named the maker of; None when none."""
    waiting = sorted((n, session_id, got.dropped) for n, session_id, got in reached if got.dropped is not None)
    if not waiting:
        return None
    depth = max(d for _, _, d in waiting)
    deepest = [(number, session_id) for number, session_id, d in waiting if d == depth]
    if len(deepest) == 1:
        said = f"it goes on from this session's last prompt ({depth} messages) without the answer it was given"
        return Found(deepest[0][1], "conversation", said)
    said = (
        f"it goes on from the last prompt of {len(deepest)} sessions ({depth} messages) without their answer: "
        "nothing tells them apart, a new session"
    )
    return Found(new_id(), "new", said, made_by_harness(DROPPED_TURN, request.name(depth)))


def reach_of_history(history: list[dict], echo: dict | None, answered: Sequence[int], sent: list[dict]) -> Reach:
    """How far ``sent`` continues a session that only appends: its ``history`` (the messages last sent), then the
    answer it gave (``echo``, keyed); ``answered``: the positions of ``history`` that hold its sampled answers."""
    full = history + ([echo] if echo is not None else [])
    depth = 0
    for held, now in zip(full, sent, strict=False):
        if held != now:
            break
        depth += 1
    covered = any(position < depth for position in answered) or (echo is not None and depth == len(full))
    return Reach(depth, covered, echo is not None and depth == len(full) and len(sent) > depth)


def reach_on_tree(tree: Any, sent: list[dict], key: Callable[[dict], dict]) -> Reach:
    """How far ``sent`` continues a session's tree (a :class:`~tito_audit.gateway.branches.Tree`): the deepest node
    whose history it starts with, whether an answer sampled on the way is in it, and whether it grows a tip."""
    best = Reach(0, False, False)
    last = tree.tips.get(tree.active)
    dropped: int | None = None
    stack = [(root, 0, False) for root in tree.roots]
    while stack:
        node, start, answered = stack.pop()
        end = start + len(node.delta)
        if sent[start:end] != node.delta:
            continue
        after = sent[end] if end < len(sent) and node.pending is not None else None
        echoes = after is not None and after == key(node.pending.echo)
        carried = after is not None and (echoes or carries_answer(node.pending.echo, after))
        depth = end + int(carried)
        tip = tree.tips.get(node.branch)
        grows = echoes and tip is not None and tip[0] is node and depth < len(sent)
        if after is not None and after.get("role") != "assistant" and last is not None and last[0] is node:
            dropped = end
        here = Reach(depth, answered or carried, grows)
        if (here.depth, here.grows, here.answered) > (best.depth, best.grows, best.answered):
            best = here
        for child in node.children:
            sampled_on = bool(child.ops) and child.ops[0][0] == "extend" and child.ops[0][1] is not None
            stack.append((child, end, answered or sampled_on or carried))
    return Reach(best.depth, best.answered, best.grows, dropped)


class Finder:
    """The sessions of one gateway's table, found as the module docstring says; it keeps the table's index of first
    answered exchanges up to date (the table tells it of each turn kept and each session that ends)."""

    def __init__(self, store: SessionStore, key: Callable[[dict], dict]) -> None:
        self.store = store
        self.key = key
        self.index = ConversationIndex()
        store.committed = self._indexed
        store.ending = self.index.drop

    def find(self, request: ChatRequest, header: SessionName | str | None) -> Found:
        """The session the request's headers name, else its body, else the one its conversation continues, else a
        new one."""
        if isinstance(header, str):
            header = (header, "the X-Session-Id header")
        named = header or request.named
        if named is not None:
            return Found(checked_id(*named), "named", named[1])
        return found_by_conversation(request, self.key, self.index, self._reach)

    def _reach(self, session_id: str, sent: list[dict]) -> Reach | None:
        """How far ``sent`` continues session ``session_id`` (None: it is gone or answered nothing yet)."""
        entry = self.store.peek(session_id)
        if entry is None or entry.session is None or entry.pending is None:
            return None
        if entry.tree is not None:
            return reach_on_tree(entry.tree, sent, self.key)
        answered = [t.message_index for t in entry.session.turns if t.sampled]
        return reach_of_history(entry.history, self.key(entry.pending.echo), answered, sent)

    def _indexed(self, entry: GatewaySession, step: Any, pending: Pending) -> None:
        """Index a session by its first answered exchange and its first prompt when a turn that begins a conversation
        is kept."""
        history = step.history
        if entry.requests > 1 and any(m.get("role") == "assistant" for m in history):
            return
        key = first_exchange([*history, self.key(pending.echo)])
        if key is not None:
            self.index.add(key, entry.id, entry.number)
        self.index.add(prompt_key(history), entry.id, entry.number)
