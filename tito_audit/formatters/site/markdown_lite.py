"""The small Markdown the tool writes itself (way-out pages: headings, bullets, tables, paragraphs, ``code``,
``**bold**``, relative ``[links](x)``) as HTML, so a page shows the same words as its Markdown twin.

It is not a Markdown parser for arbitrary input: text is escaped first and only these constructs are read back.
Table cells that hold a verdict become verdict chips.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from tito_audit.formatters.site.glossary import VERDICTS, verdict_chip
from tito_audit.formatters.site.html import esc

_INLINE = re.compile(r"`(?P<code>[^`]*)`|\*\*(?P<bold>[^*]+)\*\*|\[(?P<label>[^\]]+)\]\((?P<href>[^)\s]+)\)")
_SAFE_HREF = re.compile(r"^[\w./#-]+$")
"""Relative links only (no scheme, no ``javascript:``)."""


def inline(text: str) -> str:
    """Escaped ``text`` with code spans, bold and relative links made markup."""
    out, position = [], 0
    for match in _INLINE.finditer(text):
        out.append(esc(text[position : match.start()]))
        if match.group("code") is not None:
            out.append(f"<code>{esc(match.group('code'))}</code>")
        elif match.group("bold") is not None:
            out.append(f"<strong>{inline(match.group('bold'))}</strong>")
        elif _SAFE_HREF.match(match.group("href")) and ":" not in match.group("href"):
            out.append(f'<a href="{esc(match.group("href"))}">{esc(match.group("label"))}</a>')
        else:
            out.append(esc(match.group()))
        position = match.end()
    out.append(esc(text[position:]))
    return "".join(out)


def _cells(line: str) -> list[str]:
    body = line.strip()
    body = body[1:] if body.startswith("|") else body
    body = body[:-1] if body.endswith("|") and not body.endswith("\\|") else body
    return [cell.strip().replace("\\|", "|") for cell in re.split(r"(?<!\\)\|", body)]


def _cell(text: str, header: bool) -> str:
    name = "th" if header else "td"
    bare = text.strip("`* ")
    content = verdict_chip(bare, link=None) if not header and bare in VERDICTS else inline(text)
    return f"<{name}>{content}</{name}>"


def _table(lines: Sequence[str]) -> str:
    head = _cells(lines[0])
    body = [_cells(line) for line in lines[2:]]
    rows = "".join("<tr>" + "".join(_cell(c, False) for c in row) + "</tr>" for row in body)
    return (
        '<div class="table-wrap"><table class="plain"><thead><tr>'
        + "".join(_cell(c, True) for c in head)
        + f"</tr></thead><tbody>{rows}</tbody></table></div>"
    )


def to_html(lines: Sequence[str], heading_level: int = 3) -> str:
    """``lines`` of the tool's Markdown as HTML; ``#`` headings start at ``heading_level``."""
    out: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        if not line.strip():
            i += 1
        elif line.startswith("#"):
            depth = len(line) - len(line.lstrip("#"))
            level = min(6, heading_level + depth - 2)
            out.append(f"<h{level}>{inline(line[depth:].strip())}</h{level}>")
            i += 1
        elif line.startswith("|"):
            j = i
            while j < len(lines) and lines[j].startswith("|"):
                j += 1
            out.append(_table(lines[i:j]))
            i = j
        elif line.startswith("- "):
            j = i
            while j < len(lines) and lines[j].startswith("- "):
                j += 1
            out.append("<ul>" + "".join(f"<li>{inline(item[2:])}</li>" for item in lines[i:j]) + "</ul>")
            i = j
        else:
            j = i
            while j < len(lines) and lines[j].strip() and not lines[j].startswith(("#", "|", "- ")):
                j += 1
            out.append("<p>" + inline(" ".join(lines[i:j])) + "</p>")
            i = j
    return "\n".join(out)
