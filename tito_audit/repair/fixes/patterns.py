"""Expression patterns the fixes look for among a template's tokens, and the edits that replace them.

A pattern matches a run of code tokens by their text (``["not", "loop", ".", "last"]``); operands such as the
right side of ``loop.index0 > ns.last_query_index`` are read as a name with attributes and subscripts.
Matches are only taken in expressions a render evaluates (``if``/``elif`` tests, ``{{ }}`` and the right
side of ``{% set %}``), never in a ``set`` target or a ``for`` target.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from tito_audit.repair.fixes.source import Edit, TemplateSource, Token

Where = Callable[[Token], bool]


def evaluated(source: TemplateSource) -> list[Token]:
    """Code tokens of expressions a render evaluates (see the module docstring)."""
    out: list[Token] = []
    by_tag: dict[int, list[Token]] = {}
    for token in source.code():
        by_tag.setdefault(token.tag, []).append(token)
    for tokens in by_tag.values():
        inner = [t for t in tokens if t.kind not in ("block_begin", "block_end", "variable_begin", "variable_end")]
        if not inner:
            continue
        if tokens[0].kind == "variable_begin":
            out += inner
            continue
        keyword = inner[0].text
        if keyword in ("if", "elif"):
            out += inner[1:]
        elif keyword == "set" and any(t.text == "=" for t in inner):
            out += inner[[t.text for t in inner].index("=") + 1 :]
        elif keyword == "for" and any(t.text == "in" for t in inner):
            out += inner[[t.text for t in inner].index("in") + 1 :]
    return out


def find(tokens: Sequence[Token], words: Sequence[str], where: Where) -> list[tuple[int, int]]:
    """(first, last) token indices of each run of ``tokens`` whose texts are ``words`` (first token ``where``)."""
    found = []
    n = len(words)
    for i in range(len(tokens) - n + 1):
        if all(tokens[i + j].text == words[j] for j in range(n)) and where(tokens[i]) and _contiguous(tokens, i, n):
            found.append((i, i + n - 1))
    return found


def operand_end(tokens: Sequence[Token], start: int) -> int | None:
    """Last index of the operand that begins at ``start``: a name, number or string followed by ``.name`` and
    ``[...]`` parts (``ns.last_query_index``, ``messages[loop.index0 + 1]``)."""
    if start >= len(tokens) or tokens[start].kind not in ("name", "integer", "float", "string"):
        return None
    end = start
    while end + 1 < len(tokens):
        following = tokens[end + 1].text
        if following == "." and end + 2 < len(tokens) and tokens[end + 2].kind == "name":
            end += 2
        elif following == "[":
            depth, probe = 0, end + 1
            while probe < len(tokens):
                depth += {"[": 1, "]": -1}.get(tokens[probe].text, 0)
                if depth == 0:
                    break
                probe += 1
            if probe >= len(tokens):
                return end
            end = probe
        else:
            break
    return end


def replace_run(tokens: Sequence[Token], first: int, last: int, text: str, fix: str) -> Edit:
    return Edit(tokens[first].start, tokens[last].end, text, fix)


class Edits:
    """The edits of one fix, kept from overlapping: a run of tokens is replaced at most once, by the first
    pattern that takes it (so ``not loop.last`` is not also edited as ``loop.last``)."""

    def __init__(self, tokens: Sequence[Token], fix: str) -> None:
        self.tokens, self.fix = tokens, fix
        self.edits: list[Edit] = []
        self._taken: set[int] = set()

    def take(self, first: int, last: int, text: str) -> None:
        run = range(first, last + 1)
        if any(i in self._taken for i in run):
            return
        self._taken.update(run)
        self.edits.append(replace_run(self.tokens, first, last, text, self.fix))

    def pin_loop_last(self, where: Where, value: bool) -> None:
        """Replace ``loop.last`` (and ``not loop.last``) where ``where`` holds by a constant: every such message then
        renders as the last one (``value=True``) or as one that something follows (``value=False``)."""
        for first, last in find(self.tokens, ["not", "loop", ".", "last"], where):
            self.take(first, last, "false" if value else "true")
        for first, last in find(self.tokens, ["loop", ".", "last"], where):
            self.take(first, last, "true" if value else "false")


def _contiguous(tokens: Sequence[Token], start: int, n: int) -> bool:
    """The run lies in one tag (a pattern never spans two tags)."""
    return len({tokens[start + j].tag for j in range(n)}) == 1
