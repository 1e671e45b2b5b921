"""Syntax colouring for template lines and unified diffs of templates (Jinja), as escaped HTML spans.

A line is classified character by character (template text, tag delimiters, keywords, strings, numbers,
names after ``|``, comments), so that the changed characters of a diff line can be marked on top of the
colours without breaking a span.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Sequence

from tito_audit.formatters.site.html import esc

KEYWORDS = frozenset(
    (
        *("if", "elif", "else", "endif", "for", "endfor", "in", "not", "and", "or", "is", "set", "endset"),
        *("macro", "endmacro", "call", "endcall", "filter", "endfilter", "raw", "endraw", "with", "endwith"),
        *("true", "false", "none", "True", "False", "None", "loop", "namespace"),
    )
)
_OPEN = re.compile(r"\{[{%#]-?")
_INSIDE = re.compile(
    r"""(?P<str>'(?:\\.|[^'\\])*'?|"(?:\\.|[^"\\])*"?)|(?P<num>\b\d+(?:\.\d+)?\b)|(?P<filter>\|\s*\w+)"""
    r"""|(?P<name>\b[A-Za-z_]\w*\b)"""
)
_CLOSE = {"{{": "}}", "{%": "%}", "{#": "#}"}


def classes(line: str) -> list[str]:
    """One class per character of ``line``: ``t`` template text, ``d`` delimiter, ``k`` keyword, ``s`` string,
    ``n`` number, ``f`` filter, ``c`` comment, ``x`` other code."""
    out = ["t"] * len(line)
    position = 0
    while True:
        opened = _OPEN.search(line, position)
        if opened is None:
            return out
        kind = opened.group()[:2]
        closing = line.find(_CLOSE[kind], opened.end())
        end = len(line) if closing < 0 else closing + 2
        body_end = len(line) if closing < 0 else closing
        if body_end > opened.end() and line[body_end - 1] == "-":
            body_end -= 1
        for i in range(opened.start(), end):
            out[i] = "c" if kind == "{#" else "d" if i < opened.end() or i >= body_end else "x"
        if kind != "{#":
            for match in _INSIDE.finditer(line, opened.end(), body_end):
                group = match.lastgroup
                assert group is not None
                if group == "name" and match.group() not in KEYWORDS:
                    continue
                mark = {"str": "s", "num": "n", "filter": "f", "name": "k"}[group]
                for i in range(match.start(), match.end()):
                    out[i] = mark
        position = end


def _spans(line: str, kinds: Sequence[str], changed: Sequence[bool]) -> str:
    """Consecutive characters of one (class, changed) as one span."""
    out, start = [], 0
    for i in range(1, len(line) + 1):
        if i == len(line) or (kinds[i], changed[i]) != (kinds[start], changed[start]):
            text = esc(line[start:i])
            if kinds[start] != "t":
                text = f'<span class="j{kinds[start]}">{text}</span>'
            out.append(f"<mark>{text}</mark>" if changed[start] else text)
            start = i
    return "".join(out)


def highlight(line: str, changed: Sequence[bool] | None = None) -> str:
    """``line`` coloured, with the characters flagged in ``changed`` marked."""
    return _spans(line, classes(line), changed or [False] * len(line))


_WORD = re.compile(r"\w+|\s+|[^\w\s]")


def _changed_characters(old: str, new: str) -> tuple[list[bool], list[bool]]:
    """The characters of two paired lines that differ, compared word by word (a changed name is marked whole)."""
    words = [[m.span() for m in _WORD.finditer(text)] for text in (old, new)]
    texts = [[text[a:b] for a, b in spans] for text, spans in zip((old, new), words, strict=True)]
    left, right = [False] * len(old), [False] * len(new)
    matcher = difflib.SequenceMatcher(None, texts[0], texts[1], autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            continue
        for flags, spans, start, end in ((left, words[0], i1, i2), (right, words[1], j1, j2)):
            for a, b in spans[start:end]:
                flags[a:b] = [True] * (b - a)
    return left, right


def diff_html(diff: str) -> str:
    """A unified diff as a table of coloured lines; removed and added lines that pair up (a run of ``-`` lines
    followed by as many ``+`` lines) get their changed characters marked."""
    lines = diff.splitlines()
    marks: dict[int, list[bool]] = {}
    i = 0
    while i < len(lines):
        if lines[i].startswith("-") and not lines[i].startswith("---"):
            j = i
            while j < len(lines) and lines[j].startswith("-") and not lines[j].startswith("---"):
                j += 1
            k = j
            while k < len(lines) and lines[k].startswith("+") and not lines[k].startswith("+++"):
                k += 1
            if k - j == j - i:
                for offset in range(j - i):
                    removed, added = _changed_characters(lines[i + offset][1:], lines[j + offset][1:])
                    marks[i + offset], marks[j + offset] = removed, added
            i = max(k, i + 1)
        else:
            i += 1
    rows = []
    old = new = 0
    for n, line in enumerate(lines):
        if line.startswith(("---", "+++")):
            rows.append(f'<tr class="file"><td></td><td></td><td class="src">{esc(line)}</td></tr>')
            continue
        if line.startswith("@@"):
            found = re.match(r"@@ -(\d+)(?:,\d+)? \+(\d+)", line)
            if found:
                old, new = int(found.group(1)), int(found.group(2))
            rows.append(f'<tr class="hunk"><td></td><td></td><td class="src">{esc(line)}</td></tr>')
            continue
        sign, body = (line[:1], line[1:]) if line else (" ", "")
        kind = {"-": "del", "+": "add"}.get(sign, "ctx")
        left = "" if kind == "add" else str(old)
        right = "" if kind == "del" else str(new)
        old += kind != "add"
        new += kind != "del"
        code = highlight(body, marks.get(n))
        rows.append(
            f'<tr class="{kind}"><td class="ln">{left}</td><td class="ln">{right}</td>'
            f'<td class="src"><span class="sign">{esc(sign)}</span>{code}</td></tr>'
        )
    return f'<div class="code diff"><table>{"".join(rows)}</table></div>'


def source_lines(lines: Sequence[tuple[int, str, bool]]) -> str:
    """Numbered template lines, coloured; ``(number, text, accent)`` with ``accent`` for lines to stress."""
    rows = "".join(
        f'<tr class="{"accent" if accent else "plain"}"><td class="ln">{number}</td><td>{highlight(text)}</td></tr>'
        for number, text, accent in lines
    )
    return f'<div class="code"><table>{rows}</table></div>'
