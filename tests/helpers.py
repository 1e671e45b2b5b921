"""Helpers to audit a tokenizer folder with a template file, as the CLI does."""

from __future__ import annotations

from functools import cache
from pathlib import Path

from tito_audit.audit.results import AuditReport, VariantResult
from tito_audit.audit.service import AuditOptions, audit
from tito_audit.model.load_folder import LoadedModel, load_model
from tito_audit.model.resolve import resolve_model


def load(folder: Path, template: Path | None = None) -> LoadedModel:
    return load_model(resolve_model(str(folder), allow_hub=False), template_file=template)


@cache
def shared_model(model_id: str) -> LoadedModel:
    """A model of ../shared/tokenizers loaded as every entry point loads it, once per test process: loading a real
    tokenizer takes seconds (gemma-4's 33 MB ``tokenizer.json``: 4.5 s) and three test files load every model."""
    from tests.conftest import SHARED_TOKENIZERS
    from tito_audit.model.load_by_id import load_by_id

    return load_by_id(model_id, mirrors=[SHARED_TOKENIZERS], allow_hub=False)


def run_audit(folder: Path, template: Path | None = None, **options) -> AuditReport:
    options.setdefault("count", 24)
    return audit(load(folder, template), AuditOptions(**options))


def variant_audits(folder: Path, template: Path) -> list:
    """A :class:`~tito_audit.audit.service.VariantAudit` (default options) for every variant of ``template``."""
    from tito_audit.audit.service import VariantAudit
    from tito_audit.model.tokens import TokenCodec
    from tito_audit.model.variants import template_inputs, variants_for

    model = load(folder, template)
    codec = TokenCodec(model.tokenizer, template_source=model.template_source)
    inputs = template_inputs(model.template_source, model.tokenizer.special_tokens_map.keys())
    return [VariantAudit(model, codec, variant, AuditOptions()) for variant in variants_for(inputs)]


def default_variant(report: AuditReport) -> VariantResult:
    return report.variants[0]


def causes(variant: VariantResult, check: str) -> set[str]:
    return set(variant.checks[check].cause_counts)


def failed(variant: VariantResult, check: str, category: str | None = None) -> int:
    return sum(r.failed for r in variant.checks[check].rows if category is None or r.category == category)


def audited_conversation(failure, report: AuditReport, given, renderer):
    """The conversation of ``failure`` rebuilt from the report alone, as the audit walked it: generated again from the
    seed and the conversation's number for the variant's reasoning kinds (or found among ``given``), in the shape it
    was accepted in, every turn realized again (None when it cannot be rebuilt). The audit keeps the conversation it
    walked with each failure for its explanation; this rebuild is independent of that, so a test can check that a
    failure reproduces from the report's settings."""
    from tito_audit.audit.generation import generation_profile, tools_of
    from tito_audit.audit.realization.realize import realize, turn_keys
    from tito_audit.audit.realization.reasoning_block import variant_reasoning
    from tito_audit.conversations.generate import generate_conversation
    from tito_audit.conversations.shapes import SHAPE_CHANGES, apply_changes
    from tito_audit.conversations.tools import tool_schemas
    from tito_audit.model.render import RenderError

    reasoning = variant_reasoning(renderer.text_or_none, tool_schemas())
    if given is not None:
        found = next((c for c in given if c.id == failure.conversation_id), None)
    elif failure.conversation_id.startswith("c") and failure.conversation_id[1:].isdigit():
        settings = report.settings
        profile = generation_profile(
            renderer.text_or_none, renderer.codec, report.model.model_id, reasoning, tools_of(settings)
        )
        found = generate_conversation(int(failure.conversation_id[1:]), settings.seed, settings.max_turns, profile)
    else:
        found = None
    if found is None:
        return None
    by_name = {change.name: change for change in SHAPE_CHANGES}
    shaped = apply_changes(found, tuple(by_name[n] for n in failure.shape_changes if n in by_name))
    try:
        renders = renderer.prefixes(shaped.messages, shaped.tools, turn_keys(shaped.messages))
    except RenderError:
        return shaped
    return realize(shaped, renders, renderer.prefixes, renderer.texts, reasoning.block).conversation
