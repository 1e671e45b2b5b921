"""``--on-rewrite branch``: a session as an append-only tree, so that a harness that rewrites its history (compacts
the context, drops reasoning, truncates a tool's output, reformats arguments) opens a new branch instead of a 409.

Each node is one prompt the engine was asked to continue: the messages its request added after its parent's
history (as the server's matcher keys them: :mod:`.matchers`), what was appended to the parent's session to get
there (the parent's sampled answer, then the new messages; an assistant turn the gateway did not sample at that
prompt is appended unsampled, outside the loss), and the answer sampled from it. A request is matched against the
tree: the deepest node whose history the request starts with, followed by an assistant turn (or the request ends
there: a retry). From that node the request goes on:

- the node is a branch's tip and the request carries the answer it was given: the branch grows (a plain append);
- the node is a tip and the request is the same again: the turn is sampled again (a retry);
- otherwise a new branch starts at that node (its buffer is the node's buffer, which the tree rebuilds by replaying
  the steps that led there, then the rest of the request); with no node in common, a new root.

Every branch keeps its own session (buffer, loss mask, and whatever per-position data the record carries); the
record lists each (:func:`branch_records`) with the branch it forked from and the tokens they share.
"""

from __future__ import annotations

import copy
import json
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from tito_audit.gateway.matchers import MATCHERS, Matcher, matcher
from tito_audit.gateway.protocol import ChatRequest, RequestError
from tito_audit.gateway.sessions import GatewaySession, Pending, SessionMaker
from tito_audit.gateway.turn_steps import Step, finished_view, prepare, turn_record
from tito_audit.session import TitoSession

ON_REWRITE = ("refuse", "branch")

PER_POSITION = ("buffer", "loss_mask", "logprobs")
"""The record's per-position fields, one value per token of a branch's buffer (a new one is one more name here, read
from the branch's session as an attribute)."""


@dataclass(frozen=True)
class Rewrites:
    """The server's ``--on-rewrite`` and ``--match``."""

    on_rewrite: str = "refuse"
    match: str = "strict"

    def __post_init__(self) -> None:
        if self.on_rewrite not in ON_REWRITE:
            raise ValueError(f"--on-rewrite must be one of {', '.join(ON_REWRITE)}, not {self.on_rewrite!r}")
        if self.match not in MATCHERS:
            raise ValueError(f"--match must be one of {', '.join(MATCHERS)}, not {self.match!r}")

    @property
    def branch(self) -> bool:
        return self.on_rewrite == "branch"

    @property
    def key(self) -> Matcher:
        return matcher(self.match)

    def prepare(self, entry: GatewaySession, request: ChatRequest, make_session: SessionMaker) -> Step:
        if entry.tree is None:
            step = prepare(entry, request, make_session, Rewrites("refuse", self.match))  # the first request: the root
            step.on_commit = _grow(None, list(step.history), [("start", request.messages)], request.tools, None)
            return step
        sent = [self.key(m) for m in request.messages]
        return _on_tree(entry.tree, request, sent, self.key, make_session)


Op = tuple[Any, ...]
"""``("start", messages)`` or ``("extend", ids or None, assistant message, messages[, logprobs])``."""


@dataclass(eq=False)
class Node:
    parent: Node | None
    delta: list[dict]
    ops: list[Op]
    tools: list[dict] | None
    branch: int
    pending: Pending | None = None
    children: list[Node] = field(default_factory=list)
    clock: datetime = field(kw_only=True)
    """The session clock of the node's root (a replay renders with it)."""


@dataclass
class Tree:
    roots: list[Node] = field(default_factory=list)
    tips: dict[int, tuple[Node, TitoSession]] = field(default_factory=dict)
    forks: dict[int, int | None] = field(default_factory=dict)
    """branch → the branch it forked from."""
    active: int = 0

    def sessions(self) -> list[TitoSession]:
        return [session for _, session in self.tips.values()]

    def held_bytes(self, but: int | None = None) -> int:
        return sum(session.held_bytes for branch, (_, session) in self.tips.items() if branch != but)


def _on_tree(tree: Tree, request: ChatRequest, sent: list[dict], key: Matcher, make: SessionMaker) -> Step:
    tools = _tools_key(request.tools)
    best: tuple[int, int, Node] | None = None
    stack = [(root, 0) for root in tree.roots if _tools_key(root.tools) == tools]
    while stack:
        node, start = stack.pop()
        end = start + len(node.delta)
        if sent[start:end] != node.delta:
            continue
        usable = end == len(sent) or sent[end].get("role") == "assistant"
        echoes = end < len(sent) and node.pending is not None and sent[end] == key(node.pending.echo)
        rank = (end, int(echoes) * 2 + int(node.branch == tree.active))
        if usable and (best is None or rank > best[:2]):
            best = (*rank, node)
        stack += [(child, end) for child in node.children]
    if best is None:
        return _new_root(tree, request, sent, make)
    end, _, node = best
    if end == len(sent):
        return _retry(tree, node, sent, make)
    return _continue(tree, node, request, sent, end, key, make)


def _segments(messages: list[dict], first: int) -> list[tuple[dict, list[dict]]]:
    """``messages[first:]`` (an assistant turn first) as (assistant turn, the messages after it) pairs."""
    out: list[tuple[dict, list[dict]]] = []
    for index in range(first, len(messages)):
        message = messages[index]
        if message["role"] == "assistant":
            out.append((message, []))
        else:
            out[-1][1].append(message)
    for number, (_, after) in enumerate(out):
        if not after:
            where = (
                "the last assistant turn" if number == len(out) - 1 else f"assistant turn {number + 1} of the rewrite"
            )
            raise RequestError(
                400, "invalid_request", f"nothing follows {where}: send the tool results or a user message"
            )
    return out


def _continue(
    tree: Tree, node: Node, request: ChatRequest, sent: list[dict], end: int, key: Matcher, make: SessionMaker
) -> Step:
    pairs = _segments(request.messages, end)
    ops: list[Op] = []
    for number, (assistant, after) in enumerate(pairs):
        sampled = number == 0 and node.pending is not None and key(assistant) == key(node.pending.echo)
        if sampled:
            assert node.pending is not None
            ops.append(("extend", node.pending.ids, node.pending.message, after, node.pending.logprobs))
        else:
            ops.append(("extend", None, assistant, after))
    tip = tree.tips.get(node.branch)
    grows = tip is not None and tip[0] is node and ops[0][1] is not None
    trial = tip[1].fork() if grows and tip is not None else _replay(node, make)
    before = len(trial.breaks)
    _apply(trial, ops)
    on_commit = _grow(node, sent[end:], ops, node.tools, node.branch if grows else None)
    other = tree.held_bytes(but=node.branch if grows else None)
    return Step(trial, trial.buffer, sent, before, False, on_commit=on_commit, other_bytes=other, tools=node.tools)


def _retry(tree: Tree, node: Node, sent: list[dict], make: SessionMaker) -> Step:
    tip = tree.tips.get(node.branch)
    if tip is not None and tip[0] is node:  # the tip's turn sampled again
        trial = tip[1].fork()

        def again(entry: GatewaySession, step: Step, pending: Pending) -> None:
            node.pending = pending
            tree.tips[node.branch] = (node, step.trial)
            tree.active = node.branch
            entry.tools = node.tools

        other = tree.held_bytes(but=node.branch)
        return Step(trial, trial.buffer, sent, len(trial.breaks), True, again, other, node.tools)
    trial = _replay(node, make)  # a prompt further up a branch: a new answer to it is a new branch
    on_commit = _grow(node.parent, node.delta, node.ops, node.tools, None, node.clock)
    return Step(trial, trial.buffer, sent, len(trial.breaks), True, on_commit, tree.held_bytes(), node.tools)


def _new_root(tree: Tree, request: ChatRequest, sent: list[dict], make: SessionMaker) -> Step:
    messages = request.messages
    first = next((i for i, m in enumerate(messages) if m["role"] == "assistant"), len(messages))
    if first == 0:
        raise RequestError(400, "invalid_request", "messages[0]: a conversation cannot open with an assistant turn")
    ops: list[Op] = [("start", messages[:first])]
    if first < len(messages):
        ops += [("extend", None, assistant, after) for assistant, after in _segments(messages, first)]
    trial = make(request.tools)
    _apply(trial, ops)
    on_commit = _grow(None, sent, ops, request.tools, None)
    return Step(trial, trial.buffer, sent, 0, False, on_commit, tree.held_bytes(), request.tools)


def _grow(
    parent: Node | None,
    delta: list[dict],
    ops: list[Op],
    tools: list[dict] | None,
    branch: int | None,
    clock: datetime | None = None,
) -> Callable[[GatewaySession, Step, Pending], None]:
    """What committing the step does to the tree: a new node under ``parent`` on ``branch`` (None: a new branch)."""

    def commit(entry: GatewaySession, step: Step, pending: Pending) -> None:
        tree = entry.tree if entry.tree is not None else Tree()
        entry.tree = tree
        number = branch if branch is not None else len(tree.forks)
        node = Node(parent, delta, ops, tools, number, pending, clock=clock or step.trial.clock)
        (parent.children if parent is not None else tree.roots).append(node)
        if branch is None:
            tree.forks[number] = parent.branch if parent is not None else None
        tree.tips[number] = (node, step.trial)
        tree.active = number
        entry.tools = tools

    return commit


def _path_ops(node: Node | None) -> list[Op]:
    path: list[Node] = []
    while node is not None:
        path.append(node)
        node = node.parent
    return [op for step in reversed(path) for op in step.ops]


def _replay(node: Node, make: SessionMaker) -> TitoSession:
    """The session as it was at ``node``'s prompt, rebuilt by replaying the steps from its root (deterministic: the
    same renders on the same clock)."""
    root = node
    while root.parent is not None:
        root = root.parent
    session = make(root.tools)
    session.clock = root.clock
    _apply(session, _path_ops(node))
    return session


def _apply(session: TitoSession, ops: list[Op]) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a break is reported once, when the step was first taken
        for op in ops:
            if op[0] == "start":
                session.start(op[1])
            else:
                session.extend(op[1], op[2], op[3], logprobs=op[4] if len(op) > 4 else None)


def _tools_key(tools: list[dict] | None) -> str:
    return json.dumps(tools or [], sort_keys=True, ensure_ascii=False)


def snapshot(tree: Tree) -> Tree:
    """The branches of ``tree`` as they are now (each tip's node as it is, its answer included), to build the record
    from in a worker thread while requests go on growing the tree."""
    tips = {number: (copy.copy(node), session) for number, (node, session) in tree.tips.items()}
    return Tree(tips=tips, forks=dict(tree.forks), active=tree.active)


def branch_records(tree: Tree) -> Iterator[dict[str, Any]]:
    """Each branch of ``tree`` (a :func:`snapshot`) as the record lists it, one at a time: the branch it forked from
    and where, the tokens it shares with that branch, its per-position fields (:data:`PER_POSITION`), turns,
    breaks and messages (its last answer included, as ``finish`` would append it). A branch's parent has a lower
    number: its view is there when the branch is read."""
    views: dict[int, TitoSession] = {}
    for number, (node, session) in sorted(tree.tips.items()):
        view, check = finished_view(session, node.pending)
        views[number] = view
        parent = tree.forks.get(number)
        base = views[parent] if parent is not None else None
        record: dict[str, Any] = {
            "branch": number,
            "parent": parent,
            "shared_tokens": _shared(view.buffer, base.buffer) if base is not None else 0,
            "shared_messages": _shared(view.messages, base.messages) if base is not None else 0,
        }
        record.update({name: list(getattr(view, name)) for name in PER_POSITION})
        record["turns"] = [turn_record(t) for t in view.turns]
        record["breaks"] = len(view.breaks)
        record["check"] = check
        record["messages"] = view.messages
        yield record


def _shared(one: Sequence[object], other: Sequence[object]) -> int:
    count = 0
    for a, b in zip(one, other, strict=False):
        if a != b:
            break
        count += 1
    return count
