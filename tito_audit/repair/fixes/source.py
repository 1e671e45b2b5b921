"""A chat template's source as Jinja tokens with their offsets, and which message role each token belongs to.

Fixes edit a template in place: they replace a few expressions inside its tags and leave every other byte as
the authors wrote it. For that they need two things jinja2's parser does not keep: where each token is in the
source, and in which branch of the message loop it sits (``{% if message.role == 'assistant' %}`` ... ).
Jinja's own lexer gives the raw tokens in order; their offsets are found by walking the source, and the
branches by following the ``if``/``elif``/``else``/``endif`` tags.

Example: in ``{% if m.role == 'tool' %}{{ '<|im_end|>' if loop.last }}{% endif %}`` the tokens ``loop . last``
belong to the ``tool`` branch.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from jinja2 import nodes

from tito_audit.conversations.conversation import ASSISTANT, SYSTEM, TOOL, USER
from tito_audit.model.variants import jinja_environment

ROLES = frozenset({SYSTEM, USER, ASSISTANT, TOOL})
_OPENERS = {"if", "for", "macro", "call", "filter", "block", "raw", "with", "autoescape", "generation"}
_IGNORED = {"whitespace", "comment_begin", "comment", "comment_end", "linecomment_begin", "linecomment_end"}


@dataclass(frozen=True)
class Token:
    start: int
    kind: str
    text: str
    roles: frozenset[str] | None
    """The roles of the message branch the token is in (None: not inside a branch that tests the role)."""
    tag: int
    """Index of the tag (``{% %}`` or ``{{ }}``) the token belongs to; -1 for template data."""
    loop_over: str | None = None
    """What the innermost ``for`` around the token iterates (``messages``, ``message.tool_calls``, ...): the
    loop that ``loop.last`` there refers to."""

    @property
    def in_message_loop(self) -> bool:
        """Whether ``loop`` here is the loop over the conversation's messages."""
        return self.loop_over is not None and any(word in self.loop_over for word in ("messages", "msgs"))

    @property
    def end(self) -> int:
        return self.start + len(self.text)


@dataclass(frozen=True)
class Edit:
    """Replace ``source[start:end]`` with ``text``."""

    start: int
    end: int
    text: str
    fix: str


@dataclass
class TemplateSource:
    source: str
    tokens: list[Token] = field(default_factory=list)

    @classmethod
    def parse(cls, source: str) -> TemplateSource:
        """Tokens of ``source`` with offsets and branch roles; raises jinja2's error on a template that does not
        lex."""
        environment = jinja_environment()
        raw = list(environment.lexer.tokeniter(source, None))
        located: list[tuple[int, str, str]] = []
        position = 0
        for _, kind, text in raw:
            found = source.find(text, position)
            if found < 0:  # the lexer normalised something (newlines): stop locating rather than guess
                break
            located.append((found, kind, text))
            position = found + len(text)
        return cls(source, _with_roles(located, environment))

    def code(self) -> list[Token]:
        """Tokens inside tags, whitespace and comments left out."""
        return [t for t in self.tokens if t.tag >= 0 and t.kind not in _IGNORED]

    def apply(self, edits: Iterable[Edit]) -> str:
        """``source`` with ``edits`` applied; an edit that overlaps one given before it is left out (two fixes
        may rewrite the same expression: the first one applied wins)."""
        kept: list[Edit] = []
        for edit in edits:
            if not any(edit.start < other.end and other.start < edit.end for other in kept):
                kept.append(edit)
        out, position = [], 0
        for edit in sorted(kept, key=lambda e: e.start):
            out += [self.source[position : edit.start], edit.text]
            position = edit.end
        out.append(self.source[position:])
        return "".join(out)

    def line_of(self, offset: int) -> int:
        return self.source.count("\n", 0, offset) + 1


def _with_roles(located: Sequence[tuple[int, str, str]], environment) -> list[Token]:
    """Attach to each token the roles of the innermost role-testing branch around it."""
    tokens: list[Token] = []
    # each open block: (keyword, roles of the current branch or None, roles seen in earlier branches of an if,
    # what a for iterates)
    stack: list[tuple[str, frozenset[str] | None, frozenset[str], str | None]] = []
    tag = -1
    index = 0
    while index < len(located):
        start, kind, text = located[index]
        if kind in ("block_begin", "variable_begin"):
            tag += 1
            end_kind = "block_end" if kind == "block_begin" else "variable_end"
            closing = index
            while closing < len(located) and located[closing][1] != end_kind:
                closing += 1
            inner = [t for t in located[index + 1 : closing] if t[1] not in _IGNORED]
            roles_before, loop_before = _current_roles(stack), _current_loop(stack)
            if kind == "block_begin" and inner:
                _follow_block(stack, inner, environment)
            roles = roles_before if kind == "variable_begin" or not inner else _tag_roles(stack, inner, roles_before)
            # a for tag's own expressions run in the loop around it
            loop = loop_before if inner and inner[0][2] in ("for", "endfor") else _current_loop(stack)
            for position in range(index, min(closing + 1, len(located))):
                s, k, t = located[position]
                tokens.append(Token(s, k, t, roles, tag, loop))
            index = closing + 1
            continue
        tokens.append(Token(start, kind, text, _current_roles(stack), -1, _current_loop(stack)))
        index += 1
    return tokens


def _current_roles(stack) -> frozenset[str] | None:
    for _, roles, _, _ in reversed(stack):
        if roles is not None:
            return roles
    return None


def _current_loop(stack) -> str | None:
    for keyword, _, _, over in reversed(stack):
        if keyword == "for":
            return over
    return None


def _tag_roles(stack, inner, roles_before) -> frozenset[str] | None:
    """Tokens of an ``if``/``elif`` tag belong to the branch around the chain (their test runs there)."""
    keyword = inner[0][2]
    if keyword in ("if", "elif", "else", "endif"):
        return _current_roles(stack[:-1]) if keyword != "endif" and stack else roles_before
    return _current_roles(stack)


def _follow_block(stack, inner, environment) -> None:
    keyword = inner[0][2]
    if keyword == "if":
        roles = _roles_of_test(_test_text(inner), environment)
        stack.append(("if", roles, roles or frozenset(), None))
    elif keyword == "elif" and stack and stack[-1][0] == "if":
        roles = _roles_of_test(_test_text(inner), environment)
        seen = stack[-1][2]
        stack[-1] = ("if", roles, seen | (roles or frozenset()), None)
    elif keyword == "else" and stack and stack[-1][0] == "if":
        seen = stack[-1][2]
        stack[-1] = ("if", (ROLES - seen) if seen else None, seen, None)
    elif keyword == "else" and stack and stack[-1][0] == "for":
        return  # a for's else runs outside the loop's iterations; keep the block open
    elif keyword.startswith("end") and stack:
        stack.pop()
    elif keyword == "for":
        words = [t[2] for t in inner]
        over = "".join(words[words.index("in") + 1 :]) if "in" in words else ""
        stack.append(("for", None, frozenset(), over))
    elif keyword in _OPENERS or (keyword == "set" and not any(t[2] == "=" for t in inner)):
        stack.append((keyword, None, frozenset(), None))


def _test_text(inner) -> str:
    return " ".join(t[2] for t in inner[1:])


def _roles_of_test(text: str, environment) -> frozenset[str] | None:
    """The roles for which a branch test can hold, when it tests the message role (``m.role == 'tool'``,
    ``message['role'] in ['user', 'system']``, with ``and``/``or``/``not``); None when it does not."""
    try:
        test = environment.parse("{% if " + text + " %}{% endif %}").body[0].test
    except Exception:
        return None
    return _roles(test)


def _is_role(node: nodes.Node) -> bool:
    if isinstance(node, nodes.Getattr):
        return node.attr == "role"
    return isinstance(node, nodes.Getitem) and isinstance(node.arg, nodes.Const) and node.arg.value == "role"


def _constants(node: nodes.Node) -> frozenset[str] | None:
    if isinstance(node, nodes.Const) and isinstance(node.value, str):
        return frozenset({node.value})
    if isinstance(node, nodes.List | nodes.Tuple):
        texts = [i.value for i in node.items if isinstance(i, nodes.Const) and isinstance(i.value, str)]
        return frozenset(texts) if len(texts) == len(node.items) else None
    return None


def _roles(node: nodes.Node) -> frozenset[str] | None:
    if isinstance(node, nodes.Compare) and len(node.ops) == 1:
        left, operand = node.expr, node.ops[0]
        right = operand.expr
        if _is_role(right) and not _is_role(left):
            left, right = right, left
        values = _constants(right)
        if _is_role(left) and values is not None:
            if operand.op == "eq" or operand.op == "in":
                return values & ROLES
            if operand.op in ("ne", "notin"):
                return ROLES - values
        return None
    if isinstance(node, nodes.Not):
        inner = _roles(node.node)
        return ROLES - inner if inner is not None else None
    if isinstance(node, nodes.Or | nodes.And):
        left_roles, right_roles = _roles(node.left), _roles(node.right)
        if left_roles is None or right_roles is None:
            known = left_roles if left_roles is not None else right_roles
            return known if isinstance(node, nodes.And) else None
        return left_roles | right_roles if isinstance(node, nodes.Or) else left_roles & right_roles
    return None
