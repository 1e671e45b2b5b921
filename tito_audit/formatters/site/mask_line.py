"""The line of a model page that says what a trainer with assistant-only loss trains on (the mask check)."""

from __future__ import annotations

from tito_audit.audit.results import AuditReport
from tito_audit.formatters.mask_lines import mask_sentence
from tito_audit.formatters.site.html import esc


def mask_line(report: AuditReport) -> str:
    """``Training mask (…): injected-trained 96/96 turns.`` under the verdict; empty for a report without the check."""
    sentence = mask_sentence(report)
    return f'<p class="muted small" id="mask">{esc(sentence)}</p>' if sentence else ""
