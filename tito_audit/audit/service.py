"""The audit service: one loaded model in, one :class:`~tito_audit.audit.results.AuditReport` out.

The path of data: the template's keyword arguments become variants (:mod:`tito_audit.model.variants`); each variant
gets its conversations (:mod:`tito_audit.audit.audit_options`) and is audited on its own
(:mod:`tito_audit.audit.variant`); the report gathers the variants, the model's facts and the settings.
"""

from __future__ import annotations

import importlib.metadata
import time
from datetime import datetime, timezone

from tito_audit import __version__
from tito_audit.audit.audit_options import (
    DEFAULT_COUNT,
    AuditOptions,
    ConversationSource,
    ProgressCallback,
    conversation_source,
)
from tito_audit.audit.conditions.verdict_conditions import report_conditions
from tito_audit.audit.parse_step.engine_verdicts import engine_verdicts
from tito_audit.audit.pending_plan import ParseSteps, PendingPlan
from tito_audit.audit.recommend import recommend
from tito_audit.audit.result_conditions import RefusedSetting
from tito_audit.audit.results import SCHEMA_VERSION, AuditReport, ModelInfo, Settings, worst_verdict
from tito_audit.audit.settings_together import refused_settings, settings_read_together, without_refused
from tito_audit.audit.variant import VariantAudit
from tito_audit.conversations.tools import BUILT_IN
from tito_audit.conversations.validate import check_stop_tokens
from tito_audit.conversations.windows import window_note
from tito_audit.errors import BadInputError
from tito_audit.model.load_folder import LoadedModel, codec_for
from tito_audit.model.render import frozen_clock
from tito_audit.model.variants import template_inputs, variants_for
from tito_audit.parse.engines import ENGINES
from tito_audit.parse.vllm_encoder import connect

__all__ = [
    "DEFAULT_COUNT",
    "SCHEMA_VERSION",
    "AuditOptions",
    "ConversationSource",
    "ProgressCallback",
    "VariantAudit",
    "audit",
    "library_versions",
    "refused_everything",
]

LIBRARIES = ("transformers", "tokenizers", "jinja2", "huggingface_hub", "mistral_common")


def library_versions() -> dict[str, str]:
    """The versions of the libraries that render, tokenize and parse (each engine's parsers, whose versions decide
    its parser verdict), by module name; a library not installed is left out."""
    versions = {}
    for name in LIBRARIES:
        try:
            versions[name] = importlib.metadata.version(name.replace("_", "-"))
        except importlib.metadata.PackageNotFoundError:
            continue
    for engine in ENGINES:
        version = engine.version()
        if version is not None:
            versions[engine.module] = version
    return versions


def refused_everything(report: AuditReport) -> str | None:
    """Why no conversation could be audited in any variant (the template refuses every shape), else None."""
    if any(variant.conversations_audited for variant in report.variants):
        return None
    reasons = [shape.reason for variant in report.variants for shape in variant.refused]
    return reasons[0] if reasons else "no conversation to audit"


def _model_info(loaded: LoadedModel) -> ModelInfo:
    resolved = loaded.resolved
    return ModelInfo(
        model_id=resolved.model_id,
        source=resolved.source,
        path=resolved.location or str(resolved.path),
        revision=resolved.revision,
        backend=loaded.backend,
        tokenizer_class=loaded.tokenizer_class,
        template_name=loaded.template_name,
        template_origin=loaded.template_origin,
        template_sha256=loaded.template_sha256,
        available_templates=list(loaded.available_templates),
        file_sha256=loaded.file_hashes,
        generation_config_found=loaded.generation_config_found,
        rendered_by=loaded.encoder.rendered_by if loaded.encoder is not None else "",
    )


def audit(
    loaded: LoadedModel, options: AuditOptions | None = None, progress: ProgressCallback | None = None
) -> AuditReport:
    """Audit ``loaded`` under every relevant variant of its template and return the report."""
    options = options or AuditOptions()
    if options.count < 1 and options.conversations is None:
        raise BadInputError("--count must be at least 1")
    started = time.monotonic()
    connect(loaded)  # an engine-rendered model renders through vLLM's encoder, in vLLM's worker
    codec = codec_for(loaded)
    check_stop_tokens(codec, options.extra_stop_tokens)
    notes: list[str] = list(loaded.notes)
    if loaded.template_source is not None:
        inputs = template_inputs(loaded.template_source, codec.tokenizer.special_tokens_map.keys(), options.limits)
        known = {item.name for item in inputs}
        for name in sorted(set(options.pinned_kwargs) - known):
            notes.append(f"warning: --kwarg {name} is not read by the template as a keyword argument")
    else:
        inputs = []
        if loaded.encoder is None:  # an engine-rendered model's load note says so, naming the encoder's settings
            notes.append(
                f"the model renders through {loaded.backend} without Jinja: there are no template variants to detect"
            )
    cut = window_note(options.conversations or [], options.max_messages)
    if cut is not None:
        notes.append(cut)
    # the parsers are chosen while the template's own rollout is walked (see tito_audit.audit.pending_plan)
    pending = PendingPlan.start(options.parser, loaded.resolved.model_id, codec.tokenizer, loaded.resolved.path)
    plan_notes_at = len(notes)
    variants = variants_for(inputs, options.pinned_kwargs)
    refused: list[RefusedSetting] = []
    if loaded.template_source is not None:
        with frozen_clock(loaded.template_source, options.clock):
            variants, refused = refused_settings(loaded, codec, variants, options.limits)
            if len(variants) > 2:
                usable = without_refused(inputs, refused, options.pinned_kwargs)
                together = settings_read_together(loaded, codec, usable, options.pinned_kwargs, options.limits)
                kept, refused_together = refused_settings(loaded, codec, [variants[0], *together], options.limits)
                variants, refused = variants + kept[1:], refused + refused_together
    conversations_for = conversation_source(options)
    audits = [VariantAudit(loaded, codec, variant, options) for variant in variants]
    steps = ParseSteps(pending, lambda: frozen_clock(loaded.template_source, options.clock))
    # a variant of another setting reads the default setting's steps: its parse steps run after the default's
    walks = [
        variant_audit.walk(conversations_for, progress, steps, audits[0].steps if index else None)
        for index, variant_audit in enumerate(audits)
    ]
    plan = steps.finish()
    notes[plan_notes_at:plan_notes_at] = plan.notes
    results = [walk.result() for walk in walks]
    verdict = worst_verdict([r.verdict for r in results])
    prompts = {a.variant.name: a.probe_prompt() for a in audits} if len(audits) > 1 else {}
    return AuditReport(
        schema_version=SCHEMA_VERSION,
        tool_version=__version__,
        library_versions=library_versions(),
        model=_model_info(loaded),
        settings=Settings(
            seed=options.seed,
            count=results[0].conversations if results else 0,
            max_turns=options.max_turns,
            pinned_kwargs=dict(options.pinned_kwargs),
            clock=options.clock.isoformat(),
            extra_stop_tokens=list(options.extra_stop_tokens),
            conversations_source=options.conversations_source,
            datasets=list(options.datasets),
            parsers=[choice.name for choice in plan.choices],
            tools=options.tools.names if options.generates else [],
            tools_source=options.tools.source if options.generates else "",
            tool_schemas=options.tools.schemas() if options.generates and options.tools.source != BUILT_IN else None,
        ),
        template_inputs={item.name: list(item.values) for item in inputs},
        verdict=verdict,
        text_level_only=loaded.text_level_only,
        variants=results,
        notes=notes,
        recommendation=recommend(results, prompts),
        parsers=engine_verdicts(plan.choices, verdict, results),
        conditions=report_conditions(results, lambda variant: variant),
        refused_settings=refused,
        generated_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        duration_seconds=round(time.monotonic() - started, 3),
    )
