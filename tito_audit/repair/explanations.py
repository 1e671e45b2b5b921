"""The report's ``explanations``: the template lines behind the first example of each cause, added to a report by
``audit``, by ``check`` when it writes a page, and by the matrix for its published pages (right after the audit: each
explanation reads the conversation the audit kept with its failure, :mod:`tito_audit.repair.explain`).

The cases explained are the examples the reports draw (:func:`first_example_per_cause`: per variant, rollout failures
first, a buffer as sampled against the template's next prompt), so the lines shown next to an example are the lines
behind it. ``tito-audit explain`` numbers cases the same way (``--case N`` shows any of them).
"""

from __future__ import annotations

from tito_audit.audit.core.causes import QUIET
from tito_audit.audit.results import AuditReport, Failure, VariantResult, plain
from tito_audit.model.load_folder import LoadedModel, codec_for
from tito_audit.repair.explain import Explainer, compact, numbered_failures

CHECK_ORDER = ("rollout", "append", "bridge", "roundtrip", "mask")
"""The checks in the order their failures make the best first examples."""


def first_example_per_cause(variant: VariantResult) -> list[tuple[str, Failure]]:
    """The first failure that carries each distinct cause, rollout failures first (drift excluded; causes every BPE
    model shows have no example of their own)."""
    chosen: dict[str, Failure] = {}
    for check in CHECK_ORDER:
        for failure in variant.failures:
            if failure.check != check or failure.aspect.startswith("drift"):
                continue
            for cause in failure.causes:
                if cause not in chosen and cause not in QUIET:
                    chosen[cause] = failure
    return list(chosen.items())


def shown_cases(report: AuditReport) -> list[tuple[int, str, Failure]]:
    """``(case number, variant, failure)`` of each cause's first example, each failure once, in report order."""
    numbers = {id(failure): number for number, _, failure in numbered_failures(report)}
    chosen: dict[int, tuple[int, str, Failure]] = {}
    seen: set[str] = set()
    for variant in report.variants:
        for cause, failure in first_example_per_cause(variant):
            if cause in seen or id(failure) not in numbers:
                continue
            seen.add(cause)
            chosen.setdefault(id(failure), (numbers[id(failure)], variant.name, failure))
    return sorted(chosen.values(), key=lambda case: case[0])


def clip_lines(report: AuditReport, limit: int) -> None:
    """Template lines longer than ``limit`` characters cut to their first ``limit`` (a template written on one line
    would otherwise be quoted whole: published reports quote only short windows of a template)."""
    for explanation in report.explanations:
        sides = explanation.get("sides", [])
        for side in sides if isinstance(sides, list) else ():
            for line in side.get("lines", []):
                if len(line.get("text", "")) > limit:
                    line["text"] = line["text"][:limit] + " …"


def attach_explanations(report: AuditReport, loaded: LoadedModel) -> None:
    """Template lines and cause confirmations for the first example of each cause (JSON, terminal and pages)."""
    if loaded.template_source is None:
        return
    explainer = Explainer(loaded, codec_for(loaded), report)
    for number, variant, failure in shown_cases(report):
        explanation = explainer.explain(number, variant, failure)
        document = plain(explanation)
        document["summary"] = compact(explanation)
        report.explanations.append(document)
