"""Settings a template reads together (docs/contract.md, Conversations: "every variant, and the combinations of settings
a template reads together").

The one-setting sweep audits ``enable_thinking=true`` and ``preserve_thinking=true`` apart, but a loop runs them
together (thinking on with history reasoning kept), and a template may break only in that combination. Which pairs a
template reads together is found by rendering one probe rollout (reasoning, a call, its result, an answer, a user
turn): two settings are read together when the probe rendered with both differs from its render with either alone,
so that neither single variant audits what the pair does. Inputs that never change a tool rollout
(``add_vision_id`` without images) are never combined; a pair whose combination renders like one of its settings
(thinking on by default) needs no variant of its own.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from tito_audit.audit.result_conditions import RefusedSetting
from tito_audit.conversations.conversation import ASSISTANT, SYSTEM, TOOL, USER, Message
from tito_audit.conversations.tools import tool_schemas
from tito_audit.model.load_folder import LoadedModel
from tito_audit.model.render import Renderer, RenderError, RenderLimits
from tito_audit.model.tokens import TokenCodec
from tito_audit.model.variants import MAX_COMBINATIONS, TemplateInput, Variant, format_value

_CALL = {"id": "call_probe0001", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Oslo"}}}
PROBE: list[Message] = [
    {"role": SYSTEM, "content": "You are a helpful agent with tools."},
    {"role": USER, "content": "Weather in Oslo?"},
    {"role": ASSISTANT, "content": "", "reasoning_content": "I should call the tool.", "tool_calls": [_CALL]},
    {"role": TOOL, "tool_call_id": "call_probe0001", "name": "get_weather", "content": "Sunny, 21 C."},
    {"role": ASSISTANT, "content": "It is sunny.", "reasoning_content": "The tool answered."},
    {"role": USER, "content": "And tomorrow?"},
]


def settings_read_together(
    model: LoadedModel,
    codec: TokenCodec,
    inputs: Sequence[TemplateInput],
    pinned: dict[str, Any],
    limits: RenderLimits,
) -> list[Variant]:
    """Variants setting two inputs at once where the template reads them together: the probe rollout rendered with
    both differs from its render with either alone (so neither single variant audits it). At most
    :data:`tito_audit.model.variants.MAX_COMBINATIONS`, in a stable order."""
    tested = [item for item in inputs if item.tested and item.name not in pinned]
    cache: dict[tuple, tuple[str | None, ...]] = {}

    def render(kwargs: dict[str, Any]) -> tuple[str | None, ...]:
        key = tuple(sorted((k, repr(v)) for k, v in kwargs.items()))
        if key not in cache:
            cache[key] = _renders(model, codec, kwargs, limits)
        return cache[key]

    found: list[Variant] = []
    for index, first in enumerate(tested):
        for second in tested[index + 1 :]:
            for a in first.values:
                for b in second.values:
                    both = render({**pinned, first.name: a, second.name: b})
                    if both != render({**pinned, first.name: a}) and both != render({**pinned, second.name: b}):
                        kwargs = {**pinned, first.name: a, second.name: b}
                        name = ",".join(f"{k}={format_value(v)}" for k, v in sorted(kwargs.items()))
                        found.append(Variant(name, kwargs))
                    if len(found) >= MAX_COMBINATIONS:
                        return found
    return found


def refused_settings(
    model: LoadedModel, codec: TokenCodec, variants: Sequence[Variant], limits: RenderLimits
) -> tuple[list[Variant], list[RefusedSetting]]:
    """The variants the template can take, and those it cannot: a setting under which the probe rollout (with and
    without a system message) raises where the first variant (the defaults, or the pinned settings) renders it. A
    value of the wrong type (``True`` where the template adds a string) is such a setting; it is reported, never
    audited as the model's verdict."""
    if len(variants) < 2:
        return list(variants), []
    probes = [PROBE, PROBE[1:]]
    tools = tool_schemas()
    base = Renderer(model, codec, variants[0].kwargs, limits)
    renders = [base.text_or_none(probe, tools, True) is not None for probe in probes]
    kept, refused = [variants[0]], []
    for variant in variants[1:]:
        renderer = Renderer(model, codec, variant.kwargs, limits)
        error = None
        for probe, rendered in zip(probes, renders, strict=True):
            if not rendered:
                continue
            try:
                renderer.text(probe, tools, True)
            except RenderError as exc:
                error = str(exc)
                break
        if error is None:
            kept.append(variant)
        else:
            refused.append(RefusedSetting(variant.name, dict(variant.kwargs), error))
    return kept, refused


def without_refused(
    inputs: Sequence[TemplateInput], refused: Sequence[RefusedSetting], pinned: dict[str, Any]
) -> list[TemplateInput]:
    """``inputs`` without the values of the refused one-setting variants (never combined with another setting)."""
    gone = set()
    for item in refused:
        own = {name: value for name, value in item.kwargs.items() if name not in pinned}
        if len(own) == 1:
            gone |= {(name, repr(value)) for name, value in own.items()}
    return [replace(item, values=tuple(v for v in item.values if (item.name, repr(v)) not in gone)) for item in inputs]


def _renders(model: LoadedModel, codec: TokenCodec, kwargs: dict, limits: RenderLimits) -> tuple[str | None, ...]:
    renderer = Renderer(model, codec, kwargs, limits)
    tools = tool_schemas()
    return tuple(renderer.text_or_none(PROBE[:k], tools, True) for k in range(2, len(PROBE) + 1))
