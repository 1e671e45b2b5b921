"""The mask check in a few words, for the matrix cell and the model page (docs/contract.md "The checks", 5).

Counts come from the ``mask`` check table of every variant, summed (:mod:`tito_audit.audit.mask_summary`): turns
judged and, per label, the turns that carry it. A template without generation blocks is ``n/a``; a report from before
the check has no cell.

Example cells: ``n/a``, ``trained as sampled: 96/96 turns``,
``stop-token-untrained 0/96, injected-trained 96/96 turns``.
"""

from __future__ import annotations

from tito_audit.audit.mask_summary import mask_totals
from tito_audit.audit.results import AuditReport

NOT_AVAILABLE = "n/a"


def mask_cell(report: AuditReport) -> str:
    """The matrix's ``mask`` cell (see the module docstring); empty for a report without the check."""
    totals = mask_totals(report)
    if not totals.audited:
        return ""
    if not totals.applicable:
        return NOT_AVAILABLE
    if not totals.judged:
        why = [f"{totals.not_as_sampled} not written as sampled"] if totals.not_as_sampled else []
        why += [f"{totals.refused} mask renders refused"] if totals.refused else []
        return f"no turn judged ({', '.join(why) or 'no assistant turn audited'})"
    if not totals.labels:
        return f"trained as sampled: {totals.judged}/{totals.judged} turns"
    return ", ".join(f"{label} {totals.labels[label]}/{totals.judged}" for label in totals.labels) + " turns"


def mask_sentence(report: AuditReport) -> str:
    """One sentence for a model page: what a trainer with assistant-only loss trains on with this template."""
    totals = mask_totals(report)
    if not totals.audited:
        return ""
    if not totals.applicable:
        return (
            "Training mask: n/a, the template has no {% generation %} blocks (a trainer with assistant-only loss "
            "gets no mask from it)."
        )
    sentence = f"Training mask ({{% generation %}} blocks, beside the verdict): {mask_cell(report)}"
    if totals.not_as_sampled:
        sentence += f"; {totals.not_as_sampled} turns not written as sampled were not judged"
    return sentence + "."
