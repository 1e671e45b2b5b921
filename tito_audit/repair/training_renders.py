"""The renders a training form is checked on: every prefix of the generated conversations, with and without a
generation prompt (none after an assistant message), under every variant's settings, for several templates at once;
and the assistant masks of those without a generation prompt.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, replace

from tito_audit.audit.audit_options import AuditOptions
from tito_audit.audit.results import AuditReport, VariantResult
from tito_audit.conversations.conversation import ASSISTANT, Conversation
from tito_audit.conversations.generate import generate
from tito_audit.conversations.profile import GenerationProfile
from tito_audit.model.assistant_mask import MaskedRender, assistant_mask
from tito_audit.model.load_folder import LoadedModel, codec_for
from tito_audit.model.render import Renderer, RenderError, frozen_clock

TRAINING_ORIGIN = "training form"


@dataclass(frozen=True)
class Compared:
    """One render of each template: the same messages, prefix and settings."""

    variant: str
    where: str
    """``conv-3 messages[:4] add_generation_prompt=False, variant default``."""
    texts: list[str | None]
    """Each template's text, None where it refuses."""
    assistants: int = 0
    """Assistant messages in the prefix rendered."""


def with_template(loaded: LoadedModel, source: str) -> LoadedModel:
    return replace(loaded, template_source=source, template_origin=TRAINING_ORIGIN, template_name=None)


def compared_conversations(options: AuditOptions) -> list[Conversation]:
    return list(generate(options.count, options.seed, options.max_turns, GenerationProfile(tools=options.tools)))


def prefix_keys(messages: list[dict]) -> list[tuple[int, bool]]:
    """``(k, gp)`` of every prefix: with and without a generation prompt, none after an assistant message."""
    return [
        (k, gp)
        for k in range(1, len(messages) + 1)
        for gp in ((False, True) if messages[k - 1].get("role") != ASSISTANT else (False,))
    ]


def _where(conversation: Conversation, k: int, gp: bool, variant: str) -> str:
    return f"{conversation.id} messages[:{k}] add_generation_prompt={gp}, variant {variant}"


@contextmanager
def _renderers(
    loaded: LoadedModel, sources: Sequence[str], variant: VariantResult, options: AuditOptions
) -> Iterator[list[Renderer]]:
    """A renderer of each of ``sources`` under ``variant``'s settings, their clock frozen while they render."""
    codec = codec_for(loaded)
    with ExitStack() as clocks:
        for source in sources:
            clocks.enter_context(frozen_clock(source, options.clock))
        # renderers that keep their renders in the model's memory (each form is compared with the serving one)
        limits = options.limits
        yield [Renderer(with_template(loaded, s), codec, variant.kwargs, limits, remember=True) for s in sources]


def each_render(
    loaded: LoadedModel, sources: Sequence[str], report: AuditReport, options: AuditOptions
) -> Iterator[Compared]:
    """Every render the training form is checked on, for each of ``sources`` (see the module docstring)."""
    conversations = compared_conversations(options)
    for variant in report.variants:
        with _renderers(loaded, sources, variant, options) as renderers:
            for conversation in conversations:
                messages = conversation.messages
                keys = prefix_keys(messages)
                texts = [renderer.texts(messages, conversation.tools, keys) for renderer in renderers]
                for k, gp in keys:
                    where = _where(conversation, k, gp, variant.name)
                    assistants = sum(m.get("role") == ASSISTANT for m in messages[:k])
                    yield Compared(variant.name, where, [each[(k, gp)] for each in texts], assistants)


def each_mask(
    loaded: LoadedModel, sources: Sequence[str], report: AuditReport, options: AuditOptions
) -> Iterator[tuple[str, list[MaskedRender | None]]]:
    """(where, each template's assistant mask, None where it refuses) for every render without a generation prompt."""
    conversations = compared_conversations(options)
    for variant in report.variants:
        with _renderers(loaded, sources, variant, options) as renderers:
            for conversation in conversations:
                for k in range(1, len(conversation.messages) + 1):
                    masks = [_mask_or_none(r, conversation.messages[:k], conversation.tools) for r in renderers]
                    yield _where(conversation, k, False, variant.name), masks


def _mask_or_none(renderer: Renderer, messages: list[dict], tools: list[dict] | None) -> MaskedRender | None:
    try:
        return assistant_mask(renderer, messages, tools)
    except RenderError:
        return None
