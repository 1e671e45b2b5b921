"""Which failures a model page draws: one example per cause, with its explanation when the report has one.

The report's ``explanations`` (from ``explain``) cover the first failing case of each cause over all variants;
where a cause has one, its example is that case, so the template lines shown are the ones behind the tokens
shown. Otherwise the example is the first failure that carries the cause (rollout first, as in the Markdown
report). Causes that share an example are shown together.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from tito_audit.audit.core.causes import QUIET
from tito_audit.audit.results import AuditReport, Failure
from tito_audit.audit.serialization import DecodeError, from_dict
from tito_audit.repair.explanations import first_example_per_cause

"""Causes every BPE model shows: counted in the tables, never drawn."""


@dataclass
class Example:
    causes: list[str]
    variant: str
    failure: Failure
    explanation: dict[str, Any] | None = None
    counts: dict[str, int] = field(default_factory=dict)
    """How many failures of the example's own check and variant carry each of ``causes`` (the check table's count)."""


def cause_counts(report: AuditReport) -> Counter[str]:
    """Failures per cause over every variant and check (the check tables' cause counts summed)."""
    counts: Counter[str] = Counter()
    for variant in report.variants:
        for check in variant.checks.values():
            counts.update(check.cause_counts)
    return counts


def _explained(report: AuditReport) -> list[tuple[str, Failure, dict[str, Any]]]:
    found = []
    for explanation in report.explanations:
        try:
            failure = from_dict(Failure, explanation.get("failure"))
        except DecodeError:
            continue
        found.append((str(explanation.get("variant", "")), failure, explanation))
    return found


def examples(report: AuditReport) -> list[Example]:
    """One example per cause (quiet causes left out), most frequent cause first."""
    counts = cause_counts(report)
    explained = _explained(report)
    first: dict[str, tuple[str, Failure]] = {}
    for result in report.variants:
        for cause, failure in first_example_per_cause(result):
            first.setdefault(cause, (result.name, failure))
    for _, failure, _ in explained:
        for cause in failure.causes:
            counts.setdefault(cause, 0)
    order = sorted(
        (c for c in dict.fromkeys([*first, *(c for _, f, _ in explained for c in f.causes)]) if c not in QUIET),
        key=lambda cause: -counts.get(cause, 0),
    )
    chosen: list[Example] = []
    for cause in order:
        match = next(((v, f, e) for v, f, e in explained if cause in f.causes), None)
        variant, failure, explanation = match if match else (*first[cause], None)
        same = next((x for x in chosen if x.variant == variant and x.failure == failure), None)
        own = _own_count(report, variant, failure, cause)
        if same is not None:
            same.causes.append(cause)
            same.counts[cause] = own
        else:
            chosen.append(Example([cause], variant, failure, explanation, {cause: own}))
    return chosen


def _own_count(report: AuditReport, variant_name: str, failure: Failure, cause: str) -> int:
    """The failures of ``failure``'s check in its variant that carry ``cause``, as the report counts them."""
    variant = next((v for v in report.variants if v.name == variant_name), None)
    check = variant.checks.get(failure.check) if variant is not None else None
    return check.cause_counts.get(cause, 0) if check is not None else 0
