"""Find a verified fix: apply the fixes that address the causes an audit found, audit each result with the same
settings, keep a fix only when the audit shows it helps, and offer the result only when it reaches ``ready``
(or ``ready-tool-only`` from ``broken``) without refusing conversations the original template renders.

The search is greedy: from the original template, add the fix whose audit scores best (worst verdict first,
then failing tool-only steps, then all failing steps, then fixable findings), until no fix improves the
score (or until a fix leaves nothing to improve). Every audit uses the settings of the original audit, and
every verdict reported comes from an audit of the patched template.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from tito_audit.audit.audit_options import AuditOptions
from tito_audit.audit.core.causes import CAUSES, nondeterministic_template
from tito_audit.audit.core.diff import common_prefix_length
from tito_audit.audit.results import BROKEN, READY, READY_TOOL_ONLY, VERDICT_ORDER, AuditReport
from tito_audit.conversations.conversation import TOOL, USER
from tito_audit.conversations.generate import generate
from tito_audit.conversations.profile import GenerationProfile
from tito_audit.model.load_folder import LoadedModel, codec_for
from tito_audit.model.render import Renderer, RenderError, frozen_clock
from tito_audit.repair.fixes import REGISTRY
from tito_audit.repair.fixes.fold import fold
from tito_audit.repair.fixes.interface import Fix, FixContext
from tito_audit.repair.fixes.proof import NoChangeProof, prove_no_change
from tito_audit.repair.fixes.source import Edit, TemplateSource

AuditRunner = Callable[[LoadedModel, AuditOptions], AuditReport]

BEST_SCORE = (0, 0, 0, 0)

PHRASES = {cause.name: cause.fixed for cause in CAUSES.values() if cause.fixed}
"""What a fix does for the model, by the cause it removed (the way-out column of the matrix; the causes' own
``FIXED``)."""

UNFIXED = {cause.name: cause.unfixed for cause in CAUSES.values() if cause.unfixed}
"""Why a cause is left as it is, when the search finds nothing that removes it (the causes' own ``UNFIXED``)."""


@dataclass
class AppliedFix:
    rule: Fix
    edits: list[Edit]
    removed: list[str] = field(default_factory=list)
    """Causes present before this fix and gone after it."""


@dataclass
class FixOutcome:
    before: AuditReport
    applied: list[AppliedFix] = field(default_factory=list)
    patched_source: str | None = None
    after: AuditReport | None = None
    proof: NoChangeProof | None = None
    tried: list[str] = field(default_factory=list)
    """Fixes whose construct the template has (tried, whether kept or not)."""
    reason: str = ""
    """Why no fix is offered (empty when one is)."""
    before_source: str = ""
    folded: bool = False
    """The patched template's constants were folded (``{% if true %}`` and the like removed)."""

    @property
    def offered(self) -> bool:
        return self.after is not None and self.proof is not None and not self.reason

    @property
    def changed_lines(self) -> int:
        return sum(1 for line in self.diff("t").splitlines() if line.startswith("-") and not line.startswith("---"))

    def shown_edits(self) -> list[tuple[Edit, str]]:
        """The edits of the original template as offered, with the fixes they carry: the fixes' own edits, or, once
        the constants are folded, each changed region of the final text (attributed to the fixes editing near it)."""
        own = sorted(((e, a.rule.name) for a in self.applied for e in a.edits), key=lambda pair: pair[0].start)
        if not self.folded or self.patched_source is None:
            return own
        regions = changed_regions(self.before_source, self.patched_source)
        shown = []
        for region in regions:
            near = [name for edit, name in own if edit.start < region.end + NEAR and region.start - NEAR < edit.end]
            names = ", ".join(dict.fromkeys(near or [name for _, name in own]))
            shown.append((Edit(region.start, region.end, region.text, names), names))
        return shown

    def labels(self) -> list[str]:
        phrases = [PHRASES[c] for fix in self.applied for c in fix.removed if c in PHRASES]
        return list(dict.fromkeys(phrases)) or [fix.rule.changes for fix in self.applied]

    def diff(self, name: str) -> str:
        if self.patched_source is None:
            return ""
        source = self.before_source
        return "".join(
            difflib.unified_diff(
                source.splitlines(keepends=True),
                self.patched_source.splitlines(keepends=True),
                fromfile=f"a/{name}",
                tofile=f"b/{name}",
            )
        )


NEAR = 200
"""Characters within which a changed region of a folded template is credited to a fix's edit."""
_PIECE = re.compile(r"\w+|\s+|[^\w\s]")


def changed_regions(before: str, after: str) -> list[Edit]:
    """The regions of ``before`` that ``after`` replaces, as edits of ``before`` (compared word by word)."""
    old = [m for m in _PIECE.finditer(before)]
    new = [m for m in _PIECE.finditer(after)]
    matcher = difflib.SequenceMatcher(None, [m.group(0) for m in old], [m.group(0) for m in new], autojunk=False)
    regions = []
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            continue
        start = old[i1].start() if i1 < len(old) else len(before)
        end = old[i2 - 1].end() if i2 > i1 else start
        text = after[new[j1].start() : new[j2 - 1].end()] if j2 > j1 else ""
        regions.append(Edit(start, end, text, "fold"))
    return regions


def causes_of(report: AuditReport) -> set[str]:
    """The causes a fix may address: rollout causes and the findings a fix addresses (a dated template), over every
    variant (a finding beside the verdict that no fix edits, non-JSON argument literals, is not one)."""
    fixable = {cause for rule in REGISTRY for cause in rule.causes}
    return {c for v in report.variants for c in v.checks["rollout"].cause_counts} | {
        f.cause for v in report.variants for f in v.findings if f.cause in fixable
    }


def score(report: AuditReport) -> tuple[int, int, int, int]:
    """Lower is better: worst verdict, failing tool-only steps, failing steps, fixable findings."""
    rows = [row for v in report.variants for row in v.checks["rollout"].rows]
    tool = sum(r.failed for r in rows if r.category == TOOL)
    findings = sum(1 for v in report.variants for f in v.findings if f.cause == nondeterministic_template.NAME)
    return VERDICT_ORDER.index(report.verdict), tool, sum(r.failed for r in rows), findings


def generation_opening(renderer: Renderer) -> str | None:
    """What the generation prompt writes after the assistant header: ``<think>\\n`` when the prompt opens a
    reasoning block, ``""`` when it writes only the header; None when the template refuses the probe."""
    user = [{"role": USER, "content": "Hello there."}]
    answer = [*user, {"role": "assistant", "content": "Hi."}]
    try:
        history = renderer.text(user, None, False)
        prompt = renderer.text(user, None, True)
        turn = renderer.text(answer, None, False)
    except RenderError:
        return None
    if not (prompt.startswith(history) and turn.startswith(history)):
        return None
    generation, rendered_turn = prompt[len(history) :], turn[len(history) :]
    return generation[common_prefix_length(generation, rendered_turn) :]


def search_fix(loaded: LoadedModel, before: AuditReport, options: AuditOptions, run_audit: AuditRunner) -> FixOutcome:
    """The verified fix for ``loaded``'s template (see the module docstring)."""
    outcome = FixOutcome(before=before, before_source=loaded.template_source or "")
    if loaded.template_source is None:
        outcome.reason = f"{loaded.renders_through}: there is no template to edit"
        return outcome
    causes = causes_of(before)
    source = TemplateSource.parse(loaded.template_source)
    codec = codec_for(loaded)
    with frozen_clock(loaded.template_source, options.clock):
        context = FixContext(options.clock, generation_opening(Renderer(loaded, codec)))
    # every fix whose construct the template has is tried: the audit, not the cause label, decides what helps
    candidates = [(rule, found) for rule in REGISTRY if (found := rule.find_edits(source, context))]
    outcome.tried = [rule.name for rule, _ in candidates]
    if not candidates:
        outcome.reason = _no_construct(causes)
        return outcome
    current, current_score = before, score(before)
    chosen: list[tuple[Fix, list[Edit]]] = []
    removed_by: dict[str, list[str]] = {}
    while current_score != BEST_SCORE:  # until no fix improves the score (a fixable finding can outlive ready)
        best = None
        for rule, found in candidates:
            if any(rule is done for done, _ in chosen):
                continue
            attempt = [*chosen, (rule, found)]
            patched_source = source.apply(edit for _, edits in attempt for edit in edits)
            report = run_audit(patched_model(loaded, patched_source), options)
            if _refuses_more(before, report):
                continue
            if score(report) < current_score and (best is None or score(report) < best[2]):
                best = (rule, found, score(report), report, patched_source)
                if best[2] == BEST_SCORE:
                    break  # nothing can do better
        if best is None:
            break
        rule, found, best_score, report, patched_source = best
        removed_by[rule.name] = sorted(causes_of(current) - causes_of(report))
        current_score, current = best_score, report
        chosen.append((rule, found))
        outcome.patched_source = patched_source
    if not chosen:
        outcome.reason = "no fix improved the audit (" + ", ".join(sorted(causes)) + ")"
        return outcome
    outcome.applied = [AppliedFix(rule, edits, removed_by[rule.name]) for rule, edits in chosen]
    outcome.after = current
    good = current.verdict == READY or (before.verdict == BROKEN and current.verdict == READY_TOOL_ONLY)
    if good:
        _fold_if_same(outcome, loaded, before, options, run_audit, current_score)
    if not good:
        outcome.reason = f"the best fix found reaches only {current.verdict} ({', '.join(sorted(causes_of(current)))})"
        return outcome
    outcome.proof = _prove(loaded, outcome.patched_source or "", options, [rule for rule, _ in chosen])
    if not outcome.proof.holds:
        outcome.reason = "the fix changes renders it should not touch: " + "; ".join(outcome.proof.differing)
    return outcome


def _fold_if_same(
    outcome: FixOutcome,
    loaded: LoadedModel,
    before: AuditReport,
    options: AuditOptions,
    run_audit: AuditRunner,
    best: tuple[int, int, int, int],
) -> None:
    """Offer the patched template with its constants folded (:mod:`tito_audit.repair.fixes.fold`) when it renders
    exactly as the unfolded one under every variant and its own audit scores the same; else leave it unfolded."""
    patched = outcome.patched_source or ""
    folded = fold(patched)
    if folded == patched or not _renders_alike(loaded, patched, folded, before, options):
        return
    report = run_audit(patched_model(loaded, folded), options)
    if score(report) == best and not _refuses_more(before, report):
        outcome.patched_source, outcome.after, outcome.folded = folded, report, True


def _renders_alike(loaded: LoadedModel, patched: str, folded: str, before: AuditReport, options: AuditOptions) -> bool:
    """Every prefix of the generated conversations, with and without a generation prompt, under every variant's
    settings, renders byte-identically with ``patched`` and ``folded``."""
    codec = codec_for(loaded)
    conversations = list(
        generate(options.count, options.seed, options.max_turns, GenerationProfile(tools=options.tools))
    )
    for variant in before.variants:
        # renderers that keep their renders in the model's memory: the audits and the other proofs rendered most
        first = Renderer(patched_model(loaded, patched), codec, variant.kwargs, remember=True)
        second = Renderer(patched_model(loaded, folded), codec, variant.kwargs, remember=True)
        with frozen_clock(patched, options.clock), frozen_clock(folded, options.clock):
            proof = prove_no_change(conversations, first.texts, second.texts, [], "nothing")
        if not proof.holds:
            return False
    return True


def patched_model(loaded: LoadedModel, source: str) -> LoadedModel:
    """``loaded`` with ``source`` as its template (origin ``patched``)."""
    return replace(loaded, template_source=source, template_origin="patched", template_name=None)


def _refuses_more(before: AuditReport, after: AuditReport) -> bool:
    audited = {v.name: v.conversations_audited for v in before.variants}
    return any(v.conversations_audited < audited.get(v.name, 0) for v in after.variants)


def _prove(loaded: LoadedModel, patched_source: str, options: AuditOptions, rules: list[Fix]) -> NoChangeProof:
    codec = codec_for(loaded)
    patched = patched_model(loaded, patched_source)
    original_renderer = Renderer(loaded, codec, remember=True)  # the audits and the other proofs rendered most
    patched_renderer = Renderer(patched, codec, remember=True)
    conversations = list(
        generate(options.count, options.seed, options.max_turns, GenerationProfile(tools=options.tools))
    )
    scope = "; ".join(dict.fromkeys(f"{rule.name}: {rule.scope}" for rule in rules))
    assert loaded.template_source is not None
    with frozen_clock(loaded.template_source, options.clock), frozen_clock(patched_source, options.clock):
        return prove_no_change(
            conversations, original_renderer.texts, patched_renderer.texts, [rule.touches for rule in rules], scope
        )


def _no_construct(causes: set[str]) -> str:
    known = sorted(c for c in causes if any(c in rule.causes for rule in REGISTRY))
    unknown = sorted(c for c in causes if c not in known)
    parts = []
    if known:
        parts.append("the template lacks the construct a known fix edits for " + ", ".join(known))
    if unknown:
        parts.append("no known fix for " + ", ".join(unknown))
    return "; ".join(parts) or "no cause to fix"
