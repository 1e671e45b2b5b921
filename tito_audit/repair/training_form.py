"""The training form of a way out, verified: the serving template with generation blocks around what the model
samples (:mod:`tito_audit.repair.training_wrap`), offered only when

1. it renders byte-identically to the serving form: every prefix of the generated conversations, with and without a
   generation prompt, under every variant's settings (a prefix one form refuses and the other renders is a
   difference), so the serving form's audit holds for it unchanged; and
2. its own audit, with the same settings and seed, keeps every variant's verdict and its mask check trains every
   judged turn as sampled (no ``stop-token-untrained``, ``sampled-untrained`` or ``injected-trained``), with at least
   one turn judged.

Two forms, the same mask. The **placed** form has its generation blocks in the template's own assistant branches
(:mod:`tito_audit.repair.training_place`), as a person writes one: it is tried first, and offered when its blocks fall
exactly where the computed form's do in every compared render and it passes the checks above. Otherwise the
**computed** form (:mod:`tito_audit.repair.training_wrap`: each turn captured and split where it stops sharing the
generation prompt and after its first stop token) is offered, with why no placed form verifies.

Why a file of its own: ``{% generation %}`` is a transformers extension that other Jinja engines (llama.cpp's among
them) refuse, so the serving form, the one an inference engine loads, stays without it.

Example: for QwQ's patched template the training form marks ``reasoning</think>\\n\\ncontent<|im_end|>`` in every
assistant turn, after the ``<|im_start|>assistant\\n<think>\\n`` its prompt writes.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable
from dataclasses import dataclass

from jinja2 import TemplateError

from tito_audit.audit.audit_options import AuditOptions
from tito_audit.audit.mask_summary import mask_totals
from tito_audit.audit.results import AuditReport
from tito_audit.model.assistant_mask import generation_blocks, lines_phrase
from tito_audit.model.load_folder import LoadedModel
from tito_audit.repair.training_place import place
from tito_audit.repair.training_renders import TRAINING_ORIGIN, each_render, with_template
from tito_audit.repair.training_wrap import WrapError, wrap

AuditRunner = Callable[[LoadedModel, AuditOptions], AuditReport]
PLACED, COMPUTED = "placed", "computed"
__all__ = ["COMPUTED", "PLACED", "TRAINING_ORIGIN", "TrainingForm", "training_form", "verify"]


@dataclass
class TrainingForm:
    """The training form of one serving template, or why none is offered."""

    source: str | None = None
    reason: str = ""
    """Why none is offered (empty when one is)."""
    renders: int = 0
    """Renders compared byte for byte with the serving form (all variants)."""
    turns: int = 0
    """Assistant turns its mask check judged (all variants), each trained as sampled when the form is offered."""
    variants: int = 0
    original: str = ""
    """The model's own template (the diff's left side: the file a user has)."""
    form: str = ""
    """``placed`` (blocks in the template's own branches) or ``computed`` (each turn captured and split)."""
    why_computed: str = ""
    """Why no placed form is offered (a computed form only)."""

    @property
    def offered(self) -> bool:
        return self.source is not None and not self.reason

    def evidence(self) -> str:
        """``renders byte-identically to the serving form (1,204 renders, 3 variants); its mask trains 288 of 288
        turns as sampled, stop token included``."""
        return (
            f"renders byte-identically to the serving form ({self.renders} renders, {self.variants} variant"
            f"{'s' if self.variants != 1 else ''}); its mask trains {self.turns} of {self.turns} assistant turns "
            "as sampled, stop token included, and nothing else"
        )

    def placement(self) -> str:
        """Which form this is and why, in a sentence: where the placed form's blocks are, or why the form is
        computed."""
        if self.form == PLACED and self.source is not None:
            blocks = generation_blocks(self.source)
            return (
                f"placed in the template's own assistant branch{'es' if len(blocks) > 1 else ''} "
                f"({lines_phrase(blocks)} of the training form), marking exactly the tokens the computed form marks "
                "in every compared render"
            )
        return (
            "computed: each assistant turn is captured and written again in three pieces (what it shares with the "
            "generation prompt, the sampled part in a generation block through the first stop token, the rest), "
            f"because no placed form verifies: {self.why_computed or 'none was tried'}"
        )

    def diff(self, name: str, training_name: str) -> str:
        """The unified diff from the model's own template (``a/name``) to the training form (``b/training_name``)."""
        if self.source is None:
            return ""
        return "".join(
            difflib.unified_diff(
                self.original.splitlines(keepends=True),
                self.source.splitlines(keepends=True),
                fromfile=f"a/{name}",
                tofile=f"b/{training_name}",
            )
        )


def training_form(
    loaded: LoadedModel, serving: str, serving_report: AuditReport, options: AuditOptions, run_audit: AuditRunner
) -> TrainingForm:
    """The verified training form of ``serving`` (the template a way out recommends, audited as ``serving_report``
    with ``options``); fixes' and settings' way outs alike. The placed form is tried first, from the computed form
    of the assistant branches; then that computed form; then the computed form of the body of the loop over the
    messages (an end token written after the role branches)."""
    try:
        computed = wrap(serving, _stops(serving_report), False)
    except (WrapError, TemplateError) as exc:
        first, placement = TrainingForm(reason=f"the template cannot be wrapped: {exc}"), None
    else:
        compared = _compare_renders(loaded, serving, computed, serving_report, options)
        placement = None if compared[1] else place(loaded, serving, computed, serving_report, options)
        if placement is not None and placement.source is not None:
            placed = _checked(loaded, serving, placement.source, serving_report, options, run_audit, PLACED)
            if placed.offered:
                return placed
            placement.why_not = f"the placed form is not verified: {placed.reason}"
        first = _checked(loaded, serving, computed, serving_report, options, run_audit, COMPUTED, compared)
    why = placement.why_not if placement is not None else "the form of its assistant branches cannot be made"
    if not first.offered:
        second = verify(loaded, serving, serving_report, options, run_audit, whole_messages=True)
        if second.offered and not (placement is not None and placement.outside):
            # any placement reproduces the assistant branches' form, which is not verified: that is why
            why = f"the form of its assistant branches is not verified ({first.reason})"
        first = second if second.offered else first
    if first.offered:
        first.why_computed = why
    return first


def verify(
    loaded: LoadedModel,
    serving: str,
    serving_report: AuditReport,
    options: AuditOptions,
    run_audit: AuditRunner,
    whole_messages: bool,
) -> TrainingForm:
    """The computed form :func:`~tito_audit.repair.training_wrap.wrap` makes (``whole_messages``: from the loop's
    body), with its evidence, or why it is not offered (see the module docstring)."""
    try:
        source = wrap(serving, _stops(serving_report), whole_messages)
    except (WrapError, TemplateError) as exc:
        return TrainingForm(reason=f"the template cannot be wrapped: {exc}")
    return _checked(loaded, serving, source, serving_report, options, run_audit, COMPUTED)


def _stops(report: AuditReport) -> list[str]:
    return sorted({s.text for v in report.variants for s in v.stop_tokens})


def _checked(
    loaded: LoadedModel,
    serving: str,
    source: str,
    serving_report: AuditReport,
    options: AuditOptions,
    run_audit: AuditRunner,
    kind: str,
    compared: tuple[int, str] | None = None,
) -> TrainingForm:
    """``source`` as a training form of ``serving`` (audited as ``serving_report``): offered when it renders as the
    serving form does (``compared``, when already known) and its own audit keeps every verdict and trains every
    judged turn as sampled."""
    form = TrainingForm(
        source=source, variants=len(serving_report.variants), original=loaded.template_source or "", form=kind
    )
    renders, difference = compared or _compare_renders(loaded, serving, source, serving_report, options)
    form.renders = renders
    if difference:
        form.reason = f"it does not render as the serving form does ({difference})"
        return form
    report = run_audit(with_template(loaded, source), options)
    before = {v.name: v.verdict for v in serving_report.variants}
    changed = [v.name for v in report.variants if before.get(v.name) != v.verdict]
    totals = mask_totals(report)
    form.turns = totals.judged
    if changed:
        form.reason = f"its audit gives another verdict under {', '.join(changed)}"
    elif not totals.judged:
        why = f"{totals.not_as_sampled} turns not written as sampled" if totals.not_as_sampled else ""
        why = why or (f"{totals.refused} mask renders refused" if totals.refused else "no assistant turn audited")
        form.reason = f"its mask check judged no turn ({why})"
    elif totals.labels:
        found = ", ".join(f"{label} in {count} of {totals.judged} turns" for label, count in totals.labels.items())
        form.reason = f"its mask check still finds {found}"
    return form


def _compare_renders(
    loaded: LoadedModel, serving: str, training: str, report: AuditReport, options: AuditOptions
) -> tuple[int, str]:
    """(renders compared, the first difference or ``""``) over every prefix of the generated conversations under every
    variant's settings."""
    compared = 0
    for render in each_render(loaded, [serving, training], report, options):
        compared += 1
        if render.texts[0] != render.texts[1]:
            return compared, render.where
    return compared, ""
