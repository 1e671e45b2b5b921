"""Mechanical fixes for chat templates, and the proof that they change nothing else.

Fixes (each applied only where the template has the construct, found through its jinja2 AST):

- ``history-as-last``: inside the assistant branch, ``if`` tags that test the message's position
  (``loop.last``, ``loop.index0 > ns.last_query_index``) render history differently from the turn the
  model just produced (empty think blocks, pruned reasoning, another end token). The tests are replaced
  by ``true`` so every assistant turn renders the way the last one does: the text the model sampled stays
  in history.
- ``frozen-date``: ``strftime_now(...)`` is replaced by a ``frozen_date`` keyword argument that defaults to
  a fixed date, so two renders of the same conversation agree.

A generation prompt that opens a block history never shows (``<think>`` with reasoning stripped from
history) has no mechanical fix: keeping it needs history to render reasoning, a choice the template's
authors have to make; the patch refuses it with that reason.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from jinja2 import nodes

from tito_audit.conversation import ASSISTANT, Conversation

POSITION_TEST = re.compile(
    r"\bnot\s+loop\.last\b|\bloop\.last\b|\bloop\.index0?\s*[<>]=?\s*[\w.]+|[\w.]+\s*[<>]=?\s*loop\.index0?\b"
)
STRFTIME = re.compile(r"strftime_now\(\s*(['\"])(.*?)\1\s*\)")
FIXABLE = {
    "empty-think-dropped": "history-as-last",
    "reasoning-pruned": "history-as-last",
    "stop-token-swap": "history-as-last",
    "nondeterministic-template": "frozen-date",
}
UNFIXABLE = {
    "gen-prompt-mismatch": "the generation prompt writes text that history renders differently; which of the two "
    "to keep is the template authors' choice (no mechanical fix)",
    "bpe-seam": "tokens merge across the join: only the tokenizer or a separator in the template can change that",
    "content-rewritten": "the template rewrites message text (trim, moves a system message): no mechanical fix",
    "closing-rewritten": "the template closes a message one way when it is last and another way once a message "
    "follows: no mechanical fix here",
    "tool-call-reformatted": "the template re-serializes tool calls: no mechanical fix",
    "history-dependent-suffix": "the stand-in suffix depends on history: use the real bridge instead",
}


@dataclass
class Edit:
    fix: str
    line: int
    before: str
    after: str


@dataclass
class Patch:
    source: str
    patched: str
    edits: list[Edit]
    refused: dict[str, str] = field(default_factory=dict)
    """Cause -> why no mechanical fix applies."""

    @property
    def changed(self) -> bool:
        return self.patched != self.source

    def unified_diff(self, name: str) -> str:
        return "".join(
            difflib.unified_diff(
                self.source.splitlines(keepends=True),
                self.patched.splitlines(keepends=True),
                fromfile=f"a/{name}",
                tofile=f"b/{name}",
            )
        )


def _mentions_assistant(test: nodes.Node) -> bool:
    return any(isinstance(c, nodes.Const) and c.value == "assistant" for c in [test, *test.find_all(nodes.Const)])


def _assistant_position_ifs(ast: nodes.Template) -> set[int]:
    """Lines of ``if`` tags inside an assistant branch whose test reads the message's position."""
    lines: set[int] = set()

    def walk(node: nodes.Node, in_assistant: bool) -> None:
        if isinstance(node, nodes.If):
            getattrs = [node.test, *node.test.find_all(nodes.Getattr)]
            test_reads = {
                f"{n.node.name}.{n.attr}"
                for n in getattrs
                if isinstance(n, nodes.Getattr) and isinstance(n.node, nodes.Name)
            }
            if in_assistant and test_reads & {"loop.last", "loop.index0", "loop.index"}:
                lines.add(node.lineno)
            entering = in_assistant or _mentions_assistant(node.test)
            for child in node.body:
                walk(child, entering)
            for branch in node.elif_:
                walk(branch, in_assistant)
            for child in node.else_:
                walk(child, in_assistant)
            return
        for child in node.iter_child_nodes():
            walk(child, in_assistant)

    walk(ast, False)
    return lines


def _if_tag_span(lines: list[str], number: int) -> tuple[int, int] | None:
    """Start and end (line indices) of the ``{% if %}``/``{% elif %}`` tag that begins on line ``number``."""
    index = number - 1
    if not 0 <= index < len(lines) or not re.search(r"\{%-?\s*(el)?if\b", lines[index]):
        return None
    end = index
    while end < len(lines) and "%}" not in lines[end][lines[end].find("if") :]:
        end += 1
    return index, min(end, len(lines) - 1)


def propose_patch(source: str, causes: Iterable[str], environment, clock: datetime) -> Patch:
    """The patched template for the fixable ``causes`` (the others listed in ``refused``)."""
    wanted = {FIXABLE[c] for c in causes if c in FIXABLE}
    refused = {c: UNFIXABLE[c] for c in causes if c in UNFIXABLE}
    lines = source.split("\n")
    edits: list[Edit] = []
    if "history-as-last" in wanted:
        for number in sorted(_assistant_position_ifs(environment.parse(source))):
            span = _if_tag_span(lines, number)
            if span is None:
                continue
            for index in range(span[0], span[1] + 1):
                replaced = POSITION_TEST.sub(
                    lambda m: "false" if m.group(0).startswith("not") else "true", lines[index]
                )
                if replaced != lines[index]:
                    edits.append(Edit("history-as-last", index + 1, lines[index], replaced))
                    lines[index] = replaced
    if "frozen-date" in wanted:
        for index, line in enumerate(lines):
            replaced = STRFTIME.sub(
                lambda m: f'(frozen_date if frozen_date is defined else "{clock.strftime(m.group(2))}")', line
            )
            if replaced != line:
                edits.append(Edit("frozen-date", index + 1, line, replaced))
                lines[index] = replaced
    for cause in causes:
        if cause in FIXABLE and not any(e.fix == FIXABLE[cause] for e in edits):
            refused.setdefault(cause, f"the construct behind {cause} was not found in a form the fix knows")
    return Patch(source=source, patched="\n".join(lines), edits=edits, refused=refused)


@dataclass
class NoChangeProof:
    """Renders where no fix applies (no earlier assistant turn in history), compared byte for byte."""

    compared: int = 0
    identical: int = 0
    differing: list[str] = field(default_factory=list)
    changed_elsewhere: int = 0
    """Renders with an earlier assistant turn (where the fix applies) that changed."""

    @property
    def holds(self) -> bool:
        return self.compared > 0 and self.identical == self.compared


def prove_no_change(conversations: Sequence[Conversation], render_original, render_patched) -> NoChangeProof:
    """Compare every prefix of every conversation under both templates.

    Prefixes whose history holds no assistant turn but possibly the last message must render identically
    (the fixes only touch how earlier assistant turns are rendered, and dates, which the audit freezes).
    """
    proof = NoChangeProof()
    for conversation in conversations:
        messages = conversation.messages
        for k in range(1, len(messages) + 1):
            earlier_assistants = sum(1 for m in messages[: k - 1] if m.get("role") == ASSISTANT)
            for gp in (False, True) if messages[k - 1].get("role") != ASSISTANT else (False,):
                try:
                    original = render_original(messages[:k], conversation.tools, gp)
                    patched = render_patched(messages[:k], conversation.tools, gp)
                except Exception:
                    continue
                if earlier_assistants:
                    proof.changed_elsewhere += original != patched
                    continue
                proof.compared += 1
                if original == patched:
                    proof.identical += 1
                elif len(proof.differing) < 5:
                    proof.differing.append(f"{conversation.id} messages[:{k}] add_generation_prompt={gp}")
    return proof
