"""Where a ``{% generation %}`` tag can go in an assistant branch without changing a byte the template writes.

:mod:`tito_audit.repair.training_place` puts the training form's generation block in the template's own assistant
branches; this module lists the places it may choose from (:class:`Point`) and the text each inserts:

- **between statements** (rank 0): before a tag of the branch, stripping as the tag it precedes strips (on a line
  of its own before ``{%- if … %}`` starting its line: ``{%- generation -%}``; ``{% generation %}{{ … }}``);
- **between the operands of an output** (rank 1): ``{{- a + b }}`` written as ``{{- a }}`` … ``{{ b }}`` (only an
  output that is a chain of ``+``/``~``), and inside template text (``<|im_start|>{% generation %}…``; at its start:
  rank 0);
- **inside a string literal** of such an output (rank 2): ``'<|im_end|>\\n'`` as ``'<|im_end|>'`` … ``'\\n'``.

Places inside a loop, a macro, a call, a filter or a captured ``{% set %}`` are left out (a block there would run
once per iteration, or mark text that is not yet the output); so are the template's own generation tags, which the
placed form removes. Every inserted tag sits where no whitespace control meets it differently from the tag it stands
beside (the Jinja environment of chat templates: ``trim_blocks`` and ``lstrip_blocks``), so a marker in its place
(:meth:`Point.marker`) lands where the tag's block would begin or end; the placed form is verified anyway.
"""

from __future__ import annotations

import codecs
from collections.abc import Sequence
from dataclasses import dataclass

from tito_audit.repair.fixes.source import TemplateSource, Token

BETWEEN_STATEMENTS, BETWEEN_OPERANDS, INSIDE_LITERAL = 0, 1, 2
_SCOPES = {"if", "with"}
"""Blocks whose body runs at most once per assistant message: a generation block may open and close inside them."""
_CLOSED = {"for", "macro", "call", "filter", "raw", "block", "autoescape"}
"""Blocks whose body runs several times, or elsewhere, or into a capture: no place inside them."""
_LOOSER = {"if", "else", "and", "or", "not", "in", "is"}
_BREAKS_CHAIN = {"-", ",", "==", "!=", "<", ">", "<=", ">=", "="}
GENERATION_WORDS = ("generation", "endgeneration")


@dataclass(frozen=True)
class Point:
    """One place of a generation tag: the source range it replaces and the text around the tag."""

    branch: int
    """Index of the assistant branch (in :func:`points_of`'s ``branches``)."""
    scope: tuple[int, ...]
    """The ``if`` bodies around it (each by the index, among the branch's tags and texts, of the tag opening it): a
    block's opening and closing tag must share one."""
    rank: int
    start: int
    end: int
    prefix: str
    opening: str
    closing: str
    suffix: str
    leave: bool = False
    """The place before the branch's closing tag: reached once each time the branch runs, last."""

    def text(self, word: str) -> str:
        return f"{self.prefix}{self.opening} {word} {self.closing}{self.suffix}"

    def marker(self, mark: str) -> str:
        """The insertion with ``mark`` written where the tag would be, under the same whitespace control."""
        return f"{self.prefix}{self.opening} if true %}}{mark}{{% endif {self.closing}{self.suffix}"


@dataclass
class _Unit:
    """A tag (``{% %}``, ``{{ }}``) or template text: its tokens and where it lies."""

    tokens: list[Token]
    kind: str
    """``block``, ``output`` or ``data``."""

    @property
    def start(self) -> int:
        return self.tokens[0].start

    @property
    def inner(self) -> list[Token]:
        return [t for t in self.tokens[1:-1] if t.kind != "whitespace"]

    @property
    def keyword(self) -> str:
        inner = self.inner
        return inner[0].text if self.kind == "block" and inner else ""

    @property
    def strips_left(self) -> bool:
        return self.tokens[0].text.endswith("-")


def units(template: TemplateSource, start: int, end: int) -> list[_Unit]:
    """The tags and template text that begin in ``[start, end)``, in order (comments left out)."""
    found: list[_Unit] = []
    current: list[Token] = []
    for token in template.tokens:
        if not start <= token.start < end:
            continue
        if token.tag < 0:
            if token.kind == "data":
                found.append(_Unit([token], "data"))
            continue
        if current and current[0].tag != token.tag:
            current = []
        if not current:
            current = [token]
            found.append(_Unit(current, "block" if token.kind == "block_begin" else "output"))
        else:
            current.append(token)
    return found


def writes(template: TemplateSource, start: int, end: int) -> bool:
    """Whether ``[start, end)`` holds an output or template text other than whitespace (an assistant branch that only
    computes, as Kimi K2's search for the last answer does, holds no block)."""
    return any(u.kind == "output" or u.tokens[0].text.strip() for u in units(template, start, end) if u.kind != "block")


def points_of(template: TemplateSource, branches: Sequence[tuple[int, int]]) -> list[Point]:
    """Every place of a generation tag in each branch (``(body start, closing tag start)`` source offsets), the place
    before each branch's closing tag marked ``leave``."""
    source = template.source
    found: list[Point] = []
    for number, (start, end) in enumerate(branches):
        scopes: list[tuple[str, int]] = []
        for index, unit in enumerate(units(template, start, end)):
            keyword = unit.keyword
            if keyword in GENERATION_WORDS:
                continue
            closes = keyword.startswith("end") or keyword in ("elif", "else")
            open_here = all(kind in _SCOPES for kind, _ in scopes)
            scope = tuple(tag for _, tag in scopes)
            if unit.kind != "data" and open_here and (not closes or scopes):
                found.append(_before(number, scope, unit, source))
            if unit.kind == "output" and open_here:
                found += _inside_output(number, scope, unit, source)
            elif unit.kind == "data" and open_here:
                found += _inside_text(number, scope, unit.tokens[0], source)
            _follow(scopes, keyword, unit, index)
        closing = _Unit([t for t in template.tokens if t.start == end][:1], "block")
        if closing.tokens and not scopes:
            found.append(_before(number, (), closing, source, leave=True))
    return found


def _follow(scopes: list[tuple[str, int]], keyword: str, unit: _Unit, index: int) -> None:
    if keyword in ("elif", "else") and scopes and scopes[-1][0] == "if":
        scopes[-1] = ("if", index)
    elif keyword.startswith("end") and scopes:
        scopes.pop()
    elif keyword in _SCOPES or keyword in _CLOSED:
        scopes.append((keyword, index))
    elif keyword == "set" and not any(t.text == "=" for t in unit.inner):
        scopes.append(("set", index))


def _before(number: int, scope: tuple[int, ...], unit: _Unit, source: str, leave: bool = False) -> Point:
    """Before a tag. A tag that strips the whitespace before it gets a line of its own when it starts its line
    (stripping on both sides: all the whitespace around was stripped already); any other gets the tag right before
    it, without stripping: ``{%`` before a statement (the indentation lstrip_blocks removed before the statement it
    removes before the tag), ``{%+`` before an output at the start of its line (its indentation stays text, written
    or stripped as before)."""
    line_start = source.rfind("\n", 0, unit.start) + 1
    indent = source[line_start : unit.start]
    at_line_start = not indent.strip(" \t") and line_start > 0
    if unit.strips_left:
        if at_line_start:
            return Point(number, scope, BETWEEN_STATEMENTS, line_start, line_start, indent, "{%-", "-%}", "\n", leave)
        return Point(number, scope, BETWEEN_STATEMENTS, unit.start, unit.start, "", "{%-", "-%}", "", leave)
    opening = "{%+" if unit.kind == "output" and at_line_start and indent else "{%"
    return Point(number, scope, BETWEEN_STATEMENTS, unit.start, unit.start, "", opening, "%}", "", leave)


def _operands(unit: _Unit) -> list[list[Token]] | None:
    """The top-level operands of an output that is a chain of ``+``/``~``; None for any other expression."""
    operands: list[list[Token]] = [[]]
    depth = 0
    for token in unit.inner:
        if token.text in ("(", "[", "{"):
            depth += 1
        elif token.text in (")", "]", "}"):
            depth -= 1
        elif depth == 0:
            if (token.kind == "name" and token.text in _LOOSER) or token.text in _BREAKS_CHAIN:
                return None
            if token.text in ("+", "~"):
                operands.append([])
                continue
        operands[-1].append(token)
    return operands if all(operands) else None


def _split(unit: _Unit, source: str) -> tuple[str, str]:
    """(what closes the left part, what opens the right part) of an output split around a tag: over lines when the
    output stands on a line of its own (``{{- a }}`` / ``{%- generation -%}`` / ``{{- b }}``, the indentation
    repeated), in place otherwise. The tag strips on both sides: only whitespace inserted here lies beside it."""
    line_start = source.rfind("\n", 0, unit.start) + 1
    indent = source[line_start : unit.start]
    if not indent.strip(" \t") and line_start > 0:
        return " }}\n" + indent, "\n" + indent + "{{- "
    return " }}", "{{ "


def _inside_output(number: int, scope: tuple[int, ...], unit: _Unit, source: str) -> list[Point]:
    operands = _operands(unit)
    if operands is None:
        return []
    before, after = _split(unit, source)
    found: list[Point] = []
    for index, operand in enumerate(operands):
        if index:
            left = operands[index - 1][-1].end
            found.append(Point(number, scope, BETWEEN_OPERANDS, left, operand[0].start, before, "{%-", "-%}", after))
        if len(operand) == 1 and operand[0].kind == "string":
            found += _inside_literal(number, scope, operand[0], before, after)
    return found


def _inside_literal(number: int, scope: tuple[int, ...], token: Token, before: str, after: str) -> list[Point]:
    """A place at each character boundary of the literal's value, the two halves written in the literal's own
    spelling (its quotes, its escapes)."""
    quote, body = token.text[0], token.text[1:-1]
    whole = _value(body)
    found: list[Point] = []
    for cut in range(1, len(body)):
        left, right = _value(body[:cut]), _value(body[cut:])
        if left is None or right is None or not left or not right or left + right != whole:
            continue
        at = token.start + 1 + cut
        found.append(Point(number, scope, INSIDE_LITERAL, at, at, quote + before, "{%-", "-%}", after + quote))
    return found


def _value(spelled: str) -> str | None:
    """A string literal's value as Jinja reads it (Python's escapes), None when ``spelled`` cuts an escape."""
    if (len(spelled) - len(spelled.rstrip("\\"))) % 2:
        return None
    try:
        return codecs.decode(spelled.encode("ascii", "backslashreplace"), "unicode-escape")
    except UnicodeDecodeError:
        return None


def _inside_text(number: int, scope: tuple[int, ...], token: Token, source: str) -> list[Point]:
    """Places at the start of template text with something to write and inside it: a tag there keeps the
    indentation before it (``{%+``) and the newline after it (``+%}``)."""
    if not token.text.strip():
        return []
    found: list[Point] = []
    for at in range(token.start, token.end):
        line = source[source.rfind("\n", 0, at) + 1 : at]
        opening = "{%+" if line and not line.strip(" \t") else "{%"
        closing = "+%}" if source[at] == "\n" else "%}"
        rank = BETWEEN_STATEMENTS if at == token.start else BETWEEN_OPERANDS
        found.append(Point(number, scope, rank, at, at, "", opening, closing, ""))
    return found
