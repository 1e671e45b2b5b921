"""What a model behind the audited template writes, read from the template and its engine's parser: the
:class:`~tito_audit.conversations.profile.GenerationProfile` each variant's generated conversations follow.

- **Reasoning**: the forms the variant's generation prompt admits (:mod:`tito_audit.audit.realization.reasoning_block`).
- **Call ids**: where the template writes a call's id into the model's own turn, the model wrote it, in the form its
  engine's parser reads back (:func:`call_ids`).
- **Text a model never samples**: the template's reasoning closer (a sampled ``</think>`` ends the reasoning) and the
  tokenizer's control tokens.
- **The developer role**: whether the template renders a ``developer`` message at all.
- **Habits**: where the registry records that the family's model writes text before each call (gpt-oss's analysis
  message), call turns carry it but for a small share drawn without (:func:`rare_share_without_text`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from tito_audit.audit.realization.reasoning_block import VariantReasoning
from tito_audit.audit.results import Settings
from tito_audit.conversations.call_ids import KIMI, NINE, OPENAI, CallIdForm
from tito_audit.conversations.conversation import ASSISTANT, USER, Message
from tito_audit.conversations.profile import GenerationProfile
from tito_audit.conversations.reasoning_forms import OPEN
from tito_audit.conversations.tools import BUILT_IN, ToolSet, built_in_tools, user_tools
from tito_audit.model.registry import TEXT_BEFORE_CALLS, registry_habit, registry_parsers
from tito_audit.model.tokens import TokenCodec

TextRender = Callable[[Sequence[Message], "list[dict] | None", bool], "str | None"]

PARSER_ID_FORMS: dict[str, CallIdForm] = {"kimi_k2": KIMI}
"""Engine parsers that read the call id back from the model's text, and the form they accept (SGLang's ``kimi_k2``
detector takes the function's name from ``functions.NAME:INDEX``, and drops a call whose id is not in that form)."""

_PROBE_FUNCTION = "probe_lookup_qzxv"
_PROBE_TOOLS = [
    {
        "type": "function",
        "function": {
            "name": _PROBE_FUNCTION,
            "description": "Probe tool.",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        },
    }
]
_OPENAI_PROBE_ID = "call_Qz7xVprobe0Id0000000001"
_NINE_PROBE_ID = "Qz7xV0001"


def _call_turn(call_id: str) -> list[Message]:
    call = {"id": call_id, "type": "function", "function": {"name": _PROBE_FUNCTION, "arguments": {"city": "Oslo"}}}
    return [{"role": USER, "content": "Weather in Oslo?"}, {"role": ASSISTANT, "content": "", "tool_calls": [call]}]


def call_ids(render: TextRender, model_id: str | None) -> tuple[CallIdForm, bool]:
    """The call-id form the model writes, and whether the template writes ids into the model's own turn.

    - Its engine's parser reads the id back from the text (:data:`PARSER_ID_FORMS`, by the registry's documented
      parser for ``model_id``): that form.
    - The template writes the id into the assistant turn but not the function's name: the id carries the name
      (``functions.NAME:INDEX``).
    - The template refuses an OpenAI-style id but takes nine alphanumerics (Mistral's templates): nine.
    - Otherwise ids come from the engine (``call_`` and 24 alphanumerics), whether or not the template writes them.
    """
    messages = _call_turn(_OPENAI_PROBE_ID)
    before, turn = render(messages[:1], _PROBE_TOOLS, True), render(messages, _PROBE_TOOLS, False)
    if turn is None:
        nine = render(_call_turn(_NINE_PROBE_ID), _PROBE_TOOLS, False)
        if nine is None:
            return OPENAI, False
        form, probe_id, turn = NINE, _NINE_PROBE_ID, nine
    else:
        form, probe_id = OPENAI, _OPENAI_PROBE_ID
    written = turn[len(before) :] if before is not None and turn.startswith(before) else turn
    writes_ids = probe_id in written
    pair = registry_parsers(model_id) if model_id else None
    if pair is not None and pair.tool in PARSER_ID_FORMS:
        return PARSER_ID_FORMS[pair.tool], writes_ids
    if writes_ids and _PROBE_FUNCTION not in written:
        return KIMI, True
    return form, writes_ids


def renders_developer(render: TextRender) -> bool:
    """Whether the template renders a ``developer`` message's text (rather than refusing or dropping it)."""
    note = "Developer note qzxv."
    text = render([{"role": "developer", "content": note}, {"role": USER, "content": "Hello there."}], None, True)
    return text is not None and note in text


def unsampled_texts(codec: TokenCodec, reasoning: VariantReasoning) -> tuple[str, ...]:
    """Text a model never writes inside its reasoning, content or arguments: the reasoning closer the template
    writes (its markup, without the whitespace around it) and every control token of the vocabulary."""
    found = set(codec.control_ids_by_text)
    block = reasoning.block
    if block is not None and block.closer.strip():
        found.add(block.closer.strip())
    return tuple(sorted(found))


def generation_profile(
    render: TextRender, codec: TokenCodec, model_id: str | None, reasoning: VariantReasoning, tools: ToolSet
) -> GenerationProfile:
    """The profile of one variant (see the module docstring)."""
    form, model_writes_ids = call_ids(render, model_id)
    return GenerationProfile(
        reasoning=reasoning.kinds,
        prompt_opens_reasoning=reasoning.state == OPEN,
        call_ids=form,
        model_writes_ids=model_writes_ids,
        tools=tools,
        unsampled=unsampled_texts(codec, reasoning),
        developer=renders_developer(render),
        text_before_calls=rare_share_without_text(model_id),
    )


def rare_share_without_text(model_id: str | None) -> float | None:
    """The share of call turns drawn with no text before the call, where the registry records that the family's
    model writes text (its analysis) before each call (:func:`tito_audit.model.registry.registry_habit`)."""
    habit = registry_habit(model_id) if model_id else None
    return habit.rare_share if habit is not None and habit.habit == TEXT_BEFORE_CALLS else None


def tools_of(settings: Settings) -> ToolSet:
    """The tools a report's generated conversations called (to rebuild them: ``explain``, the fix search)."""
    if settings.tools_source == BUILT_IN or not settings.tool_schemas:
        return built_in_tools()
    return user_tools(settings.tool_schemas, settings.tools_source)
