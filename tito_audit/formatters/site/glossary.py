"""What each verdict and cause label means, in one sentence each (docs/contract.md's lines: the causes' own
definitions, :data:`tito_audit.audit.core.causes.CAUSES`), and the on-page glossary the chips link to."""

from __future__ import annotations

from collections.abc import Iterable

from tito_audit.audit.checks.mask_compare import LABEL_LINES
from tito_audit.audit.core.causes import CAUSES as CAUSE_DEFINITIONS
from tito_audit.audit.core.causes import value_rewritten
from tito_audit.audit.results import BROKEN, READY, READY_TOOL_ONLY, UNSUPPORTED
from tito_audit.formatters.site.html import esc

NOT_AUDITED = "not audited"

VERDICTS = {
    READY: "Every step kind is text- and seam-stable: one append-only token buffer follows the template through "
    "tool, user and system turns.",
    READY_TOOL_ONLY: "Tool-only steps are stable; steps that append user, system or a second assistant message "
    "are not.",
    BROKEN: "Some tool-only step is not text- or seam-stable: an append-only buffer cannot follow this template.",
    UNSUPPORTED: "No conversation with tool calls and tool results renders faithfully: the template raises or "
    "drops them.",
    NOT_AUDITED: "The model's files were not reachable here, did not load, or the audit failed; the reason is on "
    "its row.",
}

IN_SHORT = {
    READY: "every step kind stays stable",
    READY_TOOL_ONLY: "tool steps stable; user or system steps not",
    BROKEN: "a tool-only step breaks the buffer",
    UNSUPPORTED: "tool calls or results not rendered faithfully",
}
"""A few words per verdict, for legends."""

NOT_ON_PAGES = frozenset({value_rewritten.NAME})
"""Causes the pages' glossaries leave out: ``value-rewritten`` is reported as a rate beside the verdict, and the
glossaries have never defined it (adding it would change the Markdown reports of every model with the written-literals
finding)."""

CAUSES = {
    **{cause.name: cause.line for cause in CAUSE_DEFINITIONS.values() if cause.name not in NOT_ON_PAGES},
    **LABEL_LINES,
}
"""Each cause label's and mask label's definition (their contract lines), in the contract's order."""


def verdict_class(verdict: str) -> str:
    """The CSS class of a verdict chip (``not audited: …`` statuses share one)."""
    return f"v-{verdict}" if verdict in VERDICTS and verdict != NOT_AUDITED else "v-na"


def verdict_chip(verdict: str, label: str | None = None, link: str | None = "", big: bool = False) -> str:
    """A verdict as a coloured chip; ``link`` is the page holding the glossary (``""``: this page, None: no link)."""
    text = esc(label if label is not None else verdict)
    key = verdict if verdict in VERDICTS else NOT_AUDITED
    classes = f"v{' big' if big else ''} {verdict_class(verdict)}"
    if link is None:
        return f'<span class="{classes}" data-verdict="{esc(verdict)}">{text}</span>'
    return f'<a class="{classes}" href="{esc(link)}#verdict-{esc(key)}" data-verdict="{esc(verdict)}">{text}</a>'


def cause_chip(cause: str, link: str = "") -> str:
    """A cause label as a chip linking to its definition (on this page, or on ``link``)."""
    title = CAUSES.get(cause, "")
    return f'<a class="cause" href="{esc(link)}#cause-{esc(cause)}" title="{esc(title)}">{esc(cause)}</a>'


def glossary(causes: Iterable[str], verdicts: Iterable[str] = VERDICTS) -> str:
    """The definitions of ``verdicts`` and ``causes`` (in the order given, each once), with anchors."""
    rows = [
        f'<div class="term" id="verdict-{esc(v)}"><dt>{verdict_chip(v, link=None)}</dt>'
        f"<dd>{esc(VERDICTS[v])}</dd></div>"
        for v in dict.fromkeys(verdicts)
        if v in VERDICTS
    ]
    rows += [
        f'<div class="term" id="cause-{esc(c)}"><dt><span class="cause">{esc(c)}</span></dt>'
        f"<dd>{esc(CAUSES.get(c, 'A label the audit gave; see the README, section Cause labels.'))}</dd></div>"
        for c in dict.fromkeys(causes)
    ]
    return f'<dl class="glossary">{"".join(rows)}</dl>'
