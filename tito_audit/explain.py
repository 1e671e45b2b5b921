"""Explanations of audit failures: the template lines behind each divergence, and each cause confirmed.

For a failure, the two renders it compares are rendered again with source-line attribution
(:mod:`tito_audit.attribution`); the lines that wrote the characters at the divergence are reported with
the variables they read. Each cause label is then checked on the failing case by a concrete test (see
:func:`confirm`), so a label is evidence, not a guess.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field

from tito_audit.attribution import AttributedRender, SourceLine, TemplateAttributor
from tito_audit.causes import EMPTY_THINK
from tito_audit.conversation import ASSISTANT, Conversation
from tito_audit.diff import first_difference, is_prefix
from tito_audit.errors import BadInputError
from tito_audit.generate import generate_conversation, tool_schemas
from tito_audit.model import JINJA, LoadedModel
from tito_audit.realize import RealizedConversation, realize, turn_keys
from tito_audit.reasoning_block import variant_reasoning
from tito_audit.render import ALTERNATE_CLOCK, Renderer, RenderError, frozen_clock
from tito_audit.results import AuditReport, Failure
from tito_audit.shapes import SHAPE_CHANGES, apply_changes
from tito_audit.tokens import TokenCodec


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
class Confirmation:
    cause: str
    confirmed: bool
    evidence: str


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
        found = generate_conversation(
            int(failure.conversation_id[1:]), settings.seed, settings.max_turns, reasoning.kinds
        )
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


# -- cause confirmations -------------------------------------------------------------------------------


def _reasonings(conversation: Conversation) -> list[str]:
    return [m["reasoning_content"].strip() for m in conversation.messages if (m.get("reasoning_content") or "").strip()]


def confirm(
    cause: str,
    failure: Failure,
    conversation: Conversation,
    keys: tuple[tuple[int, bool], tuple[int, bool]] | None,
    texts: dict[tuple[int, bool], str],
    renderer: Renderer,
    codec: TokenCodec,
) -> Confirmation:
    """A concrete check that the label holds on this case; ``confirmed=False`` says it could not be shown."""
    earlier = texts.get(keys[0], "") if keys else ""
    later = texts.get(keys[1], "") if keys else ""
    index = failure.char_index if failure.char_index is not None else (first_difference(earlier, later) or 0)
    messages, tools = conversation.messages, conversation.tools
    if cause == "reasoning-pruned":
        lost = [r for r in _reasonings(conversation) if earlier.count(r) > later.count(r)]
        return Confirmation(
            cause,
            bool(lost),
            f"reasoning present earlier, gone later: {lost[0][:60]!r}" if lost else "no reasoning text lost",
        )
    if cause == "empty-think-dropped":
        before, after = len(EMPTY_THINK.findall(earlier)), len(EMPTY_THINK.findall(later[: len(earlier) + 200]))
        match = EMPTY_THINK.search(earlier, max(0, index - 16))
        shown = match is not None and match.start() <= index + 2 and not later.startswith(match.group(0), match.start())
        return Confirmation(
            cause, shown, f"empty reasoning block at character {index} earlier ({before} earlier, {after} later)"
        )
    if cause == "gen-prompt-mismatch":
        j = max((j for j, m in enumerate(messages) if m.get("role") == ASSISTANT and j < failure.turn), default=None)
        if j is None:
            return Confirmation(cause, False, "no earlier assistant turn")
        prompt, turn = renderer.text(messages[:j], tools, True), renderer.text(messages[: j + 1], tools, False)
        at = first_difference(prompt, turn)
        return Confirmation(
            cause,
            at is not None,
            f"generation prompt of message {j} parts from its render at character {at}: "
            f"{prompt[at : at + 30]!r} vs {turn[at : at + 30]!r}"
            if at is not None
            else "generation prompt is a prefix",
        )
    if cause == "stop-token-swap":
        return Confirmation(
            cause,
            earlier[index : index + 12] != later[index : index + 12],
            f"earlier {earlier[index : index + 12]!r}, later {later[index : index + 12]!r}",
        )
    if cause == "tail-after-stop":
        rest = earlier[index:]
        return Confirmation(
            cause, not rest.strip() or len(rest) < 16, f"earlier ends with {rest!r} after the divergence"
        )
    if cause == "bpe-seam":
        if not keys:
            return Confirmation(cause, True, "the token windows differ while the text holds (see the diff)")
        text_ok = is_prefix(earlier, later)
        ids_ok = is_prefix(codec.encode(earlier), codec.encode(later))
        return Confirmation(
            cause, text_ok and not ids_ok, f"text prefix holds: {text_ok}; token prefix holds: {ids_ok}"
        )
    if cause == "closing-rewritten":
        return _confirm_closing(failure, messages, tools, renderer)
    if cause == "content-rewritten":
        changed = [
            m["content"].strip()[:60]
            for m in messages[: keys[1][0] if keys else len(messages)]
            if isinstance(m.get("content"), str)
            and m["content"].strip()
            and earlier.count(m["content"].strip()) != later.count(m["content"].strip())
        ]
        near = earlier[max(0, index - 40) : index + 40] != later[max(0, index - 40) : index + 40]
        return Confirmation(
            cause,
            bool(changed) or near,
            f"message text changed between the renders: {changed[0]!r}"
            if changed
            else "the text around the divergence differs",
        )
    if cause == "tool-call-reformatted":
        decoder = json.JSONDecoder()
        values = []
        for text in (earlier, later):
            start = text.find("{", max(0, index - 200))
            try:
                values.append(decoder.raw_decode(text[start:])[0] if start >= 0 else None)
            except ValueError:
                values.append(None)
        same = values[0] is not None and values[0] == values[1]
        return Confirmation(
            cause,
            same or values[0] != values[1],
            "the same arguments serialized differently" if same else "the tool call text differs",
        )
    if cause == "history-dependent-suffix":
        return Confirmation(
            cause,
            failure.expected is not None and failure.actual is not None and failure.expected.ids != failure.actual.ids,
            "stand-in suffix tokens differ from the real bridge",
        )
    if cause == "nondeterministic-template":
        key = keys[1] if keys else (len(messages), False)
        with frozen_clock(renderer.model.template_source, ALTERNATE_CLOCK):
            other = renderer.text(messages[: key[0]], tools, key[1])
        return Confirmation(cause, other != texts.get(key), "renders differ under another clock")
    if cause in ("special-token-literal", "normalization", "utf8-split", "noncanonical-split", "bos-duplication"):
        shown = (
            failure.expected is not None and failure.actual is not None and failure.expected.ids != failure.actual.ids
        )
        return Confirmation(cause, shown, "token windows differ as the label says (see the diff)")
    return Confirmation(cause, False, "no mechanical confirmation for this label")


def _confirm_closing(failure: Failure, messages: list, tools: list | None, renderer: Renderer) -> Confirmation:
    """The attributed message renders one closing when it is last and another once a message follows it."""
    cause, index = "closing-rewritten", failure.message_index
    if index is None or index + 1 >= len(messages):
        return Confirmation(cause, False, "no rewritten message was attributed")
    last = renderer.text(messages[: index + 1], tools, False)
    followed = renderer.text(messages[: index + 2], tools, False)
    at = first_difference(last, followed)
    content = messages[index].get("content")
    text = content.strip() if isinstance(content, str) else ""
    ends = last.rfind(text) + len(text) if text and text in last else None
    shown = at is not None and (ends is None or ends <= at)
    role = messages[index].get("role")
    evidence = (
        f"message {index} ({role}) closes with {last[at : at + 24]!r} when last and with {followed[at : at + 24]!r} "
        f"once message {index + 1} follows"
        if at is not None
        else f"message {index} ({role}) renders the same whether or not message {index + 1} follows"
    )
    return Confirmation(cause, shown, evidence)


def first_case_per_cause(cases: Sequence[tuple[int, str, Failure]]) -> list[tuple[int, str, Failure]]:
    """The first case that brings a cause not seen in an earlier case (what the reports show as examples)."""
    seen: set[str] = set()
    chosen = []
    for number, variant, failure in cases:
        if set(failure.causes) - seen:
            seen.update(failure.causes)
            chosen.append((number, variant, failure))
    return chosen


def explain_first_per_cause(report: AuditReport, model: LoadedModel, codec: TokenCodec) -> list[Explanation]:
    """Explanations of the first case that carries each cause."""
    explainer = Explainer(model, codec, report)
    return [explainer.explain(n, v, f) for n, v, f in first_case_per_cause(numbered_failures(report))]


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
