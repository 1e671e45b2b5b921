"""The mask check summed over a report's variants (docs/contract.md "The checks", 5): what the matrix, the pages and the
training form's verification read.

Turns judged are the ``answer`` and ``tool call`` rows of each variant's ``mask`` table minus the turns whose mask
render was refused; per label, the turns that carry it (the table's cause counts). A template without generation blocks
is not applicable (its tables carry :data:`~tito_audit.audit.checks.mask.NOT_APPLICABLE`); a report from before the
check has no ``mask`` table.

>>> from tito_audit.audit.results import CheckResult, CheckRow
>>> check = CheckResult("mask", [CheckRow("answer", 4, 1, 3)], {"injected-trained": 3})
>>> totals = summed([check])
>>> totals.judged, totals.labels
(4, {'injected-trained': 3})
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from tito_audit.audit.checks.mask import LABELS, NAME, NOT_APPLICABLE, NOT_AS_SAMPLED
from tito_audit.audit.results import AuditReport, CheckResult


@dataclass
class MaskTotals:
    audited: bool = False
    """Whether any variant has the check (reports from before it do not)."""
    applicable: bool = False
    """Whether the template has generation blocks."""
    judged: int = 0
    not_as_sampled: int = 0
    refused: int = 0
    """Turns whose mask render the template refused (or that rendered other ids than the rollout's)."""
    labels: dict[str, int] = field(default_factory=dict)
    """Turns per label, in the order of :data:`~tito_audit.audit.checks.mask.LABELS`."""

    @property
    def trained_as_sampled(self) -> bool:
        return self.applicable and self.judged > 0 and not self.labels


def summed(checks: Iterable[CheckResult]) -> MaskTotals:
    totals = MaskTotals()
    counts: dict[str, int] = {}
    for check in checks:
        totals.audited = True
        totals.applicable = totals.applicable or NOT_APPLICABLE not in check.notes
        for row in check.rows:
            if row.category == NOT_AS_SAMPLED:
                totals.not_as_sampled += row.cases
            else:
                totals.judged += row.cases - row.refused
                totals.refused += row.refused
        for label, count in check.cause_counts.items():
            counts[label] = counts.get(label, 0) + count
    totals.labels = {label: counts[label] for label in LABELS if counts.get(label)}
    return totals


def mask_totals(report: AuditReport) -> MaskTotals:
    """The ``mask`` tables of every variant of ``report``, summed."""
    return summed(v.checks[NAME] for v in report.variants if NAME in v.checks)
