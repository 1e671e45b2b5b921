"""Result types: plain dataclasses that the audit produces and the formatters render.

Everything here is JSON-serialisable through :func:`plain` (:func:`dataclasses.asdict` without the fields marked
:data:`TRANSIENT`: what the audit keeps in memory for its explanations); the JSON report's schema is these classes
(docs: the JSON report reference, generated from them by docs/hooks.py).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field, fields, is_dataclass
from typing import Any

from tito_audit.audit.engine_result import EngineVerdict
from tito_audit.audit.result_conditions import CallTurns, Conditions, FormSteps, RefusedSetting, ShapeSteps
from tito_audit.audit.written_result import RewrittenValue, WrittenLayout, WrittenValue
from tito_audit.conversations.conversation import Conversation

SCHEMA_VERSION = 2
"""The JSON report's version: 2 gives one parser verdict per engine (``parsers``, each variant's ``parses``)."""

READY = "ready"
READY_TOOL_ONLY = "ready-tool-only"
BROKEN = "broken"
UNSUPPORTED = "unsupported"
VERDICT_ORDER = (READY, READY_TOOL_ONLY, BROKEN, UNSUPPORTED)
"""Best to worst; a model's verdict is its worst variant's."""


TRANSIENT = "transient"
"""Field metadata: kept in memory after the audit (for the explanations), never written to JSON or stored."""


def plain(value: Any) -> Any:
    """``value`` as JSON-like data: :func:`dataclasses.asdict`'s result, without the :data:`TRANSIENT` fields."""
    if is_dataclass(value) and not isinstance(value, type):
        return {f.name: plain(getattr(value, f.name)) for f in fields(value) if not f.metadata.get(TRANSIENT)}
    if isinstance(value, tuple) and hasattr(value, "_fields"):
        return type(value)(*[plain(item) for item in value])
    if isinstance(value, (list, tuple)):
        return type(value)(plain(item) for item in value)
    if isinstance(value, dict):
        return type(value)((plain(key), plain(item)) for key, item in value.items())
    return copy.deepcopy(value)


def worst_verdict(verdicts: list[str]) -> str:
    return max(verdicts, key=VERDICT_ORDER.index) if verdicts else UNSUPPORTED


@dataclass
class TokenWindow:
    """A few tokens around a divergence: ``start`` is the index of ``ids[0]`` in its sequence."""

    start: int
    ids: list[int]
    texts: list[str]


@dataclass(frozen=True)
class Walked:
    """What the audit walked for one failure, kept in memory for its explanation (never serialized): the conversation
    as audited (in the shape it was accepted in, every turn as realized), shared by the failures of that conversation,
    and what the model wrote in the assistant turn before a rollout step when history does not render it as written."""

    conversation: Conversation
    model_text: str | None = None


@dataclass
class Failure:
    """One failing case, with where it happened and why."""

    check: str
    """The check that failed: ``roundtrip``, ``append``, ``rollout``, ``bridge`` or ``mask``."""
    aspect: str
    """What failed: ``text``, ``tokens``, ``seam``, ``drift``, ``drift-noncanonical``, ``canonical``, ..."""
    category: str
    """The row of the check's table: appended role, step kind or completion kind."""
    conversation_id: str
    turn: int
    """Message index: the appended message (append), the next assistant turn (rollout, bridge)."""
    roles: list[str]
    causes: list[str]
    """Cause labels (:data:`tito_audit.audit.core.causes.CAUSES`; the mask check's own three; docs/contract.md)."""
    char_index: int | None = None
    """Where the two texts first differ (character), and the first differing token."""
    token_index: int | None = None
    expected: TokenWindow | None = None
    """The earlier side: rendered history or the token buffer."""
    actual: TokenWindow | None = None
    """The later side: the template's rendering after the append."""
    expected_text: str = ""
    actual_text: str = ""
    detail: str = ""
    shape_changes: list[str] = field(default_factory=list)
    """Shape changes applied to the conversation before it was audited (see refused shapes); empty if none."""
    message_index: int | None = None
    """Text divergences: the message whose rendering changed (None: the divergence lies in a generation
    prompt or after every message)."""
    message_role: str | None = None
    message_was_last: bool | None = None
    """Whether that message was the last one of the render that first wrote it (into the buffer, for the
    rollout; into ``render(M[:k])``, for append)."""
    walked: Walked | None = field(default=None, repr=False, compare=False, metadata={TRANSIENT: True})
    """What the audit walked for this failure (its explanation reads it; see :class:`Walked`). Never in the JSON
    report: None in a report read back from JSON."""


@dataclass
class CheckRow:
    category: str
    cases: int = 0
    passed: int = 0
    failed: int = 0
    refused: int = 0


@dataclass
class CheckResult:
    name: str
    rows: list[CheckRow] = field(default_factory=list)
    cause_counts: dict[str, int] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def row(self, category: str) -> CheckRow:
        for row in self.rows:
            if row.category == category:
                return row
        row = CheckRow(category)
        self.rows.append(row)
        return row

    @property
    def failed(self) -> int:
        return sum(r.failed for r in self.rows)


@dataclass
class RefusedShape:
    """Conversations the template refused, grouped by reason and by the retry that was accepted."""

    reason: str
    shapes: list[str]
    count: int
    example_conversation: str
    accepted_after: list[str] | None
    """The shape changes after which the template accepted them; None when nothing was accepted."""


@dataclass
class UnrealizableTurns:
    """Assistant turns whose original form no model could produce after this variant's generation prompt,
    grouped by (original form, form audited instead); counted beside refused shapes, never as failures or
    passes."""

    original: str
    audited_as: str
    reason: str
    count: int
    conversations: int
    shapes: list[str]
    example_conversation: str
    example_turn: int
    prompt: str
    """The generation prompt's text (evidence)."""


@dataclass
class DriftSummary:
    """Re-render drift: what a trainer that re-tokenizes would lose (reported beside the verdict)."""

    steps: int = 0
    canonical_drift_steps: int = 0
    noncanonical_drift_steps: int = 0
    rollouts: int = 0
    rollouts_with_mismatch: int = 0
    mismatched_tokens: int = 0
    mismatched_tokens_noncanonical: int = 0
    total_tokens: int = 0
    causes: dict[str, int] = field(default_factory=dict)


@dataclass
class StopToken:
    id: int
    text: str
    sources: list[str]


@dataclass
class Finding:
    """A model-level observation beside the verdict (nondeterminism, BOS duplication, ...)."""

    cause: str
    summary: str
    evidence: str = ""


@dataclass
class ParseResult:
    """The rollout with the engine's parser between each completion and the next prompt (docs/contract.md "The parse
    step"): its own step table and verdict, beside the perfect-inverse verdict of the same variant."""

    parser: str
    verdict: str
    verdict_reason: str
    check: CheckResult
    """Steps per kind (``rollout``'s rows): text and seam stability of the buffer against the prompt rendered from
    the parsed messages. A step that fails only with the parsed message is ``parse-lossy``; one that fails with the
    template's own message too keeps that divergence's causes."""
    fields: dict[str, int] = field(default_factory=dict)
    """``parse-lossy`` steps by the field the parse changed (``content whitespace``, ``call lost``, ...)."""
    failures: list[Failure] = field(default_factory=list)
    turns_parsed: int = 0
    turns_changed: int = 0
    """Parsed turns whose message differs from the template's in anything but the call ids."""
    written: list[WrittenLayout] = field(default_factory=list)
    conversations_skipped: int = 0
    """Conversations left out: the template quotes arguments given as JSON strings, which no model behind an engine
    writes (engines render arguments as objects)."""
    conversations_without_tools: int = 0
    """Conversations left out: tool calls without declared tools (an engine parses calls only when tools are)."""
    turns_in_model_layout: int = 0
    """Turns written in the family's own layout, not the template's history layout (gpt-oss's harmony)."""
    calls_in_reasoning: int = 0
    """Tool-call turns with reasoning also written with their calls inside it (a drawn form, beside the verdict)."""
    calls_in_reasoning_lost: int = 0
    """Of those, the turns whose calls the parser did not find."""
    engine: str = ""
    """The serving engine whose parsers these are (``sglang``, ``vllm``); "" for transformers' parser or a caller's."""
    calls: CallTurns | None = None
    """Call turns by form, and those whose calls the parser lost."""
    conditions: Conditions | None = None
    """When this verdict breaks, with the step tallies it is read from."""
    rewritten_values: list[RewrittenValue] = field(default_factory=list)
    """Values the parser read back as other values, per type (beside the verdict: a step that fails only for them
    holds in the verdict)."""
    rewrite_failures: list[Failure] = field(default_factory=list)
    """The first step each value type's rewrite broke (evidence; never counted in the verdict)."""


@dataclass
class VariantResult:
    name: str
    """The variant: ``default`` or the keyword-argument setting, e.g. ``enable_thinking=false``."""
    kwargs: dict[str, object]
    verdict: str
    """``ready``, ``ready-tool-only``, ``broken`` or ``unsupported`` (with the perfect inverse)."""
    verdict_reason: str
    checks: dict[str, CheckResult]
    """Per check (``roundtrip``, ``append``, ``rollout``, ``bridge``, ``mask``): its table."""
    failures: list[Failure]
    """Failing cases (all of them, or ``--examples N`` per group; counts stay complete)."""
    refused: list[RefusedShape]
    """Conversations the template refused, and the retry it accepted."""
    drift: DriftSummary
    """Re-render drift, beside the verdict."""
    stop_tokens: list[StopToken]
    findings: list[Finding]
    conversations: int
    conversations_audited: int
    """Of ``conversations``, those that rendered (in some accepted shape)."""
    unrealizable: list[UnrealizableTurns] = field(default_factory=list)
    assistant_turns: int = 0
    """Assistant turns audited (each in a form a model could produce, where one exists)."""
    steps_by_form: list[FormSteps] = field(default_factory=list)
    """Rollout steps by kind and by the reasoning form of the turn before them."""
    steps_by_shape: list[ShapeSteps] = field(default_factory=list)
    """Rollout steps of generated conversations by the shapes harnesses send."""
    parses: list[ParseResult] = field(default_factory=list)
    """The rollout with each engine's parser, in the order of the report's ``parsers`` (none: ``template``)."""
    values: list[WrittenValue] = field(default_factory=list)
    """Written values per type, through ``values_parser``: the first engine's (``template``: the perfect inverse)."""
    values_parser: str = "template"
    value_failures: list[Failure] = field(default_factory=list)
    """The first ``value-rewritten`` step of each value type (evidence; never counted in the verdict)."""
    conditions: Conditions | None = None
    """When this verdict breaks, with the step tallies it is read from."""


@dataclass
class Recommendation:
    """A setting of the template's keyword arguments that earns a better verdict than the model's (its worst
    variant): the way out that needs no patch."""

    setting: str
    """The variant's name (``preserve_thinking=true``), or ``default`` when the defaults beat another setting."""
    kwargs: dict[str, object]
    verdict: str
    """The verdict that setting earned in this audit."""
    evidence: str
    """The steps behind it, e.g. ``0 of 312 appended steps fail``."""
    changes_generation_prompt: bool
    """Whether the setting also changes the generation prompt (thinking off): the model runs differently."""
    avoid: list[str] = field(default_factory=list)
    """Settings whose verdict is worse (the reason the model's verdict is what it is)."""

    @property
    def suffices(self) -> bool:
        """It earns ``ready`` and leaves the generation prompt as it is (switching thinking off earns ready in
        many templates, but it changes how the model runs, so a fix is still worth looking for)."""
        return self.verdict == READY and not self.changes_generation_prompt

    def line(self) -> str:
        what = "the default settings" if self.setting == "default" else f"{self.setting}"
        line = f"recommended: {what} → {self.verdict} (verified: {self.evidence})"
        if self.changes_generation_prompt:
            line += "; note: it also changes the generation prompt"
        if self.avoid:
            line += "; avoid " + ", ".join(self.avoid)
        return line


@dataclass
class ModelInfo:
    model_id: str
    source: str
    """Where the model was found: ``local``, ``cache``, ``mirror`` or ``hub``."""
    path: str
    revision: str | None
    backend: str
    """``jinja`` (``apply_chat_template``), ``mistral-common`` or ``vllm-encoder`` (no Jinja, no variants)."""
    tokenizer_class: str
    template_name: str | None
    template_origin: str
    """``tokenizer``, the ``--template`` file's path, ``patched``, or the backend."""
    template_sha256: str | None
    available_templates: list[str]
    file_sha256: dict[str, str]
    """sha256 of every tokenizer, template and config file read."""
    generation_config_found: bool
    rendered_by: str = ""
    """What renders a model no template renders (``rendered by vLLM's DeepSeek V4 encoder (no Jinja template)``)."""


@dataclass
class Settings:
    seed: int
    count: int
    max_turns: int
    pinned_kwargs: dict[str, object]
    """Template keyword arguments pinned with ``--kwarg`` (not varied)."""
    clock: str
    """The date templates read through ``strftime_now`` (ISO)."""
    extra_stop_tokens: list[str]
    """Stop tokens given with ``--stop-token``."""
    conversations_source: str = "generated"
    """``generated``, or the real sources and scenario packs audited."""
    datasets: list[dict[str, object]] = field(default_factory=list)
    """Per loaded source: name, records read, conversations kept, skipped records by reason."""
    parsers: list[str] = field(default_factory=list)
    """The parsers used, one per engine (``sglang qwen25+qwen3``; empty: only the perfect inverse)."""
    tools: list[str] = field(default_factory=list)
    """The tools the generated conversations declared and called (their names)."""
    tools_source: str = "built-in"
    """``built-in``, or the ``--tools`` file they were read from."""
    tool_schemas: list[dict[str, object]] | None = None
    """The user's tools as given (None for the built-in ones), so that the conversations can be rebuilt."""


@dataclass
class AuditReport:
    schema_version: int
    tool_version: str
    library_versions: dict[str, str]
    """transformers, tokenizers, jinja2, huggingface_hub, mistral_common."""
    model: ModelInfo
    settings: Settings
    template_inputs: dict[str, list[object]]
    """The template's own keyword arguments found in its source, with the values that change its path."""
    verdict: str
    """The model's verdict: its worst variant's, with the perfect inverse (``template``)."""
    text_level_only: bool
    """True when the model has no vocabulary here: a stand-in tokenizer, text-level results only."""
    variants: list[VariantResult]
    notes: list[str]
    explanations: list[dict[str, object]] = field(default_factory=list)
    """For the first failure of each cause: the template lines behind it and the confirmation of each label
    (see ``tito-audit explain``); filled by ``audit`` on the command line."""
    recommendation: Recommendation | None = None
    """A setting that earns a better verdict than the model's, when there is one."""
    parsers: list[EngineVerdict] = field(default_factory=list)
    """The verdict with each engine's parser (none: ``--parser template``); ``verdict``: the perfect inverse's."""
    conditions: Conditions | None = None
    """When ``verdict`` (the perfect inverse's) breaks
    (:func:`tito_audit.audit.conditions.verdict_conditions.report_conditions`); each engine's parser verdict carries its
    own (``parsers``)."""
    refused_settings: list[RefusedSetting] = field(default_factory=list)
    """Settings of the sweep the template cannot take (not audited)."""
    generated_at: str = ""
    """When the report was made (ISO); with ``duration_seconds`` the only fields that vary."""
    duration_seconds: float = 0.0
