"""The training form of a way out, verified: the serving template with generation blocks around what the model
samples (:mod:`tito_audit.repair.training_wrap`), offered only when

1. it renders byte-identically to the serving form: every prefix of the generated conversations, with and without a
   generation prompt, under every variant's settings (a prefix one form refuses and the other renders is a
   difference), so the serving form's audit holds for it unchanged; and
2. its own audit, with the same settings and seed, keeps every variant's verdict and its mask check trains every
   judged turn as sampled (no ``stop-token-untrained``, ``sampled-untrained`` or ``injected-trained``), with at least
   one turn judged.

Why a file of its own: ``{% generation %}`` is a transformers extension that other Jinja engines (llama.cpp's among
them) refuse, so the serving form, the one an inference engine loads, stays without it.

Example: for QwQ's patched template the training form marks ``reasoning</think>\\n\\ncontent<|im_end|>`` in every
assistant turn, after the ``<|im_start|>assistant\\n<think>\\n`` its prompt writes.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable
from dataclasses import dataclass, replace

from jinja2 import TemplateError

from tito_audit.audit.audit_options import AuditOptions
from tito_audit.audit.mask_summary import mask_totals
from tito_audit.audit.results import AuditReport
from tito_audit.conversations.conversation import ASSISTANT
from tito_audit.conversations.generate import generate
from tito_audit.conversations.profile import GenerationProfile
from tito_audit.model.load_folder import LoadedModel, codec_for
from tito_audit.model.render import Renderer, frozen_clock
from tito_audit.repair.training_wrap import WrapError, wrap

AuditRunner = Callable[[LoadedModel, AuditOptions], AuditReport]
TRAINING_ORIGIN = "training form"


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
    with ``options``); fixes' and settings' way outs alike. The assistant branches are wrapped first; when that form
    is not verified, the body of the loop over the messages is (an end token written after the role branches)."""
    first = verify(loaded, serving, serving_report, options, run_audit, whole_messages=False)
    if first.offered:
        return first
    second = verify(loaded, serving, serving_report, options, run_audit, whole_messages=True)
    return second if second.offered else first


def verify(
    loaded: LoadedModel,
    serving: str,
    serving_report: AuditReport,
    options: AuditOptions,
    run_audit: AuditRunner,
    whole_messages: bool,
) -> TrainingForm:
    """The form :func:`~tito_audit.repair.training_wrap.wrap` makes (``whole_messages``: from the loop's body), with
    its evidence, or why it is not offered (see the module docstring)."""
    stops = sorted({s.text for v in serving_report.variants for s in v.stop_tokens})
    try:
        source = wrap(serving, stops, whole_messages)
    except (WrapError, TemplateError) as exc:
        return TrainingForm(reason=f"the template cannot be wrapped: {exc}")
    form = TrainingForm(source=source, variants=len(serving_report.variants), original=loaded.template_source or "")
    renders, difference = _compare_renders(loaded, serving, source, serving_report, options)
    form.renders = renders
    if difference:
        form.reason = f"it does not render as the serving form does ({difference})"
        return form
    report = run_audit(_with_template(loaded, source), options)
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


def _with_template(loaded: LoadedModel, source: str) -> LoadedModel:
    return replace(loaded, template_source=source, template_origin=TRAINING_ORIGIN, template_name=None)


def _compare_renders(
    loaded: LoadedModel, serving: str, training: str, report: AuditReport, options: AuditOptions
) -> tuple[int, str]:
    """(renders compared, the first difference or ``""``) over every prefix of the generated conversations under every
    variant's settings."""
    codec = codec_for(loaded)
    conversations = list(
        generate(options.count, options.seed, options.max_turns, GenerationProfile(tools=options.tools))
    )
    compared = 0
    for variant in report.variants:
        first = Renderer(_with_template(loaded, serving), codec, variant.kwargs, options.limits)
        second = Renderer(_with_template(loaded, training), codec, variant.kwargs, options.limits)
        with frozen_clock(serving, options.clock), frozen_clock(training, options.clock):
            for conversation in conversations:
                messages = conversation.messages
                keys = [
                    (k, gp)
                    for k in range(1, len(messages) + 1)
                    for gp in ((False, True) if messages[k - 1].get("role") != ASSISTANT else (False,))
                ]
                a = first.texts(messages, conversation.tools, keys)
                b = second.texts(messages, conversation.tools, keys)
                for k, gp in keys:
                    compared += 1
                    if a[(k, gp)] != b[(k, gp)]:
                        where = f"{conversation.id} messages[:{k}] add_generation_prompt={gp}, variant {variant.name}"
                        return compared, where
    return compared, ""
