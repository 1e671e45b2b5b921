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
record lists each (:func:`branch_records`) with the branch it forked from and the tokens they share, as a training
sample: each sampled answer is in the loss of the branch it was sampled on only (a branch that carries an answer of
the branch it forked from keeps it as context), so every sampled id is in the loss of exactly one sample. A retry (the
same history again) samples a new answer on a branch of its own beside the first, which keeps its answer. Each new
branch names who made it (:mod:`.attribution`): the harness and what it did, at the message it did it to.
"""

from __future__ import annotations

import copy
import json
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from tito_audit.gateway.attribution import (
    RESENT,
    SIDE_REQUEST,
    TOOLS_OR_SYSTEM,
    harness_edit,
    made_by_harness,
    text_of,
)
from tito_audit.gateway.errors import RequestError
from tito_audit.gateway.matchers import MATCHERS, Matcher, matcher
from tito_audit.gateway.protocol import ChatRequest
from tito_audit.gateway.session_entry import GatewaySession, Pending, SessionMaker
from tito_audit.gateway.turn_steps import (
    Step,
    opening,
    prepare,
)
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
"""``("start", messages)`` or ``("extend", ids or None, assistant message, messages, logprobs, owner)``: ``owner`` is
the branch the appended answer was sampled on (None for an answer the gateway did not sample)."""


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
    made_by: dict[str, Any] | None = field(default=None, kw_only=True)
    """Who made the branch this node begins (:mod:`.attribution`); None on a node that grows its branch."""


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

    def side_answers(self, key: Matcher) -> list[str]:
        """The text of each answer sampled for a side request (a branch that offers no tools beside a loop that
        does): a compaction's summary, a title."""
        if not any(node.tools for node, _ in self.tips.values()):
            return []
        answers = [self.held(branch, key) for branch, (node, _) in self.tips.items() if not node.tools]
        return [text_of(held[-1].get("content")) for held in answers if held and held[-1].get("role") == "assistant"]

    def held(self, branch: int, key: Matcher) -> list[dict]:
        """The history branch ``branch`` holds (as ``key`` keys it), its last answer included: what a client that
        goes on with it sends back."""
        tip = self.tips.get(branch)
        if tip is None:
            return []
        node = tip[0]
        messages = [m for step in path_to(node) for m in step.delta]
        return messages + ([key(node.pending.echo)] if node.pending is not None else [])


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
        return _new_root(tree, request, sent, make, _root_maker(tree, request, sent, key))
    end, _, node = best
    if end == len(sent):
        return _retry(tree, node, request, sent, key, make)
    return _continue(tree, node, request, sent, end, key, make)


def _root_maker(tree: Tree, request: ChatRequest, sent: list[dict], key: Matcher) -> dict[str, Any] | None:
    """Who made a new root. A request that offers no tools where the loop offers some is a side request; otherwise the
    last branch with the request's tools is the history the harness changed (a compaction's restart, another system
    prompt); a request with tools after side requests only is the loop itself (None: the side requests before it are
    named so in the record, :func:`samples`); other tools than the loop's are a change of tools."""
    tools = _tools_key(request.tools)
    if not request.tools and any(node.tools for node, _ in tree.tips.values()):
        return made_by_harness(SIDE_REQUEST, None)
    same = [number for number, (node, _) in tree.tips.items() if _tools_key(node.tools) == tools]
    if same:
        action, where = harness_edit(tree.held(max(same), key), sent, request.name, tree.side_answers(key))
        return made_by_harness(action, where)
    if not any(node.tools for node, _ in tree.tips.values()):
        return None
    return made_by_harness(TOOLS_OR_SYSTEM, "tools")


def _segments(messages: list[dict], first: int) -> list[tuple[dict, list[dict]]]:
    """``messages[first:]`` (an assistant turn first) as (assistant turn, the messages after it) pairs. An assistant
    turn that follows another (a canned reply after the model's, a compaction's restart) is one of the messages after
    the first: rendered as the template writes two assistant turns in a row, outside the loss."""
    out: list[tuple[dict, list[dict]]] = []
    for index in range(first, len(messages)):
        message = messages[index]
        if message["role"] == "assistant" and (not out or out[-1][1]):
            out.append((message, []))
        else:
            out[-1][1].append(message)
    if not out[-1][1] or out[-1][1][-1]["role"] == "assistant":
        raise RequestError(
            400, "invalid_request", "nothing follows the last assistant turn: send the tool results or a user message"
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
            ops.append(("extend", node.pending.ids, node.pending.message, after, node.pending.logprobs, node.branch))
        else:
            ops.append(("extend", None, assistant, after, None, None))
    tip = tree.tips.get(node.branch)
    grows = tip is not None and tip[0] is node and ops[0][1] is not None
    trial = tip[1].fork() if grows and tip is not None else _replay(node, make)
    before = len(trial.breaks)
    _apply(trial, ops)
    made_by = None
    if not grows:
        action, where = harness_edit(tree.held(node.branch, key), sent, request.name, tree.side_answers(key))
        made_by = made_by_harness(action, where)
    on_commit = _grow(node, sent[end:], ops, node.tools, node.branch if grows else None, made_by=made_by)
    other = tree.held_bytes(but=node.branch if grows else None)
    return Step(trial, trial.buffer, sent, before, False, on_commit=on_commit, other_bytes=other, tools=node.tools)


def _retry(tree: Tree, node: Node, request: ChatRequest, sent: list[dict], key: Matcher, make: SessionMaker) -> Step:
    """The prompt of ``node`` asked again: a new answer on a branch of its own beside the node (the node keeps its
    answer: each sampled answer stays in one training sample)."""
    tip = tree.tips.get(node.branch)
    if tip is not None and tip[0] is node:  # the tip's turn sampled again: the tip's session is at that prompt
        trial = tip[1].fork()
        made_by = made_by_harness(RESENT, None)
    else:  # a prompt further up a branch
        trial = _replay(node, make)
        action, where = harness_edit(tree.held(node.branch, key), sent, request.name, tree.side_answers(key))
        made_by = made_by_harness(action, where)
    on_commit = _grow(node.parent, node.delta, node.ops, node.tools, None, node.clock, made_by=made_by)
    return Step(trial, trial.buffer, sent, len(trial.breaks), True, on_commit, tree.held_bytes(), node.tools)


def _new_root(
    tree: Tree, request: ChatRequest, sent: list[dict], make: SessionMaker, made_by: dict[str, Any] | None
) -> Step:
    """A branch that shares no prompt with the others: every message of the request is its first prompt (an assistant
    turn among them is context, never in the loss)."""
    trial = make(request.tools)
    opening(trial, request)
    ops: list[Op] = [("start", request.messages)]
    on_commit = _grow(None, sent, ops, request.tools, None, made_by=made_by)
    return Step(trial, trial.buffer, sent, 0, False, on_commit, tree.held_bytes(), request.tools)


def _grow(
    parent: Node | None,
    delta: list[dict],
    ops: list[Op],
    tools: list[dict] | None,
    branch: int | None,
    clock: datetime | None = None,
    *,
    made_by: dict[str, Any] | None = None,
) -> Callable[[GatewaySession, Step, Pending], None]:
    """What committing the step does to the tree: a new node under ``parent`` on ``branch`` (None: a new branch,
    made by ``made_by``)."""

    def commit(entry: GatewaySession, step: Step, pending: Pending) -> None:
        made = made_by
        if entry.tree is None:  # the session's first branch: made by whoever the lookup names (a rewrite not joined)
            made = getattr(step.found, "made_by", None)
        tree = entry.tree if entry.tree is not None else Tree()
        entry.tree = tree
        number = branch if branch is not None else len(tree.forks)
        node = Node(parent, delta, ops, tools, number, pending, clock=clock or step.trial.clock, made_by=made)
        (parent.children if parent is not None else tree.roots).append(node)
        if branch is None:
            tree.forks[number] = parent.branch if parent is not None else None
        tree.tips[number] = (node, step.trial)
        tree.active = number
        entry.tools = tools

    return commit


def path_to(node: Node | None) -> list[Node]:
    """The nodes from a root down to ``node``."""
    path: list[Node] = []
    while node is not None:
        path.append(node)
        node = node.parent
    return path[::-1]


def _path_ops(node: Node | None) -> list[Op]:
    return [op for step in path_to(node) for op in step.ops]


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
                session.extend(op[1], op[2], op[3], logprobs=op[4])


def _tools_key(tools: list[dict] | None) -> str:
    return json.dumps(tools or [], sort_keys=True, ensure_ascii=False)


def snapshot(tree: Tree) -> Tree:
    """The branches of ``tree`` as they are now (each tip's node as it is, its answer included), to build the record
    from in a worker thread while requests go on growing the tree."""
    tips = {number: (copy.copy(node), session) for number, (node, session) in tree.tips.items()}
    return Tree(tips=tips, forks=dict(tree.forks), active=tree.active)
