"""One variant's audit: accept (or reshape) each conversation, realize its turns, run the checks, aggregate,
then the findings and the verdict.

The path of one conversation: :class:`~tito_audit.audit.realization.acceptance.Acceptor` (renders or a refusal) →
:func:`~tito_audit.audit.realization.realize.realize` (each assistant turn in a form a model could produce) →
:class:`~tito_audit.audit.checks.rollout_context.RolloutContext` → :func:`~tito_audit.audit.checks.run_checks` →
:class:`~tito_audit.audit.aggregate.VariantTotals`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence

from tito_audit.audit.aggregate import (
    VariantTotals,
    group_refusals,
    group_unrealized,
    keep_examples,
    steps_by_form,
    steps_by_shape,
)
from tito_audit.audit.audit_options import AuditOptions, ConversationSource, ProgressCallback
from tito_audit.audit.checks import run_checks
from tito_audit.audit.checks.mask import variant_notes as mask_notes
from tito_audit.audit.checks.rollout_context import CheckSetup, RolloutContext
from tito_audit.audit.conditions.verdict_conditions import conditions_of, tally_steps
from tito_audit.audit.findings import FindingContext, run_findings
from tito_audit.audit.generation import generation_profile
from tito_audit.audit.parse_step.parsed_rollout import parsed_rollout
from tito_audit.audit.parse_step.parsed_totals import ParsedTotals
from tito_audit.audit.parse_step.written_values import LiteralCache, ValueTotals, written_values
from tito_audit.audit.pending_plan import ParseStep, ParseSteps, PendingPlan
from tito_audit.audit.realization.acceptance import Acceptor, Renders
from tito_audit.audit.realization.realize import RealizedConversation, realize
from tito_audit.audit.realization.reasoning_block import VariantReasoning, variant_reasoning
from tito_audit.audit.realization.stops import collect_stop_tokens, model_end_token
from tito_audit.audit.results import Failure, StopToken, VariantResult, Walked
from tito_audit.audit.verdict import verdict_for
from tito_audit.conversations.conversation import USER, Conversation
from tito_audit.conversations.profile import GenerationProfile
from tito_audit.conversations.reasoning_forms import CLOSED, OPEN
from tito_audit.conversations.shapes import NOT_NATIVE_TOOLS
from tito_audit.conversations.tools import tool_schemas
from tito_audit.model.load_folder import LoadedModel
from tito_audit.model.registry import TEXT_BEFORE_CALLS, registry_habit
from tito_audit.model.render import Renderer, RenderError, frozen_clock
from tito_audit.model.threads import cached_property
from tito_audit.model.tokens import TokenCodec
from tito_audit.model.variants import Variant
from tito_audit.parse.output_layouts import OutputLayout, output_layout
from tito_audit.parse.parser import TEMPLATE, CompletionParser

_STATE_WORDS = {OPEN: "opens", CLOSED: "closes"}


class VariantAudit:
    """Audits one variant of one model."""

    def __init__(
        self,
        model: LoadedModel,
        codec: TokenCodec,
        variant: Variant,
        options: AuditOptions,
        parsers: Sequence[CompletionParser] = (),
    ) -> None:
        self.parsers = list(parsers)
        """Each engine's parser between each completion and the next prompt, one rollout with a parser each (none:
        the perfect inverse only)."""
        self.model = model
        self.codec = codec
        self.variant = variant
        self.options = options
        self.renderer = Renderer(model, codec, variant.kwargs, options.limits, remember=True)
        self.acceptor = Acceptor(self.renderer)

    def accept(self, conversation: Conversation):
        """See :meth:`tito_audit.audit.realization.acceptance.Acceptor.accept`."""
        return self.acceptor.accept(conversation)

    @cached_property
    def layout(self) -> OutputLayout | None:
        """The layout the family's model writes its turns in, where it differs from the template's history."""
        return output_layout(self.model.resolved.model_id)

    @cached_property
    def rare_form(self) -> str | None:
        """The words of the rare form of the family's habit of text before each call (None without that habit)."""
        model_id = self.model.resolved.model_id
        habit = registry_habit(model_id) if model_id else None
        return habit.rare_form if habit is not None and habit.habit == TEXT_BEFORE_CALLS else None

    @cached_property
    def profile(self) -> GenerationProfile:
        """What a model behind this variant's template writes (:mod:`tito_audit.audit.generation`)."""
        with frozen_clock(self.model.template_source, self.options.clock):
            return generation_profile(
                self.renderer.text_or_none,
                self.codec,
                self.model.resolved.model_id,
                self.reasoning,
                self.options.tools,
            )

    @cached_property
    def reasoning(self) -> VariantReasoning:
        """The template's reasoning block and the reasoning forms this variant's generation prompt admits."""
        with frozen_clock(self.model.template_source, self.options.clock):
            return variant_reasoning(self.renderer.text_or_none, tool_schemas())

    def realize(self, conversation: Conversation, renders: Renders) -> RealizedConversation:
        """``conversation`` with every assistant turn in a form a model could produce after its prompt."""
        return realize(conversation, renders, self.renderer.prefixes, self.renderer.texts, self.reasoning.block)

    def probe_prompt(self) -> str | None:
        """The generation prompt this variant writes after one user message (None when it refuses)."""
        with frozen_clock(self.model.template_source, self.options.clock):
            try:
                return self.renderer.text([{"role": USER, "content": "Hello there."}], None, True)
            except RenderError:
                return None

    def check_setup(self) -> tuple[list[StopToken], CheckSetup]:
        """The variant's stop tokens and the machinery the checks of all its conversations share (call it inside
        the template's frozen clock)."""
        model = self.model
        stop_tokens = collect_stop_tokens(
            self.renderer,
            self.codec,
            model.generation_eos_ids,
            self.options.extra_stop_tokens,
            model.resolved.model_id,
            model.text_level_only,
        )
        setup = CheckSetup.create(
            self.renderer,
            self.codec,
            [s.id for s in stop_tokens],
            self.options.seed,
            model.text_level_only,
            model_end_token(stop_tokens),
            self.rare_form,
        )
        return stop_tokens, setup

    def run(self, conversations_for: ConversationSource, progress: ProgressCallback | None) -> VariantResult:
        """Audit the conversations ``conversations_for`` gives for the reasoning kinds this variant allows, with the
        parsers given to this audit."""
        steps = ParseSteps(PendingPlan.known_now(self.parsers), contextlib.nullcontext)
        walk = self.walk(conversations_for, progress, steps)
        steps.finish()
        return walk.result()

    def walk(
        self, conversations_for: ConversationSource, progress: ProgressCallback | None, steps: ParseSteps
    ) -> VariantWalk:
        """Walk the conversations ``conversations_for`` gives: accept, realize and check each; hand each one's parse
        step (every parser, the written values) to ``steps``, which runs it once the parsers are known (see
        :mod:`tito_audit.audit.pending_plan`)."""
        options, model = self.options, self.model
        walk = VariantWalk(self)
        totals = walk.totals
        with frozen_clock(model.template_source, options.clock):
            walk.allowed = self.reasoning.kinds
            conversations = conversations_for(self.profile)
            walk.conversations = len(conversations)
            walk.stop_tokens, setup = self.check_setup()
            for number, conversation in enumerate(conversations, start=1):
                audited, renders, refusal = self.accept(conversation)
                if refusal is not None:
                    totals.refusals.append(refusal)
                if audited is None or renders is None:
                    totals.add_refused(conversation)
                else:
                    changes = list(refusal.accepted_after or ()) if refusal is not None else []
                    if audited.has_tool_traffic() and not set(changes) & NOT_NATIVE_TOOLS:
                        walk.native_tool_conversations += 1
                    realized = self.realize(audited, renders)
                    totals.unrealized += realized.unrealized
                    context = RolloutContext(setup, realized.conversation, realized.renders, realized.alignments)
                    outcome = run_checks(context)
                    keep_walked(outcome.failures, realized)
                    totals.add(outcome, changes)
                    totals.add_shapes(realized.conversation, outcome)
                    failing = {key[1]: f.causes for key, f in outcome.located if key[0] == 1 and key[2:] == (0, 0)}
                    steps.add(walk.parse_step(context, failing, changes))
                    last = (len(realized.conversation.messages), False)
                    walk.accepted.append((realized.conversation, realized.renders[last].text))
                if progress is not None:
                    progress(self.variant.name, number, len(conversations))
            walk.findings = run_findings(
                FindingContext(
                    model,
                    self.codec,
                    self.renderer,
                    options.clock,
                    walk.accepted,
                    totals.completions,
                    totals.gen_prompt_mismatches,
                )
            )
        return walk

    def _notes(self, totals: VariantTotals, allowed: tuple[str, ...] | None) -> None:
        """Sort the check tables and add the notes a reader needs beside them."""
        checks = totals.checks
        for check in checks.values():
            check.rows.sort(key=lambda row: row.category)
        notes = []
        if totals.completions_without_stop:
            notes.append(
                f"{totals.completions_without_stop} of {totals.completions} completions contain no stop token "
                "(the whole generated text was taken as sampled)"
            )
        if totals.final_steps:
            notes.append(
                f"{totals.final_steps} conversations end with messages after their last assistant turn: that final "
                "appended step is audited against the next prompt render(M, gp=True)"
            )
        if allowed is not None and self.options.generates:
            notes.append(
                f"the generation prompt {_STATE_WORDS.get(self.reasoning.state, 'limits')} the reasoning block: "
                f"generated assistant turns carry reasoning only as a model can produce it there: {', '.join(allowed)} "
                "(other kinds of the grid take the nearest of these)"
            )
        checks["rollout"].notes.extend(notes)
        checks["mask"].notes.extend(mask_notes(self.model))
        if self.model.text_level_only:
            checks["roundtrip"].notes.append("not applicable: text-level audit (no vocabulary)")
            checks["rollout"].notes.append("text stability only: seam and drift need the real vocabulary")


class VariantWalk:
    """One variant's conversations walked (:meth:`VariantAudit.walk`): the template's checks of each, and their parse
    steps as they run; :meth:`result` sums them into the variant's result (its parse steps run)."""

    def __init__(self, audit: VariantAudit) -> None:
        self.audit = audit
        self.totals = VariantTotals()
        self.accepted: list[tuple[Conversation, str]] = []
        self.native_tool_conversations = 0
        self.conversations = 0
        self.allowed: tuple[str, ...] | None = None
        self.stop_tokens: list[StopToken] = []
        self.findings: list = []
        self.parsers: list[CompletionParser] | None = None
        """None until the first parse step ran (a variant with no conversation audited runs none)."""
        self.parsed: list[ParsedTotals] = []
        self.values = ValueTotals()
        self._literals = LiteralCache()

    def parse_step(self, context: RolloutContext, failing: dict[int, list[str]], changes: list[str]) -> ParseStep:
        """The parse step of a walked conversation: each parser's rollout (``failing``: the causes of each step that
        fails without a parser), then the written values."""

        def step(parsers: list[CompletionParser]) -> None:
            if self.parsers is None:
                self.parsers = list(parsers)
                self.parsed = [ParsedTotals() for _ in self.parsers]
            seed, layout = self.audit.options.seed, self.audit.layout
            for parser, totals_parsed in zip(self.parsers, self.parsed, strict=True):
                totals_parsed.add(parsed_rollout(context, failing, parser, seed, layout), changes)
            values_parser = self.parsers[0] if self.parsers else None
            self.values.add(written_values(context, values_parser, seed, self._literals, layout))

        return step

    def result(self) -> VariantResult:
        """The variant's result (every conversation's parse step done: call :meth:`parse_kept` first)."""
        audit, totals, options = self.audit, self.totals, self.audit.options
        parsers = self.parsers or []
        values_parser = parsers[0] if parsers else None
        verdict, reason = verdict_for(totals.checks, self.native_tool_conversations)
        tallies = tally_steps(totals.conditions)
        forms = steps_by_form(totals.forms)
        audit._notes(totals, self.allowed)
        return VariantResult(
            name=audit.variant.name,
            kwargs=dict(audit.variant.kwargs),
            verdict=verdict,
            verdict_reason=reason,
            checks=totals.checks,
            failures=keep_examples(totals.failures, options.max_examples_per_group),
            refused=group_refusals(totals.refusals),
            drift=totals.drift,
            stop_tokens=self.stop_tokens,
            findings=self.findings,
            conversations=self.conversations,
            conversations_audited=len(self.accepted),
            unrealizable=group_unrealized(totals.unrealized),
            steps_by_form=forms,
            steps_by_shape=steps_by_shape(totals.shapes),
            assistant_turns=totals.completions,
            parses=[
                totals_parsed.result(
                    parser,
                    self.native_tool_conversations,
                    keep_examples(totals_parsed.failures, options.max_examples_per_group),
                    audit.rare_form,
                )
                for parser, totals_parsed in zip(parsers, self.parsed, strict=True)
            ],
            values=self.values.result(),
            values_parser=values_parser.name if values_parser is not None else TEMPLATE,
            value_failures=self.values.failures,
            conditions=conditions_of(tallies, verdict),
        )


def keep_walked(failures: Sequence[Failure], realized: RealizedConversation) -> None:
    """Keep on each failure what its explanation reads (:class:`~tito_audit.audit.results.Walked`): the conversation as
    audited, shared by all its failures (no copy: the failures kept after the audit bound what stays in memory), and
    for a rollout step, what the model wrote in the turn before it where history does not render that turn."""
    conversation = realized.conversation
    turns = conversation.assistant_indices()
    for failure in failures:
        model_text = None
        if failure.check == "rollout":
            before = max((j for j in turns if j < failure.turn), default=None)
            alignment = realized.alignments.get(before) if before is not None else None
            model_text = alignment.model_text if alignment is not None else None
        failure.walked = Walked(conversation, model_text)
