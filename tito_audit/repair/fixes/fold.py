"""Constant folding after a fix: the edits replace tests by ``true``/``false``; a person would not leave them there.

Fixes edit expressions in place (``loop.last`` becomes ``true``), which leaves ``{%- if true %}``,
``{%- elif false %}`` or ``x and true`` behind. Folding rewrites what they leave, so the diff a maintainer reads
is the smallest that carries the change:

- in ``if``/``elif`` tests and on the right of ``{% set %}``: ``X and true`` → ``X``, ``false or X`` → ``X``,
  ``X or true`` → ``true``, ``not false`` → ``true``, ``X and X`` → ``X``, redundant parentheses dropped;
- a branch whose test became constant: ``{% if true %}A{% else %}B{% endif %}`` → ``A``, an ``elif false``
  branch removed, ``elif true`` becoming ``else``.

A removed tag takes with it the whitespace it stripped (``{%-``/``-%}``, and the newline and indentation that
``trim_blocks``/``lstrip_blocks`` remove), so the template renders the same. :func:`fold` is a pure text
transformation; :mod:`tito_audit.repair.fixes.search` adopts a folded template only when it renders exactly as
the unfolded one and earns the same audit.

>>> fold("{%- if m.x and true %}A{%- elif false %}B{%- endif %}")
'{%- if m.x %}A{%- endif %}'
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from tito_audit.repair.fixes.alike import renders_alike
from tito_audit.repair.fixes.source import TemplateSource, Token

TRUE, FALSE = "true", "false"
_CONSTANTS = {"true": TRUE, "True": TRUE, "false": FALSE, "False": FALSE}
_DELIMITERS = ("block_begin", "block_end", "variable_begin", "variable_end")
_OPEN = {"(": ")", "[": "]", "{": "}"}
MAX_PASSES = 200


@dataclass(frozen=True)
class _Expr:
    """A folded expression: its text, and its top operator (``or``, ``and``, ``not`` or ``atom``)."""

    text: str
    op: str = "atom"

    @property
    def constant(self) -> str | None:
        return self.text if self.text in (TRUE, FALSE) else None

    def operand_of(self, op: str) -> str:
        """The text as an operand of ``op`` (parenthesized when it binds looser)."""
        looser = {"and": ("or",), "not": ("or", "and")}.get(op, ())
        return f"({self.text})" if self.op in looser else self.text


def fold(text: str) -> str:
    """``text`` (a chat template) with constant tests folded (see the module docstring); the text itself when
    nothing folds or it does not lex."""
    original = text
    for _ in range(MAX_PASSES):
        try:
            source = TemplateSource.parse(text)
        except Exception:
            return original
        folded = _fold_once(source)
        if folded is None or folded == text:
            break
        text = folded
    if original.endswith("%}\n") and text.endswith("\n") and not text.endswith("%}\n"):
        # Jinja drops one newline at the very end of a template: the original's was after a tag it removed with
        # the tag's line, so the text now ending the template keeps its own newline only with one more after it
        text += "\n"
    if text.endswith("\n") != original.endswith("\n"):
        return original  # Jinja drops one newline at the very end of a template: the render would change
    if text != original and not renders_alike(original, text):
        return original  # whitespace control met a join the checks above did not foresee
    return text


# -- expressions -------------------------------------------------------------------------------------------------


def fold_expression(tokens: Sequence[Token], source: str) -> _Expr | None:
    """The folded boolean structure of an expression's tokens; None when it is not a plain and/or/not of
    operands (an inline ``x if c else y`` at its top level, or nothing to fold)."""
    top = _top_level(tokens)
    if any(tokens[i].text in ("if", "else") for i in top):
        return None
    return _or(tokens, top, source)


def _top_level(tokens: Sequence[Token]) -> list[int]:
    """Indices of the tokens outside any brackets."""
    depth, top = 0, []
    for i, token in enumerate(tokens):
        if token.text in _OPEN:
            depth += 1
        elif token.text in _OPEN.values():
            depth -= 1
        elif depth == 0:
            top.append(i)
    return top


def _split(tokens: Sequence[Token], word: str) -> list[Sequence[Token]]:
    top = set(_top_level(tokens))
    parts, start = [], 0
    for i, token in enumerate(tokens):
        if i in top and token.kind == "name" and token.text == word:
            parts.append(tokens[start:i])
            start = i + 1
    parts.append(tokens[start:])
    return parts


def _or(tokens: Sequence[Token], top: list[int], source: str) -> _Expr | None:
    operands = [_and(part, source) for part in _split(tokens, "or")]
    if any(o is None for o in operands):
        return None
    kept: list[_Expr] = []
    for operand in operands:
        assert operand is not None
        if operand.constant == TRUE:
            return _Expr(TRUE)
        if operand.constant != FALSE and operand.text not in [k.text for k in kept]:
            kept.append(operand)
    if not kept:
        return _Expr(FALSE)
    if len(kept) == 1:
        return kept[0]
    return _Expr(" or ".join(k.operand_of("or") for k in kept), "or")


def _and(tokens: Sequence[Token], source: str) -> _Expr | None:
    operands = [_not(part, source) for part in _split(tokens, "and")]
    if any(o is None for o in operands):
        return None
    kept: list[_Expr] = []
    for operand in operands:
        assert operand is not None
        if operand.constant == FALSE:
            return _Expr(FALSE)
        if operand.constant != TRUE and operand.text not in [k.text for k in kept]:
            kept.append(operand)
    if not kept:
        return _Expr(TRUE)
    if len(kept) == 1:
        return kept[0]
    return _Expr(" and ".join(k.operand_of("and") for k in kept), "and")


def _not(tokens: Sequence[Token], source: str) -> _Expr | None:
    if not tokens:
        return None
    if tokens[0].kind == "name" and tokens[0].text == "not":
        inner = _not(tokens[1:], source)
        if inner is None:
            return None
        if inner.constant is not None:
            return _Expr(FALSE if inner.constant == TRUE else TRUE)
        return _Expr("not " + inner.operand_of("not"), "not")
    return _atom(tokens, source)


def _atom(tokens: Sequence[Token], source: str) -> _Expr | None:
    if len(tokens) == 1 and tokens[0].text in _CONSTANTS:
        return _Expr(_CONSTANTS[tokens[0].text])
    if tokens[0].text == "(" and tokens[-1].text == ")" and _closes_at(tokens, 0) == len(tokens) - 1:
        inner = tokens[1:-1]
        folded = fold_expression(inner, source)
        if folded is None:
            return _Expr(source[tokens[0].start : tokens[-1].end])
        return folded
    return _Expr(source[tokens[0].start : tokens[-1].end])


def _closes_at(tokens: Sequence[Token], start: int) -> int | None:
    depth = 0
    for i in range(start, len(tokens)):
        if tokens[i].text in _OPEN:
            depth += 1
        elif tokens[i].text in _OPEN.values():
            depth -= 1
            if depth == 0:
                return i
    return None


# -- tags and branches ---------------------------------------------------------------------------------------------


@dataclass
class _Tag:
    tokens: list[Token]
    start: int
    """Where the whitespace the tag strips before it begins (the end of the token before it)."""
    end: int
    """Where the tag ends, the whitespace it strips after it included."""

    @property
    def inner(self) -> list[Token]:
        return [t for t in self.tokens if t.kind not in _DELIMITERS and t.kind != "whitespace"]

    @property
    def keyword(self) -> str:
        inner = self.inner
        return inner[0].text if inner and self.tokens[0].kind == "block_begin" else ""


def _tags(source: TemplateSource) -> list[_Tag]:
    by_tag: dict[int, list[Token]] = {}
    previous_end: dict[int, int] = {}
    last_end = 0
    for token in source.tokens:
        if token.tag >= 0 and token.tag not in by_tag:
            previous_end[token.tag] = last_end
        if token.tag >= 0:
            by_tag.setdefault(token.tag, []).append(token)
        last_end = token.end
    return [_Tag(tokens, previous_end[tag], tokens[-1].end) for tag, tokens in sorted(by_tag.items())]


def _fold_once(source: TemplateSource) -> str | None:
    """The source with the first foldable test folded; None when there is none."""
    text = source.source
    tags = _tags(source)
    for tag in tags:
        inner = tag.inner
        if not any(token.text in _CONSTANTS for token in inner[1:]):
            continue  # only what an edit left is folded: the authors' own expressions stay as written
        if tag.keyword in ("if", "elif") and len(inner) > 1:
            folded = fold_expression(inner[1:], text)
            current = text[inner[1].start : inner[-1].end]
            if folded is not None and folded.constant is not None:
                branch = _fold_branch(text, tags, tag, folded.constant)
                if branch is not None:
                    return branch
                continue
            if folded is not None and folded.text != current:
                return text[: inner[1].start] + folded.text + text[inner[-1].end :]
        elif tag.keyword == "set" and len(inner) > 3 and inner[2].text == "=":
            folded = fold_expression(inner[3:], text)
            current = text[inner[3].start : inner[-1].end]
            if folded is not None and folded.text != current:
                return text[: inner[3].start] + folded.text + text[inner[-1].end :]
    return None


def _chain(tags: list[_Tag], first: int) -> list[int]:
    """The tag indices of the if-chain that begins at ``tags[first]``: the ``if``, its ``elif``/``else`` and the
    ``endif``."""
    chain, depth = [first], 0
    for i in range(first + 1, len(tags)):
        keyword = tags[i].keyword
        if keyword == "if":
            depth += 1
        elif keyword == "endif":
            if depth == 0:
                chain.append(i)
                return chain
            depth -= 1
        elif keyword in ("elif", "else") and depth == 0:
            chain.append(i)
    return chain


def _chain_of(tags: list[_Tag], tag: _Tag) -> tuple[list[int], int]:
    """The chain ``tag`` belongs to and its position in it."""
    index = tags.index(tag)
    for first in range(index, -1, -1):
        if tags[first].keyword == "if":
            chain = _chain(tags, first)
            if index in chain:
                return chain, chain.index(index)
    raise ValueError("an elif outside an if chain")


def _fold_branch(text: str, tags: list[_Tag], tag: _Tag, value: str) -> str | None:
    """``text`` with the branch of ``tag`` (whose test is ``value``) folded; None when it cannot be done safely.
    Removed tags take their whole line when they stand alone on it, else the whitespace they strip."""
    chain, position = _chain_of(tags, tag)
    parts = [tags[i] for i in chain]
    if len(parts) < 2 or parts[-1].keyword != "endif":
        return None
    for whole_lines in (True, False):
        removals, renamed = _branch_edits(text, parts, position, value, whole_lines)
        folded = _joined(text, _complement(removals, len(text)), renamed)
        if folded is not None:
            return folded
    return None


def _branch_edits(
    text: str, parts: list[_Tag], position: int, value: str, whole_lines: bool
) -> tuple[list[tuple[int, int]], dict[int, tuple[int, str]]]:
    """(ranges to remove, keywords to rename) that fold branch ``position`` of the chain ``parts``."""
    tag, endif = parts[position], parts[-1]
    first, last = (lambda t: _span(text, t, whole_lines)[0]), (lambda t: _span(text, t, whole_lines)[1])
    if value == TRUE and position == 0:  # the first branch always runs: its body alone stays
        return [_span(text, tag, whole_lines), (first(parts[1]), last(endif))], {}
    if value == TRUE:  # an elif that always holds becomes the else; the branches after it go
        return [(first(parts[position + 1]), first(endif))], {tag.inner[0].start: (_test_length(tag), "else")}
    following = parts[position + 1]
    if position > 0:  # an elif that never holds: its branch goes
        return [(first(tag), first(following))], {}
    if following.keyword == "elif":  # the first elif takes the place of the if
        return [(first(tag), first(following))], {following.inner[0].start: (len("elif"), "if")}
    if following.keyword == "else":  # only the else body stays
        return [(first(tag), last(following)), _span(text, endif, whole_lines)], {}
    return [(first(tag), last(endif))], {}  # nothing of the chain renders


def _test_length(tag: _Tag) -> int:
    return tag.inner[-1].end - tag.inner[0].start


def _span(text: str, tag: _Tag, whole_line: bool) -> tuple[int, int]:
    """What removing ``tag`` removes: its whole line when it stands alone on it (and ``whole_line``), else the tag
    with the whitespace it strips."""
    if whole_line:
        begin = tag.tokens[0].start
        line_start = text.rfind("\n", 0, begin) + 1
        closing = tag.tokens[-1]
        delimiter_end = closing.start + _delimiter_length(closing.text)
        newline = text.find("\n", delimiter_end)
        alone = not text[line_start:begin].strip(" \t") and newline >= 0 and not text[delimiter_end:newline].strip()
        if alone:
            return line_start, newline + 1
    return tag.start, tag.end


def _delimiter_length(closing: str) -> int:
    """Length of a tag's closing delimiter (``%}``, ``-%}``, ``+%}``) within its token (which may hold the
    whitespace it strips)."""
    for delimiter in ("-%}", "+%}", "%}"):
        if closing.startswith(delimiter):
            return len(delimiter)
    return len(closing)


def _complement(removals: list[tuple[int, int]], size: int) -> list[tuple[int, int]]:
    """The ranges of ``[0, size)`` that no removal covers, in order (empty ones kept: they are join points)."""
    keep, position = [], 0
    for start, end in sorted(removals):
        keep.append((position, max(position, start)))
        position = max(position, end)
    keep.append((position, size))
    return keep


_LSTRIPPED_BLOCK = re.compile(r"[ \t]+\{%(?![-+])")
_BLOCK_START = re.compile(r"[ \t]*\{%(?![-+])")
_STRIPS_LEFT = re.compile(r"\s*\{[%{#]-")
_STRIPS_RIGHT = re.compile(r"-[%}#]\}\s*$")
_ENDS_BLOCK = re.compile(r"(?<![-+])%\}$")


def _leading(left: str, right: str) -> tuple[bool, bool, bool]:
    """Whether whitespace at the start of ``right`` is stripped after ``left``: by ``lstrip_blocks`` (spaces at a
    line start before a block tag), by a ``-%}`` ending ``left``, or (a newline) by ``trim_blocks``."""
    line = left[left.rfind("\n") + 1 :]
    return (
        not line.strip(" \t") and bool(_LSTRIPPED_BLOCK.match(right)),
        bool(_STRIPS_RIGHT.search(left)) and right[:1].isspace(),
        bool(_ENDS_BLOCK.search(left)) and right[:1] == "\n",
    )


def _trailing(left: str, right: str) -> tuple[bool, bool]:
    """Whether whitespace at the end of ``left`` is stripped before ``right``: by ``lstrip_blocks`` or by a
    ``{%-`` starting ``right``."""
    line = left[left.rfind("\n") + 1 :]
    return (
        bool(line) and not line.strip(" \t") and bool(_BLOCK_START.match(right)),
        bool(_STRIPS_LEFT.match(right)) and left[-1:].isspace(),
    )


def _joined(text: str, keep: list[tuple[int, int]], renamed: dict[int, tuple[int, str]]) -> str | None:
    """The kept ranges of ``text`` joined (keywords renamed), or None when a join would change what whitespace
    control strips next to it (the render would change)."""
    out, tail_end = "", 0  # tail_end: where, in ``text``, the last character of ``out`` came from
    for start, end in keep:
        piece = text[start:end]
        for at, (length, word) in sorted(renamed.items(), reverse=True):
            if start <= at < end:
                piece = piece[: at - start] + word + piece[at - start + length :]
        if _leading(out, piece) != _leading(text[:start], piece):
            return None
        if _trailing(out, piece) != _trailing(out, text[tail_end:]):
            return None
        out += piece
        if piece:
            tail_end = end
    return out
