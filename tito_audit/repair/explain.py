"""Explanations of audit failures: the template lines behind each divergence, and each cause confirmed.

For a failure, the two renders it compares are rendered again with source-line attribution
(:mod:`tito_audit.repair.attribution`); the lines that wrote the characters at the divergence are reported with
the variables they read. Each cause label is then checked on the failing case by a concrete test (see
:func:`confirm`), so a label is evidence, not a guess.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from tito_audit.audit.core.diff import first_difference
from tito_audit.audit.generation import generation_profile, tools_of
from tito_audit.audit.realization.realize import RealizedConversation, realize, turn_keys
from tito_audit.audit.realization.reasoning_block import variant_reasoning
from tito_audit.audit.results import AuditReport, Failure
from tito_audit.conversations.conversation import ASSISTANT, Conversation
from tito_audit.conversations.generate import generate_conversation
from tito_audit.conversations.shapes import SHAPE_CHANGES, apply_changes
from tito_audit.conversations.tools import tool_schemas
from tito_audit.errors import BadInputError
from tito_audit.model.attribution import AttributedRender, SourceLine, TemplateAttributor
from tito_audit.model.load_folder import JINJA, LoadedModel
from tito_audit.model.render import Renderer, RenderError, frozen_clock
from tito_audit.model.tokens import TokenCodec
from tito_audit.repair.confirm import Confirmation, confirm


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
    cases = []
    for variant in report.variants:
        for failure in variant.failures:
            if failure.aspect.startswith("drift") or failure.causes == ["noncanonical-split"]:
                continue
            if failure.check == "mask":  # its evidence (the template's own mask, the blocks' lines) is in the failure
                continue
            cases.append((len(cases) + 1, variant.name, failure))
    return cases


def audited_conversation(
    failure: Failure, report: AuditReport, given: Sequence[Conversation] | None, renderer: Renderer
) -> Conversation | None:
    """The conversation as the audit saw it: rebuilt (generated for the variant's reasoning kinds, or found
    among ``given``), in the shape it was accepted in, with every turn in its realizable form."""
    realized = audited_rollout(failure, report, given, renderer)
    return realized.conversation if isinstance(realized, RealizedConversation) else realized


def audited_rollout(
    failure: Failure, report: AuditReport, given: Sequence[Conversation] | None, renderer: Renderer
) -> RealizedConversation | Conversation | None:
    """:func:`audited_conversation` with the alignment of every turn when the renders succeed (what the model
    wrote in each turn); the bare conversation when they do not, None when it cannot be rebuilt."""
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
    return realize(shaped, renders, renderer.prefixes, renderer.texts, reasoning.block)


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
    def __init__(self, model: LoadedModel, codec: TokenCodec, report: AuditReport) -> None:
        self.model = model
        self.codec = codec
        self.report = report
        self.attributor = (
            TemplateAttributor(model.template_source) if model.backend == JINJA and model.template_source else None
        )

    def explain(
        self, case: int, variant_name: str, failure: Failure, conversations: Sequence[Conversation] | None = None
    ) -> Explanation:
        variant = next(v for v in self.report.variants if v.name == variant_name)
        renderer = Renderer(self.model, self.codec, variant.kwargs)
        with frozen_clock(self.model.template_source, _clock(self.report)):
            rebuilt = audited_rollout(failure, self.report, conversations, renderer)
        conversation = rebuilt.conversation if isinstance(rebuilt, RealizedConversation) else rebuilt
        explanation = Explanation(case, variant_name, failure, [], [])
        if failure.token_index is not None and failure.expected is not None:
            offset = failure.token_index - failure.expected.start
            head = failure.expected.ids[: max(0, offset)]
            explanation.byte_offset = len(self.codec.decode(head).encode("utf-8"))
        if conversation is None:
            explanation.note = "the conversation could not be rebuilt (not a generated conversation id)"
            return explanation
        keys = _renders_compared(failure, conversation)
        model_text = _closed_at_once(rebuilt, keys) if failure.check == "rollout" else None
        written: dict[tuple[int, bool], str] = {}
        if keys is not None and model_text is not None:  # the buffer held the prompt and the model's closed block
            keys = ((keys[0][0] - 1, True), keys[1])
            written[keys[0]] = model_text
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
            explanation.confirmations = [
                confirm(cause, failure, conversation, keys, texts, renderer, self.codec) for cause in failure.causes
            ]
        return explanation

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


def _closed_at_once(
    rebuilt: RealizedConversation | Conversation | None, keys: tuple[tuple[int, bool], tuple[int, bool]] | None
) -> str | None:
    """What the model wrote in the turn before a rollout step when it closed an open reasoning block at once and
    history does not render that turn as written (the buffer held it; no render of history shows it)."""
    if not isinstance(rebuilt, RealizedConversation) or keys is None:
        return None
    alignment = rebuilt.alignments.get(keys[0][0] - 1)
    return alignment.model_text if alignment is not None else None


def _clock(report: AuditReport):
    from datetime import datetime

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
