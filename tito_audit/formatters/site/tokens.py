"""The picture of a break: the two token windows of a failure as aligned rows of chips.

The first row is the earlier side (the token buffer as sampled, or the render before the append), the second
the later side (the template's render); column ``i`` holds token ``start + i`` of both. The first position
where the ids differ is marked; whitespace is drawn (``·`` space, ``⏎`` newline, ``⇥`` tab, ``␍`` CR) and
special tokens get their own style. Below, the same place as text, from the failure's text windows.
"""

from __future__ import annotations

import re
from collections.abc import Collection

from tito_audit.audit.core.diff import WINDOW_CHARS
from tito_audit.audit.results import Failure, TokenWindow
from tito_audit.formatters.common import texts_at_difference
from tito_audit.formatters.site.html import esc

_VISIBLE = str.maketrans({" ": "·", "\n": "⏎", "\t": "⇥", "\r": "␍"})
_SPECIAL = re.compile(r"^(<[^\s<>]{1,48}>|\[/?[A-Z][A-Z_]{1,24}\])$")
"""Texts that read as control tokens: ``<|im_end|>``, ``<think>``, ``<｜tool▁outputs▁end｜>``, ``[INST]``."""
TEXT_BEFORE = 48
TEXT_AFTER = 64
"""Characters of the text windows shown before and after the divergence."""


def visible(text: str) -> str:
    """Whitespace drawn as symbols, an empty token as ``∅``."""
    return text.translate(_VISIBLE) if text else "∅"


def visible_html(text: str) -> str:
    """:func:`visible`, escaped, with the symbols that stand for whitespace set apart (``<i class="ws">``)."""
    if not text:
        return '<i class="ws">∅</i>'
    out = []
    for char in text:
        symbol = _VISIBLE.get(ord(char))
        out.append(f'<i class="ws">{symbol}</i>' if symbol else esc(char))
    return "".join(out)


def is_special(text: str, specials: Collection[str] = ()) -> bool:
    return text in specials or bool(_SPECIAL.match(text))


def first_difference(failure: Failure) -> int | None:
    """The position (within the windows) of the first token whose id differs: the failure's ``token_index`` when
    the ids there differ, else the first differing position."""
    a, b = failure.expected, failure.actual
    if a is None or b is None:
        return None
    if failure.token_index is not None and a.start == b.start:
        at = failure.token_index - a.start
        if at >= 0 and (at >= len(a.ids) or at >= len(b.ids) or a.ids[at] != b.ids[at]):
            return at
    length = max(len(a.ids), len(b.ids))
    for i in range(length):
        if i >= len(a.ids) or i >= len(b.ids) or a.ids[i] != b.ids[i]:
            return i
    return None


def _chip(window: TokenWindow, i: int, state: str, specials: Collection[str]) -> str:
    if i >= len(window.ids):
        return '<td class="none">–</td>'
    text = window.texts[i]
    kind = " special" if is_special(text, specials) else ""
    label = f"token {window.start + i} · id {window.ids[i]} · {text!r}"
    return (
        f'<td class="{state}"><span class="tok{kind}" title="{esc(label)}" data-id="{window.ids[i]}">'
        f"{visible_html(text)}</span></td>"
    )


def token_diff(failure: Failure, labels: tuple[str, str], specials: Collection[str] = ()) -> str:
    """Two aligned rows of token chips with the first differing token marked (empty without windows)."""
    a, b = failure.expected, failure.actual
    if a is None or b is None or (not a.ids and not b.ids):
        return ""
    first = first_difference(failure)
    length = max(len(a.ids), len(b.ids))
    states = ["same" if first is None or i < first else "first" if i == first else "after" for i in range(length)]
    head = "".join(
        f'<th scope="col" class="{state}">{"▼ " if state == "first" else ""}{a.start + i}</th>'
        for i, state in enumerate(states)
    )
    rows = []
    for window, label, side in ((a, labels[0], "earlier"), (b, labels[1], "later")):
        cells = "".join(_chip(window, i, states[i], specials) for i in range(length))
        rows.append(f'<tr class="{side}"><th scope="row">{esc(label)}</th>{cells}</tr>')
    caption = (
        f"first differing token: position {a.start + first}"
        if first is not None
        else "the token windows are equal here"
    )
    return (
        f'<div class="tokdiff"><table><caption>{esc(caption)}</caption>'
        f'<thead><tr><th scope="row">token</th>{head}</tr></thead><tbody>{"".join(rows)}</tbody></table></div>'
    )


def _text_line(window: str, at: int, cut_before: bool, label: str) -> str:
    """One side's text window, the part from its first differing character (``at``) on marked."""
    same, rest = window[:at], window[at:]
    lead = "…" if cut_before else ""
    tail = "…" if len(rest) >= TEXT_AFTER else ""
    changed = f'<mark class="first">{visible_html(rest)}</mark>' if rest else '<mark class="first">(ends)</mark>'
    return (
        f'<div class="textrow"><span class="side">{esc(label)}</span>'
        f"<code>{lead}{visible_html(same) if same else ''}{changed}{tail}</code></div>"
    )


def text_diff(failure: Failure, labels: tuple[str, str]) -> str:
    """The divergence as text: both text windows from a little before the first differing character, the rest
    of each side marked (empty when the failure has no text windows)."""
    texts = texts_at_difference(failure, TEXT_BEFORE, TEXT_AFTER)
    if texts is None or failure.char_index is None:
        return ""
    at = min(TEXT_BEFORE, WINDOW_CHARS, failure.char_index)
    cut_before = failure.char_index > at
    return (
        f'<div class="textdiff" aria-label="the same place as text, from character {failure.char_index}">'
        + _text_line(texts[0], at, cut_before, labels[0])
        + _text_line(texts[1], at, cut_before, labels[1])
        + "</div>"
    )
