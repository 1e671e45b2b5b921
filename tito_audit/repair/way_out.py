"""The way out for a model whose template an append-only buffer cannot fully follow: a setting of its keyword
arguments when one suffices, else a verified fix of its template, else the reason none is known.

Order (the matrix's "way out" column): a recommended setting that earns ``ready`` without changing the
generation prompt (no patch is proposed then); otherwise a fix found by :mod:`tito_audit.repair.fixes.search` that
reaches ``ready`` (or ``ready-tool-only`` from ``broken``); otherwise a setting that improves the verdict;
otherwise none, with the reason.
"""

from __future__ import annotations

import pickle
from dataclasses import dataclass, replace

from tito_audit.audit.audit_options import AuditOptions
from tito_audit.audit.results import BROKEN, READY_TOOL_ONLY, AuditReport, Recommendation
from tito_audit.model.load_folder import LoadedModel
from tito_audit.repair.fixes.search import AuditRunner, FixOutcome, patched_model, search_fix
from tito_audit.repair.training_form import TrainingForm, training_form

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
    training: TrainingForm | None = None
    """The way out's template with generation blocks, for trainers (None for ``none``)."""


REMEMBERED_BYTES = 64 * 1024 * 1024
"""How many bytes of pickled reports :func:`remembering` keeps, the oldest forgotten first: the matrix's broken rows'
reports pickle to 1.9–2.8 MB, so a whole search (Solar Open's 15 candidates) fits."""


def remembering(run_audit: AuditRunner, limit_bytes: int = REMEMBERED_BYTES) -> AuditRunner:
    """``run_audit``, answering the audit of a template text, origin and settings it has already audited with a copy
    of that report instead of auditing it again (an audit is deterministic). The way-out search meets the same text
    more than once: two fixes whose edits give the same template (Solar Open's search audits 3 of its 15 candidates
    twice). Reports are kept pickled, at most ``limit_bytes`` of them, and each answer is a fresh copy. Wrap the
    runner inside any budget that counts audits, so that the budget is charged as before."""
    seen: list[tuple[tuple[str | None, str, str | None], AuditOptions, bytes]] = []  # oldest first

    def run(loaded: LoadedModel, options: AuditOptions) -> AuditReport:
        key = (loaded.template_source, loaded.template_origin, loaded.template_name)
        for known, settings, kept in seen:
            if known == key and settings == options:
                report: AuditReport = pickle.loads(kept)
                return report
        report = run_audit(loaded, options)
        kept = pickle.dumps(report, protocol=pickle.HIGHEST_PROTOCOL)
        seen.append((key, options, kept))
        while sum(len(entry[2]) for entry in seen) > limit_bytes:
            seen.pop(0)
        return report

    return run


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
    """The way out for ``report`` (audited from ``loaded`` with ``options``), with its training form; fixes and the
    training form are audited with ``run_audit`` and the same options."""
    way = _way_out(loaded, report, options, run_audit)
    way.training = training_of(way, loaded, report, options, run_audit)
    return way


def training_of(
    way: WayOut, loaded: LoadedModel, report: AuditReport, options: AuditOptions, run_audit: AuditRunner
) -> TrainingForm | None:
    """The training form of the template ``way`` recommends: the patched one for a fix, the model's own for a setting;
    None when there is no way out (or no template). A verification that cannot run (the matrix's search budget) is
    the reason none is offered."""
    if way.kind == FIX and way.fix is not None and way.fix.patched_source is not None and way.fix.after is not None:
        serving, audited = way.fix.patched_source, way.fix.after
    elif way.kind == SETTING and loaded.template_source is not None:
        serving, audited = loaded.template_source, report
    else:
        return None
    try:
        return training_form(loaded, serving, audited, options, run_audit)
    except Exception as exc:  # the budget of the matrix's search, or an audit that failed: said, never hidden
        return TrainingForm(reason=f"not verified: {type(exc).__name__}: {exc}")


def _way_out(loaded: LoadedModel, report: AuditReport, options: AuditOptions, run_audit: AuditRunner) -> WayOut:
    recommendation = report.recommendation
    if recommendation is not None and recommendation.suffices:
        return WayOut(SETTING, setting_summary(recommendation), recommendation)
    fix = search_fix(loaded, report, options, run_audit)
    if fix.offered:
        return WayOut(FIX, fix_summary(fix), recommendation, fix)
    if recommendation is not None:
        return WayOut(SETTING, setting_summary(recommendation), recommendation, fix)
    return WayOut(NONE, f"none known: {fix.reason}", None, fix)


def way_out_in_loop(
    way: WayOut, loaded: LoadedModel, report: AuditReport, options: AuditOptions, run_audit: AuditRunner
) -> AuditReport | None:
    """The way out audited once more in the loops ``report`` was audited in, when they have engines' parsers
    (``report.parsers``): the patched template, or the model's own with the setting pinned, under ``options`` (their
    parsers: one verdict per engine again). None without an engine's parser (the way out was searched and verified
    with the template's perfect inverse already) or without a way out."""
    if not report.parsers:
        return None
    if way.kind == FIX and way.fix is not None and way.fix.patched_source is not None:
        return run_audit(patched_model(loaded, way.fix.patched_source), options)
    if way.kind == SETTING and way.recommendation is not None:
        pinned = {**options.pinned_kwargs, **way.recommendation.kwargs}
        return run_audit(loaded, replace(options, pinned_kwargs=pinned))
    return None
