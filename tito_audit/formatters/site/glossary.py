"""What each verdict and cause label means, in one sentence each (docs/audited.md, "Verdicts" and "Cause labels"
in short), and the on-page glossary the chips link to."""

from __future__ import annotations

from collections.abc import Iterable

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

CAUSES = {
    "reasoning-pruned": "The reasoning of an earlier assistant turn vanishes or changes once later messages exist.",
    "empty-think-dropped": "The model closed its reasoning block at once, and history drops or alters that empty "
    "block.",
    "gen-prompt-mismatch": "The generation prompt disagrees with how the template renders the same turn in history.",
    "stop-token-swap": "History ends an assistant turn with another token than the one the engine stopped on.",
    "tail-after-stop": "Only the text after an assistant turn's stop token changes in history.",
    "closing-rewritten": "A tool, user or system message is closed one way while it is the last message and "
    "another way once something follows it.",
    "bpe-seam": "The text prefix holds, but a BPE merge crosses the join between the buffer and the appended text.",
    "content-rewritten": "A message's text is rewritten in history: trimmed, stripped, escaped or moved elsewhere.",
    "tool-call-reformatted": "Tool-call arguments are re-serialized in history: spacing, key order or escaping.",
    "history-dependent-suffix": "The suffix a history-free stand-in conversation gives differs from the real bridge.",
    "nondeterministic-template": "Two renders of the same input differ (a date or randomness in the template).",
    "template-error": "The template raised an error for this conversation.",
    "special-token-literal": "Text inside a message encodes to a control token: a role-injection risk.",
    "normalization": "The tokenizer's normalizer changes the text, so decoding does not give it back.",
    "noncanonical-split": "A sampled token sequence that is not the canonical encoding does not survive decode and "
    "re-encode (every BPE model shows it).",
    "bos-duplication": "The tokenizer adds a BOS token that the template already wrote.",
    "utf8-split": "Decoding a partial byte sequence yields U+FFFD.",
    "parse-lossy": "The engine's parser does not give back the message the template rendered (content whitespace, "
    "reasoning boundary, arguments re-serialized, a call lost, an id refused), and the next prompt rendered from "
    "its message no longer continues the buffer.",
    "stop-token-untrained": "The template's training mask (its generation blocks) leaves out the stop token the model "
    "sampled: a model trained on it is never trained to stop.",
    "sampled-untrained": "The template's training mask leaves out tokens the model sampled (a tool call written "
    "outside the generation block).",
    "injected-trained": "The template's training mask holds tokens the model never sampled: the role header, the "
    "generation prompt, an empty reasoning block the template writes, the text after the stop token.",
}


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
