"""``reports/parsers.html``: where the engines' parsers disagree, model by model (docs/contract.md "Engines differ").

For every model of the matrix whose documented parsers of two or more engines are installed, the page gives: how
many of the audit's drawn completions the engines' parsers turned into different messages (and what differed), a
table of the layouts (:mod:`tito_audit.audit.parse_step.call_layouts`) per variant saying where they agree, and for each
case where they disagree the text the model wrote, each engine's message side by side with what it changed and what it
does to the next prompt (whether the buffer stays a prefix, with the place where they part), and the same for the
message the model meant. It is the table to read before choosing an engine for a model.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass

from tito_audit.audit.disagreement import DRAWN, EngineCase, EngineComparison, ParsedSide
from tito_audit.formatters.site.html import document, esc
from tito_audit.parse.engines import engine_label
from tito_audit.parse.parser import TEMPLATE

TEXT_SHOWN = 1200
"""Characters of a completion or a message shown (the rest is cut with a mark)."""


@dataclass(frozen=True)
class ModelComparison:
    """One model's comparison, as the page lists it."""

    model_id: str
    page: str | None
    """Its model page, relative to the matrix's folder."""
    comparison: EngineComparison


def disagreement_page(entries: Sequence[ModelComparison], engines_here: Sequence[str]) -> str:
    """The page (byte-identical for the same entries); ``engines_here``: the engines whose parsers were installed."""
    intro = (
        "Each engine hands a completion to its parsers in its own way and parses it with its own code, so one model "
        "can keep an append-only token buffer behind one engine and lose it behind another. For every model whose "
        "documented parsers of two engines are installed here, the audit's drawn completions and a fixed set of "
        "layouts (built from the model's own template rendering of a call) were handed to each engine's parsers, "
        "each through its own engine's hand-over. Where the parsed messages differ, they are shown side by side with "
        "what each does to the next prompt: whether the buffer, holding what the model wrote, is still its prefix."
    )
    sections = "".join(_model(entry) for entry in entries)
    if not sections:
        installed = ", ".join(engine_label(name) for name in engines_here) or "none"
        sections = (
            '<section class="card"><p>No model of this matrix has documented parsers in two engines whose parsers '
            f"are installed here (engines installed: {esc(installed)}).</p></section>"
        )
    body = (
        '<header class="top"><div class="wrap"><p class="crumb"><a href="index.html">← the matrix</a></p>'
        "<h1>Where the engines' parsers disagree</h1>"
        f'<p class="lede">{esc(intro)}</p></div></header>'
        f'<main class="wrap">{sections}</main>'
    )
    return document("Where the engines' parsers disagree — tito-audit", body)


def _model(entry: ModelComparison) -> str:
    comparison = entry.comparison
    parsers = " · ".join(
        f"{esc(engine_label(engine))}: <code>{esc(parser.removeprefix(engine + ' '))}</code>"
        for engine, parser in zip(comparison.engines, comparison.parsers, strict=True)
    )
    link = f' <a class="small" href="{esc(entry.page)}">model page</a>' if entry.page else ""
    kinds = ", ".join(f"{kind} ×{count}" for kind, count in sorted(comparison.differing_kinds.items()))
    drawn = (
        f"Drawn completions: {comparison.drawn_differing} of {comparison.drawn} parsed into different messages"
        + (f" ({esc(kinds)})" if kinds else "")
        + "."
    )
    anchor = _anchor(entry.model_id)
    cases = [case for case in comparison.cases if not case.agree]
    return (
        f'<section class="card" id="{esc(anchor)}"><h2>{esc(entry.model_id)}{link}</h2><p>{parsers}</p>'
        f"<p>{drawn}</p>{_layout_table(comparison, anchor)}"
        + "".join(_case(case, f"{anchor}-{n}") for n, case in enumerate(cases, start=1))
        + "</section>"
    )


def _layout_table(comparison: EngineComparison, anchor: str) -> str:
    layouts = [case for case in comparison.cases if case.source != DRAWN]
    if not layouts:
        return '<p class="muted small">No drawn turn with content and one call to build the layouts from.</p>'
    variants = list(dict.fromkeys(case.variant for case in layouts))
    names = list(dict.fromkeys(case.source for case in layouts))
    numbers = {id(case): n for n, case in enumerate((c for c in comparison.cases if not c.agree), start=1)}
    rows = []
    for name in names:
        cells = []
        for variant in variants:
            case = next((c for c in layouts if c.source == name and c.variant == variant), None)
            if case is None:
                cells.append('<td class="muted">–</td>')
            elif case.agree:
                cells.append('<td title="the parsed messages agree">same</td>')
            else:
                cells.append(f'<td class="bad"><a href="#{esc(anchor)}-{numbers[id(case)]}">differ</a></td>')
        rows.append(f'<tr><th scope="row">{esc(name)}</th>{"".join(cells)}</tr>')
    head = "".join(f"<th><code>{esc(variant)}</code></th>" for variant in variants)
    return (
        '<div class="table-wrap"><table class="plain"><thead><tr><th>layout</th>'
        f"{head}</tr></thead><tbody>{''.join(rows)}</tbody></table></div>"
    )


def _case(case: EngineCase, anchor: str) -> str:
    where = f"variant {case.variant}, conversation {case.conversation_id}, message {case.turn}"
    ended = "" if case.stopped else " (cut at the token limit: no stop token)"
    sides = "".join(_side(side) for side in case.sides)
    control = _control(case.control) if case.control is not None else ""
    title = "a drawn completion" if case.source == DRAWN else case.source
    return (
        f'<div class="example" id="{esc(anchor)}"><div class="example-head"><strong>{esc(title)}</strong>'
        f'<span class="where">{esc(where)}</span></div>'
        f'<p class="small muted">What the model wrote{esc(ended)}:</p>'
        f'<pre class="textdiff">{esc(_cut(case.text))}</pre>'
        f'<div class="lines">{sides}</div>{control}</div>'
    )


def _side(side: ParsedSide) -> str:
    who = f"{engine_label(side.engine)}'s parser" if side.engine else "the parser"
    name = side.parser.removeprefix(f"{side.engine} ") if side.engine else side.parser
    message = json.dumps(side.message, ensure_ascii=False, indent=1) if side.message else ""
    changed = ", ".join(side.changed) or "nothing"
    return (
        f"<div><h4>{esc(who)} <code>{esc(name)}</code></h4>"
        + (f'<pre class="textdiff">{esc(_cut(message))}</pre>' if message else "")
        + f'<p class="small">Changed against the message meant: {esc(changed)}.</p>'
        + _prefix(side)
        + "</div>"
    )


def _control(side: ParsedSide) -> str:
    if side.keeps_prefix is None:
        verdict = side.detail
    elif side.keeps_prefix:
        verdict = "the next prompt continues the buffer"
    else:
        verdict = "the next prompt rewrites the buffer here too (the template's doing, whatever the parser)"
    return f'<p class="small muted">With the message the model meant ({TEMPLATE}): {esc(verdict)}.</p>'


def _prefix(side: ParsedSide) -> str:
    if side.keeps_prefix is None:
        return f'<p class="small">{esc(side.detail)}</p>'
    mark = "keeps" if side.keeps_prefix else "does not keep"
    head = f'<p class="small"><strong>{mark} the buffer a prefix</strong>: {esc(side.detail)}.</p>'
    if side.parts_at < 0:
        return head
    return (
        head
        + '<div class="textdiff">'
        + _window("buffer", side.buffer, side.parts_at)
        + _window("next prompt", side.next_prompt, side.parts_at)
        + "</div>"
    )


def _window(label: str, text: str, at: int) -> str:
    before, first, after = text[:at], text[at : at + 1], text[at + 1 :]
    return (
        f'<div class="textrow"><span class="side">{esc(label)}</span><code>…{esc(before)}'
        f'<mark class="first">{esc(first)}</mark>{esc(after)}…</code></div>'
    )


def _cut(text: str) -> str:
    return text if len(text) <= TEXT_SHOWN else text[:TEXT_SHOWN] + " …"


def _anchor(model_id: str) -> str:
    return "model-" + "".join(c if c.isalnum() else "-" for c in model_id).strip("-").lower()
