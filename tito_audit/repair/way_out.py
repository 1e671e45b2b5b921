"""The way out for a model whose template an append-only buffer cannot fully follow: a setting of its keyword
arguments when one suffices, else a verified fix of its template, else the reason none is known.

Order (the matrix's "way out" column): a recommended setting that earns ``ready`` without changing the
generation prompt (no patch is proposed then); otherwise a fix found by :mod:`tito_audit.repair.fixes.search` that
reaches ``ready`` (or ``ready-tool-only`` from ``broken``); otherwise a setting that improves the verdict;
otherwise none, with the reason.
"""

from __future__ import annotations

from dataclasses import dataclass

from tito_audit.audit.options import AuditOptions
from tito_audit.audit.results import BROKEN, READY_TOOL_ONLY, AuditReport, Recommendation
from tito_audit.model.loaded import LoadedModel
from tito_audit.repair.fixes.search import AuditRunner, FixOutcome, search_fix

SETTING = "setting"
FIX = "fix"
NONE = "none"


@dataclass
class WayOut:
    kind: str
    """``setting``, ``fix`` or ``none``."""
    summary: str
    """One line: ``setting preserve_thinking=true → ready``, ``fix (2 lines): keep reasoning in history``,
    ``none known: <why>``."""
    recommendation: Recommendation | None = None
    fix: FixOutcome | None = None


def needs_way_out(report: AuditReport) -> bool:
    return report.verdict in (BROKEN, READY_TOOL_ONLY)


def setting_summary(recommendation: Recommendation) -> str:
    what = "default settings" if recommendation.setting == "default" else f"setting {recommendation.setting}"
    text = f"{what} → {recommendation.verdict}"
    if recommendation.avoid:
        text += " (avoid " + ", ".join(recommendation.avoid) + ")"
    if recommendation.changes_generation_prompt:
        text += " (changes the generation prompt)"
    return text


def fix_summary(fix: FixOutcome) -> str:
    lines = fix.changed_lines
    verdict = fix.after.verdict if fix.after is not None else ""
    return f"fix ({lines} line{'s' if lines != 1 else ''}): " + "; ".join(fix.labels()) + f" → {verdict}"


def find_way_out(loaded: LoadedModel, report: AuditReport, options: AuditOptions, run_audit: AuditRunner) -> WayOut:
    """The way out for ``report`` (audited from ``loaded`` with ``options``); fixes are audited with
    ``run_audit`` and the same options."""
    recommendation = report.recommendation
    if recommendation is not None and recommendation.suffices:
        return WayOut(SETTING, setting_summary(recommendation), recommendation)
    fix = search_fix(loaded, report, options, run_audit)
    if fix.offered:
        return WayOut(FIX, fix_summary(fix), recommendation, fix)
    if recommendation is not None:
        return WayOut(SETTING, setting_summary(recommendation), recommendation, fix)
    return WayOut(NONE, f"none known: {fix.reason}", None, fix)
