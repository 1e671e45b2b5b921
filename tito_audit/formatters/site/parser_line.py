"""The line of a model page that gives the verdict with the engine's parser, beside the perfect-inverse verdict."""

from __future__ import annotations

from tito_audit.audit.results import AuditReport
from tito_audit.formatters.site.glossary import verdict_chip
from tito_audit.formatters.site.html import esc


def parser_line(report: AuditReport) -> str:
    """The verdict with the engine's parser, beside the perfect-inverse verdict above it."""
    if report.parser_verdict is None or report.parser is None:
        return ""
    return (
        f'<div class="parser-verdict" id="parser-verdict"><strong>With its engine\'s parser</strong> '
        f"<code>{esc(str(report.parser.get('name')))}</code> {verdict_chip(report.parser_verdict)} "
        f'<span class="muted small">{esc(str(report.parser.get("why") or ""))}</span></div>'
    )
