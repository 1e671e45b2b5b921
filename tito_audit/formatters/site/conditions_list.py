"""The lines under a model page's verdict that say when it breaks: the plain loop's verdict and the settings, forms
and shapes the failures come with, with the perfect inverse and with each engine's parser; the refused settings."""

from __future__ import annotations

from tito_audit.audit.results import AuditReport
from tito_audit.formatters.conditions_lines import report_condition_lines
from tito_audit.formatters.site.html import esc


def _sentence(text: str) -> str:
    return text[:1].upper() + text[1:] + ("" if text.endswith(".") else ".")


def conditions_list(report: AuditReport) -> str:
    """When the verdicts break: the plain loop's verdict and the forms, shapes and settings the failures come with;
    the refused settings."""
    lines = report_condition_lines(report)
    if not lines:
        return ""
    items = "".join(f"<li>{esc(_sentence(line))}</li>" for line in lines)
    return f'<ul class="facts conditions" id="conditions" aria-label="when it breaks">{items}</ul>'
