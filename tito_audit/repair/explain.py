"""Explanations of audit failures: the template lines behind each divergence, and each cause confirmed.

An explanation is built from what the audit kept for the failure (:class:`~tito_audit.audit.results.Walked`: the
conversation as it walked it, and what the model wrote in a turn history does not render as written); nothing of the
audit runs again. The two renders the failure compares are rendered again with source-line attribution
(:mod:`tito_audit.model.attribution`); the lines that wrote the characters at the divergence are reported with the
variables they read. Each cause label is then checked on the failing case by its own confirmation, written from the
cause's definition (:mod:`tito_audit.audit.core.causes`), so a label is evidence, not a guess: a confirmation can
disagree with the label.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime

from tito_audit.audit.core.causes import Case, Confirmation, ReasoningTags, confirm, quiet_only
from tito_audit.audit.core.diff import first_difference
from tito_audit.audit.realization.reasoning_block import probe_block
from tito_audit.audit.results import AuditReport, Failure, VariantResult
from tito_audit.conversations.conversation import ASSISTANT, Conversation
from tito_audit.errors import BadInputError
from tito_audit.model.attribution import AttributedRender, SourceLine, TemplateAttributor
from tito_audit.model.load_folder import JINJA, LoadedModel
from tito_audit.model.render import Renderer, RenderError, frozen_clock
from tito_audit.model.tokens import TokenCodec

Key = tuple[int, bool]


@dataclass
class SideEvidence:
    side: str
    """``earlier`` or ``later``."""
    render: str
    """Which render, e.g. ``render(M[:6], add_generation_prompt=True)``."""
    char_index: int
    excerpt: str
    lines: list[SourceLine] = field(default_factory=list)


@dataclass
class Explanation:
    case: int
    variant: str
    failure: Failure
    sides: list[SideEvidence]
    confirmations: list[Confirmation]
    byte_offset: int | None = None
    note: str = ""


@dataclass
class ExplainReport:
    model_id: str
    template_sha256: str | None
    cases: int
    causes: dict[str, list[int]]
    """Cause label -> numbers of the cases that carry it (all cases, every variant)."""
    explanations: list[Explanation]


def numbered_failures(report: AuditReport) -> list[tuple[int, str, Failure]]:
    """Every located failure with a stable case number (drift and non-canonical findings left out)."""
    cases: list[tuple[int, str, Failure]] = []
    for variant in report.variants:
        for failure in variant.failures:
            if failure.aspect.startswith("drift") or quiet_only(failure.causes):
                continue
            if failure.check == "mask":  # its evidence (the template's own mask, the blocks' lines) is in the failure
                continue
            cases.append((len(cases) + 1, variant.name, failure))
    return cases


def _renders_compared(failure: Failure, conversation: Conversation) -> tuple[tuple[int, bool], tuple[int, bool]] | None:
    """(earlier, later) prefix keys whose texts the failure compares (the earlier one approximately for rollouts)."""
    if failure.check == "append":
        return (failure.turn, False), (failure.turn + 1, False)
    if failure.check == "rollout":
        earlier = [j for j, m in enumerate(conversation.messages) if m.get("role") == ASSISTANT and j < failure.turn]
        if not earlier:
            return None
        return (earlier[-1] + 1, False), (failure.turn, True)
    return None


class Explainer:
    """Explains the failures of one report with the model it audited (no conversation is generated or realized again:
    each failure carries the conversation the audit walked)."""

    def __init__(self, model: LoadedModel, codec: TokenCodec, report: AuditReport) -> None:
        self.model = model
        self.codec = codec
        self.report = report
        self.attributor = (
            TemplateAttributor(model.template_source) if model.backend == JINJA and model.template_source else None
        )
        self._tags: dict[str, ReasoningTags | None] = {}

    def explain(self, case: int, variant_name: str, failure: Failure) -> Explanation:
        variant = next(v for v in self.report.variants if v.name == variant_name)
        renderer = Renderer(self.model, self.codec, variant.kwargs)
        explanation = Explanation(case, variant_name, failure, [], [])
        if failure.token_index is not None and failure.expected is not None:
            offset = failure.token_index - failure.expected.start
            head = failure.expected.ids[: max(0, offset)]
            explanation.byte_offset = len(self.codec.decode(head).encode("utf-8"))
        walked = failure.walked
        if walked is None:
            explanation.note = "the conversation the audit walked is not kept with this failure (a stored report)"
            return explanation
        conversation = walked.conversation
        keys = _renders_compared(failure, conversation)
        written: dict[Key, str] = {}
        if keys is not None and failure.check == "rollout" and walked.model_text is not None:
            # the buffer held the prompt and the model's closed block, which no render of history shows
            keys = ((keys[0][0] - 1, True), keys[1])
            written[keys[0]] = walked.model_text
        with frozen_clock(self.model.template_source, _clock(self.report)):
            try:
                texts = {
                    key: renderer.text(conversation.messages[: key[0]], conversation.tools, key[1])
                    for key in keys or ()
                }
            except RenderError as exc:
                explanation.note = f"re-rendering failed: {exc}"
                return explanation
            if keys:
                explanation.sides = self._sides(failure, conversation, keys, texts, variant.kwargs, written)
            texts = {key: text + written.get(key, "") for key, text in texts.items()}
            checked = Case(
                failure,
                conversation.messages,
                conversation.tools,
                renderer,
                self.codec,
                keys,
                texts,
                tuple(stop.text for stop in variant.stop_tokens),
                self._reasoning_tags(variant, renderer),
            )
            explanation.confirmations = [confirm(cause, checked) for cause in failure.causes]
        return explanation

    def _reasoning_tags(self, variant: VariantResult, renderer: Renderer) -> ReasoningTags | None:
        """The template's reasoning block under ``variant``, learnt once by rendering a marker as reasoning."""
        if variant.name not in self._tags:
            block = probe_block(renderer.text_or_none)
            self._tags[variant.name] = ReasoningTags.of(block.head, block.closer) if block is not None else None
        return self._tags[variant.name]

    def _sides(self, failure, conversation, keys, texts, kwargs, written) -> list[SideEvidence]:
        """Both sides around the divergence with the template lines that wrote them; ``written`` is text the model
        wrote after a side's render (a turn history does not render as written), shown but never attributed."""
        earlier_key, later_key = keys
        earlier, later = texts[earlier_key] + written.get(earlier_key, ""), texts[later_key]
        index = failure.char_index if failure.char_index is not None else (first_difference(earlier, later) or 0)
        sides = []
        for side, key, text in (("earlier", earlier_key, earlier), ("later", later_key, later)):
            label = f"render(M[:{key[0]}], add_generation_prompt={key[1]})"
            if key in written:
                label += " + what the model wrote after it"
            evidence = SideEvidence(side, label, index, text[max(0, index - 40) : index + 60])
            attributed = self._attributed(conversation, key, texts[key], kwargs)
            if attributed is not None and attributed.owners and self.attributor is not None:
                at = min(index, len(attributed.owners) - 1)
                written = attributed.lines_at(at, at + 24)
                # each written line with the two innermost if/for tags that decide it
                numbers = {c for n in written for c in [*self.attributor.conditions(n)[-2:], n]}
                evidence.lines = [self.attributor.line(n) for n in sorted(numbers)]
            sides.append(evidence)
        return sides

    def _attributed(
        self, conversation: Conversation, key: tuple[int, bool], text: str, kwargs: dict
    ) -> AttributedRender | None:
        if self.attributor is None:
            return None
        template_kwargs = {**self.model.tokenizer.special_tokens_map, **kwargs}
        return self.attributor.render(
            conversation.messages[: key[0]], conversation.tools, key[1], template_kwargs, text
        )


def _clock(report: AuditReport) -> datetime:
    return datetime.fromisoformat(report.settings.clock)


def first_case_per_cause(cases: Sequence[tuple[int, str, Failure]]) -> list[tuple[int, str, Failure]]:
    """The first case that brings a cause not seen in an earlier case (what the reports show as examples)."""
    seen: set[str] = set()
    chosen = []
    for number, variant, failure in cases:
        if set(failure.causes) - seen:
            seen.update(failure.causes)
            chosen.append((number, variant, failure))
    return chosen


def explain_report(
    report: AuditReport, model: LoadedModel, codec: TokenCodec, case: int | None = None
) -> ExplainReport:
    """Every distinct cause of ``report`` with its first case explained, or case number ``case`` alone."""
    cases = numbered_failures(report)
    if case is not None and not 1 <= case <= len(cases):
        raise BadInputError(f"--case {case}: there are {len(cases)} failing cases")
    chosen = [cases[case - 1]] if case is not None else first_case_per_cause(cases)
    explainer = Explainer(model, codec, report)
    causes: dict[str, list[int]] = {}
    for number, _, failure in cases:
        for cause in failure.causes:
            causes.setdefault(cause, []).append(number)
    return ExplainReport(
        model_id=report.model.model_id,
        template_sha256=report.model.template_sha256,
        cases=len(cases),
        causes=causes,
        explanations=[explainer.explain(n, v, f) for n, v, f in chosen],
    )


def compact(explanation: Explanation) -> str:
    """One line: the causes, where, and the template lines with what they read."""
    lines = sorted(
        {line.number: line for side in explanation.sides for line in side.lines}.values(),
        key=lambda source_line: source_line.number,
    )
    reads = sorted({r for line in lines for r in line.reads if "." in r or r.startswith("|") or r.endswith("()")})
    confirmed = [c.cause for c in explanation.confirmations if c.confirmed]
    where = f"lines {', '.join(str(line.number) for line in lines)}" if lines else "no template line attributed"
    return (
        f"case {explanation.case} ({', '.join(explanation.failure.causes)}): {where}"
        + (f"; reads {', '.join(reads[:6])}" if reads else "")
        + (f"; confirmed: {', '.join(confirmed)}" if confirmed else "; not confirmed mechanically")
    )
